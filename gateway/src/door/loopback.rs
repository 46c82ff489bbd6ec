//! A run without an envelope reaches its proxies on host loopback TCP ports, where
//! every local process can reach them too. No peer credential identifies a TCP
//! client, so each connection presents the run's proxy credential instead: HTTP's
//! `Proxy-Authorization: Basic`, or SOCKS5's user name and password (RFC 1929).
//! Without it the HTTP proxy answers 407 and the SOCKS proxy refuses the method.
//!
//! Honest limit: a process with no envelope has the host's network anyway. These
//! proxies give such a run the same allowlist, gate and accounting when its tools
//! honour the proxy variables; they cannot hold a program that ignores them.

use std::net::{Ipv4Addr, SocketAddr};

use base64::Engine;
use cc_proto::secret::PeerSecret;
use tokio::net::{TcpListener, TcpSocket};

/// The run's loopback ports and the credential each connection must present.
#[derive(Clone, PartialEq, Eq)]
pub struct Loopback {
    pub http_port: u16,
    pub socks_port: u16,
    pub username: String,
    password: PeerSecret,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Loopback {{ http: {}, socks: {}, user: {:?} }}", self.http_port, self.socks_port, self.username)
    }
}

impl Loopback {
    pub fn new(http_port: u32, socks_port: u32, username: String, password: String) -> Result<Loopback, String> {
        let port = |p: u32, what: &str| match u16::try_from(p) {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(format!("the {what} proxy's loopback port {p} is not a port")),
        };
        let (http_port, socks_port) = (port(http_port, "HTTP")?, port(socks_port, "SOCKS")?);
        if http_port == socks_port {
            return Err(format!("both loopback proxies were given port {http_port}"));
        }
        if username.is_empty() || username.len() > 255 || username.contains(':') {
            return Err("the proxy credential's user name must be 1–255 bytes without ':'".into());
        }
        let password = PeerSecret::try_from(password)
            .map_err(|_| "the proxy credential's password is not one the supervisor makes".to_owned())?;
        Ok(Loopback { http_port, socks_port, username, password })
    }

    /// Whether an HTTP request's `Proxy-Authorization` value is this run's credential.
    pub fn admits_http(&self, header: Option<&[u8]>) -> bool {
        let Some(encoded) = header.and_then(|h| h.strip_prefix(b"Basic ")) else { return false };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim_ascii()) else { return false };
        let Some(colon) = decoded.iter().position(|b| *b == b':') else { return false };
        self.admits(&decoded[..colon], &decoded[colon + 1..])
    }

    /// Whether a SOCKS5 user name and password are this run's credential.
    pub fn admits(&self, user: &[u8], password: &[u8]) -> bool {
        // Both compared whatever the first says, so the time taken tells nothing.
        let user_ok = user == self.username.as_bytes();
        self.password.matches(password) & user_ok
    }
}

/// Listens on `127.0.0.1:port`, taking the port over from a predecessor's connections
/// still in TIME_WAIT (a restarted gateway binds the same ports again).
pub fn listen(port: u16) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    // Loopback only: reno rather than a default BBR's pacing timers (see sandboxd's
    // bridges in its init). Best effort.
    let reno = std::ffi::OsString::from("reno");
    let _ = nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::TcpCongestion, &reno);
    socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
    socket.listen(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> (Loopback, String) {
        let secret = PeerSecret::generate().unwrap();
        let password = secret.expose().to_owned();
        (Loopback::new(41000, 41001, "run".into(), password.clone()).unwrap(), password)
    }

    #[test]
    fn only_the_runs_credential_is_admitted() {
        let (l, password) = loopback();
        let basic = |text: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(text));
        assert!(l.admits_http(Some(basic(&format!("run:{password}")).as_bytes())));
        for wrong in [format!("other:{password}"), "run:nope".into(), format!("run:{password}x"), "run".into()] {
            assert!(!l.admits_http(Some(basic(&wrong).as_bytes())), "{wrong}");
        }
        assert!(!l.admits_http(None));
        assert!(!l.admits_http(Some(b"Bearer abc")));
        assert!(!l.admits_http(Some(b"Basic !!!")));
        assert!(l.admits(b"run", password.as_bytes()));
        assert!(!l.admits(b"run", b""));
        assert!(!format!("{l:?}").contains(&password), "Debug never shows the password");
    }

    #[test]
    fn bad_settings_are_refused() {
        let good = PeerSecret::generate().unwrap().expose().to_owned();
        assert!(Loopback::new(0, 1, "u".into(), good.clone()).is_err());
        assert!(Loopback::new(70000, 1, "u".into(), good.clone()).is_err());
        assert!(Loopback::new(5, 5, "u".into(), good.clone()).is_err());
        assert!(Loopback::new(5, 6, "a:b".into(), good.clone()).is_err());
        assert!(Loopback::new(5, 6, "u".into(), "short".into()).is_err());
    }
}
