//! cc-broker: credential issuance and revocation. Each credential is a lease in the
//! broker's own database (`leases`); a run's leases are revoked at its end, and those
//! of runs that ended while the broker was down when the supervisor tells it the live
//! runs (`service`). Providers: the GitHub App flow and static tokens (`credentials`).
#![forbid(unsafe_code)]

pub mod config;
pub mod credentials;
pub mod github_app;
pub mod leases;
pub mod model_key;
pub mod revoke;
pub mod secret;
mod service;
pub mod static_tokens;

pub use service::{BrokerService, SPEC, StartError, broker, service};
