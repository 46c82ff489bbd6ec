//! cc-gateway: each run's git front door. The run's git remote is a Unix socket of
//! ours, bridged into its envelopes; fetches go upstream with the run's read token,
//! and each pushed ref is decided by the gate and forwarded with a one-push write
//! token. The agent holds no credential: the gateway adds it on the way out.
//! [`git`] is the protocol as pure functions (fuzzed); [`door`] serves it.
#![forbid(unsafe_code)]

pub mod egress;
pub mod git;
pub mod model;

#[cfg(feature = "service")]
pub mod door;
#[cfg(feature = "service")]
mod history;
#[cfg(feature = "service")]
mod peers;
#[cfg(feature = "service")]
mod service;
#[cfg(feature = "service")]
pub use service::{GatewayService, SPEC, service};
