//! cc-supervisor: the root of the process tree and the only process clients talk to.
//!
//! It owns the data directory (one supervisor per directory), `state.db` and its event
//! log, the sandbox probe, and the lifecycle of every helper. [`daemon::run`] is the
//! whole start-up and shutdown sequence; `ccctl`, the client, is the `cc-client` crate.
#![forbid(unsafe_code)]

pub mod adapters;
pub mod api;
pub mod backoff;
pub mod channels;
pub mod cli;
pub mod conversations;
pub mod convert;
pub mod daemon;
pub mod events;
pub mod gate;
pub mod health;
pub mod helpers;
pub mod ids;
pub mod lock;
pub mod names;
pub mod reflection;
pub mod reload;
pub use cc_proto::paths;
pub mod registry;
pub mod rigs;
pub mod runs;
pub mod sd_notify;
pub mod store;
pub mod terminals;
