//! Egress rules: what a run may reach, as pure functions so that they are tested
//! exhaustively and fuzzed. A host a client names is validated and canonicalized
//! ([`host`]); the always-deny list ([`deny`]) beats the run's allowlist
//! ([`allowlist`]); and every address a name resolves to is checked ([`address`])
//! before the proxy dials it, in the order [`decide`] keeps. The gateway's proxies
//! read requests and apply these; the supervisor checks configuration with them.

pub mod address;
pub mod allowlist;
pub mod decide;
pub mod deny;
pub mod host;
