//! The gate's pure logic, kept apart from every socket and file so it can be tested
//! exhaustively and fuzzed: what an action's effect classes are, which rules match it,
//! what a mode allows, what a shell command line would do, and what a run may reach
//! over the network.
//!
//! Nothing here performs I/O except [`rules::RuleSet::parse`], which reads a string.
//! The supervisor's gate (approvals, events, the RPC edge) is built on top.

#![forbid(unsafe_code)]

pub mod command;
pub mod denial;
pub mod effect;
pub mod egress;
pub mod evaluate;
pub mod grants;
pub mod paths;
pub mod roots;
pub mod rules;
pub mod tools;

pub use effect::{CommandClass, Decision, Effect, Mode};
pub use evaluate::{Action, Evaluation, Scope, evaluate};
pub use rules::{Rule, RuleError, RuleSet};
