//! cc-helpers: how the supervisor keeps its helper processes (DESIGN.md §2).
//!
//! containerd's daemon keeps its shims' lives; this crate is that part of the
//! supervisor, apart from what it serves. [`helpers`] starts each helper with the
//! handshake (HELLO, bootstrap with a secret of its own, READY), waits on its exit and
//! starts it again after the [`backoff`]; [`health`] asks each for its status at an
//! interval and kills one that stops answering; [`channels`] is every call to a
//! helper: over its socket, to the pid the supervisor started, with its secret, within
//! a deadline.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod channels;
pub mod health;
pub mod helpers;

use cc_store::events;
