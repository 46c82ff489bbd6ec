//! Egress: what a run's proxies read, as pure functions so that they are tested
//! exhaustively and fuzzed. A request's head is read ([`http_request`], [`socks`]); the
//! rules that decide it (host, always-deny, allowlist, addresses) are the gate's, in
//! `cc_policy::egress`.

pub mod http_request;
pub mod socks;
