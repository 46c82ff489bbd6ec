//! cc-store: what the supervisor keeps on disk, in `state.db` (DESIGN.md §10).
//!
//! Only the supervisor links this crate: it is the one process that holds `state.db`.
//! [`store`] opens the file and migrates its schema; [`registry`] holds workspaces,
//! registered checkouts and conversations; [`runs`] holds runs' rows and the states a
//! run may pass through; [`events`] is the event log every process's story ends in,
//! with what one run may write to it bounded; [`traffic`] is what runs' egress proxies
//! carried; [`model_usage`] what their model requests cost; [`ids`] are the ids those rows carry, and [`names`] the names that become
//! their directories.
#![forbid(unsafe_code)]

pub mod events;
pub mod ids;
pub mod model_usage;
pub mod names;
pub mod registry;
pub mod runs;
pub mod store;
pub mod traffic;

pub use store::{Store, StoreError};
