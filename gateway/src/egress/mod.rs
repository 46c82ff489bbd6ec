//! Egress: what a run's proxies read and decide, as pure functions so that they are
//! tested exhaustively and fuzzed. A request's head is read ([`http_request`],
//! [`socks`]); its host is validated and canonicalized ([`host`]); the always-deny
//! list ([`deny`]) beats the run's allowlist ([`allowlist`]); and every address a name
//! resolves to is checked ([`address`]) before the proxy dials it, in the order
//! [`decide`] keeps.

pub mod address;
pub mod allowlist;
pub mod decide;
pub mod deny;
pub mod host;
pub mod http_request;
pub mod socks;
