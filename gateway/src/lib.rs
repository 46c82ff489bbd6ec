//! cc-gateway: the git push gateway and the per-run egress proxies. The helper serves
//! health and its status; [`git`] holds the push protocol the per-run front door is
//! being built on.
#![forbid(unsafe_code)]

pub mod git;

#[cfg(feature = "service")]
mod service;
#[cfg(feature = "service")]
pub use service::{GatewayService, SPEC, service};
