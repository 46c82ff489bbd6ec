//! The decision for one connection, in its fixed order (each step's refusal names
//! itself, and the first refusal ends it):
//!
//! 1. validate and 2. canonicalize the host ([`super::host`]);
//! 3. the always-deny list ([`super::deny`]), which beats everything;
//! 4. the run's allowlist ([`super::allowlist`]);
//! 5. (after one resolution, by the caller) every resolved address: internal ranges
//!    and the host's own addresses are refused unless an entry names that exact
//!    address and port;
//! 6. the caller dials the checked addresses, never the name again.
//!
//! The gate's `access_network` question comes after step 4, asked by the caller.

use std::net::{IpAddr, SocketAddr};

use super::allowlist::Allowlist;
use super::deny::DenyList;
use super::host::{Host, canonical};

/// Why a connection is refused: a stable code (the HTTP reason header, the event) and
/// the words for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub code: &'static str,
    pub message: String,
}

impl Denial {
    fn new(code: &'static str, message: impl Into<String>) -> Denial {
        Denial { code, message: message.into() }
    }
}

/// Codes of [`Denial`].
pub mod codes {
    pub const BAD_HOST: &str = "bad_host";
    pub const ALWAYS_DENIED: &str = "always_denied";
    pub const NOT_ALLOWED: &str = "not_on_allowlist";
    pub const INTERNAL_ADDRESS: &str = "internal_address";
    pub const NO_ADDRESS: &str = "no_address";
}

/// What a run's proxies decide with: read once at run start.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    pub deny: DenyList,
    pub allow: Allowlist,
}

/// A host that passed steps 1–4, and the entry that allowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub host: Host,
    pub port: u16,
    /// The allowlist entry, as written, and its source.
    pub rule: String,
}

impl EgressPolicy {
    /// Steps 1–4 for `raw:port`.
    pub fn admit(&self, raw: &str, port: u16) -> Result<Admitted, Denial> {
        let host = canonical(raw).map_err(|e| Denial::new(codes::BAD_HOST, e.to_string()))?;
        if port == 0 {
            return Err(Denial::new(codes::BAD_HOST, "port 0 is not a port"));
        }
        if let Some(why) = self.deny.denies(&host, port) {
            return Err(Denial::new(codes::ALWAYS_DENIED, why));
        }
        let entry = self.allow.matching(&host, port).ok_or_else(|| {
            Denial::new(codes::NOT_ALLOWED, format!("{host}:{port} is not on this run's network allowlist"))
        })?;
        Ok(Admitted { rule: format!("{entry} ({})", entry.source), host, port })
    }

    /// Step 5: every address `admitted` resolved to must pass; the result is what to
    /// dial. `own`: the host's interface addresses.
    pub fn check_addresses(
        &self,
        admitted: &Admitted,
        resolved: &[IpAddr],
        own: &[IpAddr],
    ) -> Result<Vec<SocketAddr>, Denial> {
        if resolved.is_empty() {
            return Err(Denial::new(codes::NO_ADDRESS, format!("{} resolves to no address", admitted.host)));
        }
        let mut dial = Vec::with_capacity(resolved.len());
        for ip in resolved {
            let ip = match ip {
                IpAddr::V6(v6) => super::host::unmapped(*v6),
                v4 => *v4,
            };
            if let Some(why) = self.deny.denies_address(ip) {
                return Err(Denial::new(codes::ALWAYS_DENIED, format!("{} resolves to {ip}: {why}", admitted.host)));
            }
            if let Some(why) = super::address::forbidden(ip, own)
                && self.allow.names_exact_address(ip, admitted.port).is_none()
            {
                return Err(Denial::new(
                    codes::INTERNAL_ADDRESS,
                    format!(
                        "{} resolves to {ip}: {why} (allow that exact address and port to reach it)",
                        admitted.host
                    ),
                ));
            }
            dial.push(SocketAddr::new(ip, admitted.port));
        }
        Ok(dial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::allowlist::Entry;

    fn policy(allow: &str) -> EgressPolicy {
        let telemetry = vec![Entry::parse("telemetry.example", "config").unwrap()];
        EgressPolicy { deny: DenyList::new(telemetry), allow: Allowlist::parse(allow, "allow.txt").unwrap() }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_order_is_validate_deny_allow_then_addresses() {
        let p = policy("*.example.test\ntelemetry.example\n169.254.169.254\n127.0.0.1:8080\n");
        assert_eq!(p.admit("a\r\nb.example.test", 443).unwrap_err().code, codes::BAD_HOST);
        assert_eq!(p.admit("telemetry.example", 443).unwrap_err().code, codes::ALWAYS_DENIED, "on both lists: denied");
        assert_eq!(p.admit("169.254.169.254", 80).unwrap_err().code, codes::ALWAYS_DENIED);
        assert_eq!(p.admit("other.test", 443).unwrap_err().code, codes::NOT_ALLOWED);
        let admitted = p.admit("API.Example.Test.", 443).unwrap();
        assert_eq!(admitted.host, Host::Name("api.example.test".into()));
        assert_eq!(admitted.rule, "*.example.test (allow.txt:1)");

        // Rebinding: an allowed name that resolves inward is refused, every address counts.
        let rebound = p.check_addresses(&admitted, &ips(&["93.184.216.34", "127.0.0.1"]), &[]).unwrap_err();
        assert_eq!(rebound.code, codes::INTERNAL_ADDRESS);
        assert!(rebound.message.contains("resolves to 127.0.0.1"), "{}", rebound.message);
        let metadata = p.check_addresses(&admitted, &ips(&["::ffff:169.254.169.254"]), &[]).unwrap_err();
        assert_eq!(metadata.code, codes::ALWAYS_DENIED);
        assert_eq!(p.check_addresses(&admitted, &[], &[]).unwrap_err().code, codes::NO_ADDRESS);
        let own = ips(&["203.0.114.9"]);
        assert_eq!(p.check_addresses(&admitted, &own, &own).unwrap_err().code, codes::INTERNAL_ADDRESS);
        let dial = p.check_addresses(&admitted, &ips(&["93.184.216.34", "::ffff:8.8.8.8"]), &[]).unwrap();
        assert_eq!(dial, vec!["93.184.216.34:443".parse().unwrap(), "8.8.8.8:443".parse().unwrap()]);
    }

    #[test]
    fn an_exact_address_and_port_lifts_the_internal_check_for_itself_only() {
        let p = policy("127.0.0.1:8080\nlocal.example.test:8080\n");
        let admitted = p.admit("0x7f.1", 8080).unwrap();
        assert_eq!(p.check_addresses(&admitted, &ips(&["127.0.0.1"]), &[]).unwrap().len(), 1);
        let named = p.admit("local.example.test", 8080).unwrap();
        assert!(p.check_addresses(&named, &ips(&["127.0.0.1"]), &[]).is_ok(), "the exact address and port are allowed");
        assert!(p.check_addresses(&named, &ips(&["127.0.0.2"]), &[]).is_err());
        assert!(p.admit("127.0.0.1", 8081).is_err());
    }
}
