//! Authorization of every RPC before its handler runs.
//!
//! Two checks, both on the server side of every socket we bind:
//! 1. the peer's uid, read by the kernel (`SO_PEERCRED`) when it connected, must be our own or root;
//! 2. on helper sockets, the peer must name itself (`x-cc-peer`) and present the secret the
//!    supervisor handed this helper for that peer (`x-cc-secret`).
//!
//! The decision is a pure function ([`PeerGuard::check`]) so that it is tested without sockets.

use std::collections::BTreeMap;
use std::sync::Arc;

use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

use crate::secret::PeerSecret;

/// Metadata key naming the calling peer.
pub const PEER_HEADER: &str = "x-cc-peer";
/// Metadata key carrying the peer's secret.
pub const SECRET_HEADER: &str = "x-cc-secret";

/// The authenticated caller, put in the request's extensions for handlers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    /// The peer name when the socket requires secrets.
    pub peer: Option<String>,
}

/// Who may call a socket.
#[derive(Clone, Debug)]
pub struct PeerGuard {
    allowed_uids: Arc<[u32]>,
    secrets: Option<Arc<BTreeMap<String, PeerSecret>>>,
}

impl PeerGuard {
    /// Our own effective uid and root; no secret. The client API uses this.
    pub fn owner_or_root() -> Self {
        let me = nix::unistd::geteuid().as_raw();
        let allowed: Vec<u32> = if me == 0 { vec![0] } else { vec![me, 0] };
        Self { allowed_uids: allowed.into(), secrets: None }
    }

    /// Additionally require one of these peers' secrets (helper sockets).
    pub fn requiring_secrets(mut self, secrets: BTreeMap<String, PeerSecret>) -> Self {
        self.secrets = Some(Arc::new(secrets));
        self
    }

    /// The decision for one request: `uid` from the kernel, `peer` and `secret` from metadata.
    pub fn check(&self, uid: Option<u32>, peer: Option<&[u8]>, secret: Option<&[u8]>) -> Result<Caller, Status> {
        let uid =
            uid.ok_or_else(|| Status::permission_denied("peer credentials unavailable: refusing the connection"))?;
        if !self.allowed_uids.contains(&uid) {
            return Err(Status::permission_denied(format!(
                "peer uid {uid} may not use this socket (only uid {} may)",
                self.allowed_uids.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
            )));
        }
        let Some(secrets) = &self.secrets else {
            return Ok(Caller { uid, peer: None });
        };
        let peer = peer.ok_or_else(|| {
            Status::unauthenticated(format!("missing {PEER_HEADER}: this socket serves only known peers"))
        })?;
        let secret = secret.ok_or_else(|| {
            Status::unauthenticated(format!("missing {SECRET_HEADER}: this socket serves only known peers"))
        })?;
        // Look the peer up by name, but answer the same for an unknown peer and a wrong
        // secret so that a caller learns nothing about which peers exist.
        let known = std::str::from_utf8(peer).ok().and_then(|name| secrets.get_key_value(name));
        match known {
            Some((name, expected)) if expected.matches(secret) => Ok(Caller { uid, peer: Some(name.clone()) }),
            _ => Err(Status::unauthenticated("peer secret rejected")),
        }
    }
}

/// For a helper's handler: refuses a caller whose peer secret named none of `peers`
/// (the guard has already checked that secret).
pub fn require_peer<T>(request: &Request<T>, peers: &[&str]) -> Result<(), Status> {
    match request.extensions().get::<Caller>().and_then(|c| c.peer.as_deref()) {
        Some(peer) if peers.contains(&peer) => Ok(()),
        other => Err(Status::permission_denied(format!(
            "only the {} may call this (the caller is {})",
            peers.join(" or the "),
            other.unwrap_or("unknown")
        ))),
    }
}

impl tonic::service::Interceptor for PeerGuard {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let uid = request.extensions().get::<UdsConnectInfo>().and_then(|info| info.peer_cred).map(|cred| cred.uid());
        let meta = request.metadata();
        let peer = meta.get(PEER_HEADER).map(|v| v.as_bytes());
        let secret = meta.get(SECRET_HEADER).map(|v| v.as_bytes());
        let caller = self.check(uid, peer, secret)?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard_with(peer: &str, secret: &PeerSecret) -> PeerGuard {
        PeerGuard { allowed_uids: vec![1000, 0].into(), secrets: None }
            .requiring_secrets(BTreeMap::from([(peer.to_owned(), secret.clone())]))
    }

    #[test]
    fn uid_check() {
        let g = PeerGuard { allowed_uids: vec![1000, 0].into(), secrets: None };
        assert_eq!(g.check(Some(1000), None, None).unwrap().uid, 1000);
        assert!(g.check(Some(0), None, None).is_ok());
        let err = g.check(Some(1001), None, None).unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert!(err.message().contains("1001"), "{}", err.message());
        assert!(g.check(None, None, None).is_err());
    }

    #[test]
    fn secret_check() {
        let s = PeerSecret::generate().unwrap();
        let g = guard_with("supervisor", &s);
        let ok = g.check(Some(0), Some(b"supervisor"), Some(s.expose().as_bytes())).unwrap();
        assert_eq!(ok.peer.as_deref(), Some("supervisor"));

        let other = PeerSecret::generate().unwrap();
        for (peer, secret) in [
            (None, Some(s.expose().as_bytes())),
            (Some(&b"supervisor"[..]), None),
            (Some(&b"supervisor"[..]), Some(other.expose().as_bytes())),
            (Some(&b"gateway"[..]), Some(s.expose().as_bytes())),
            (Some(&b"\xff\xfe"[..]), Some(s.expose().as_bytes())),
            (Some(&b"supervisor"[..]), Some(&b""[..])),
        ] {
            let err = g.check(Some(0), peer, secret).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated);
        }
        // The right secret from the wrong uid is still refused.
        assert_eq!(
            g.check(Some(4242), Some(b"supervisor"), Some(s.expose().as_bytes())).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }
}
