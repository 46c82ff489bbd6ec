//! cc-supervisor: the root of the process tree and the only process clients talk to.
//!
//! It owns the data directory (one supervisor per directory), `state.db` and its event
//! log, the sandbox probe, and the lifecycle of every helper. [`daemon::run`] is the
//! whole start-up and shutdown sequence; `ccctl`, the client, is the `cc-client` crate.
//! What it keeps lives in crates of its own, re-exported here by the names its modules
//! use: `state.db` and the event log in `cc-store`, the helpers' care in `cc-helpers`,
//! the gate (rules in force, approvals, its service) in `cc-gate`, the data directory's
//! lock and systemd's readiness word in `cc-host`.
#![forbid(unsafe_code)]

pub mod adapters;
pub mod api;
pub mod cli;
pub mod conversations;
pub mod convert;
pub mod daemon;
pub mod reload;
pub mod rigs;
pub mod runs;
pub mod terminals;

pub use cc_gate as gate;
pub use cc_helpers::{backoff, channels, health, helpers};
pub use cc_host::{lock, sd_notify};
pub use cc_proto::{paths, reflection};
pub use cc_store::{events, ids, names, registry, store};
