//! The always-deny list: cloud metadata endpoints in every spelling, and telemetry
//! destinations from configuration. It beats every allowlist entry and every rule: a
//! host on both lists is denied.

use std::net::IpAddr;

use super::allowlist::Entry;
use super::host::Host;

/// Metadata services' names: Google's, AWS's, and the bare names some images resolve.
pub const METADATA_NAMES: &[&str] =
    &["metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"];

/// Metadata services' addresses: AWS (IPv4 and IPv6, the ECS task endpoint and the
/// time and DNS services beside them), Alibaba, Azure's wire server, Oracle's.
pub const METADATA_ADDRESSES: &[&str] = &[
    "169.254.169.254",
    "169.254.170.2",
    "169.254.169.123",
    "169.254.169.253",
    "fd00:ec2::254",
    "fd00:ec2::23",
    "100.100.100.200",
    "168.63.129.16",
    "192.0.0.192",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyList {
    addresses: Vec<IpAddr>,
    names: Vec<String>,
    /// Telemetry destinations from configuration (names, `*.name`, addresses).
    configured: Vec<Entry>,
}

impl DenyList {
    /// The metadata endpoints, and `telemetry` from configuration.
    pub fn new(telemetry: Vec<Entry>) -> DenyList {
        DenyList {
            addresses: METADATA_ADDRESSES.iter().filter_map(|a| a.parse().ok()).collect(),
            names: METADATA_NAMES.iter().map(|n| (*n).to_owned()).collect(),
            configured: telemetry,
        }
    }

    /// Why `host:port` is always denied, if it is.
    pub fn denies(&self, host: &Host, port: u16) -> Option<String> {
        match host {
            Host::Ip(ip) => self.denies_address(*ip),
            Host::Name(name) if self.names.iter().any(|n| n == name) => {
                Some(format!("{name} is a cloud metadata service"))
            }
            Host::Name(_) => self
                .configured
                .iter()
                .find(|e| e.matches(host, port))
                .map(|e| format!("{host} is on the always-deny list ({e}, {})", e.source)),
        }
    }

    /// Why a resolved (or literal) address is always denied, if it is; an IPv6 form
    /// that embeds a metadata address is that address.
    pub fn denies_address(&self, ip: IpAddr) -> Option<String> {
        let embedded = match ip {
            IpAddr::V6(v6) => super::address::embedded_ipv4(v6).map(|(v4, _)| IpAddr::V4(v4)),
            IpAddr::V4(_) => None,
        };
        for candidate in [Some(ip), embedded].into_iter().flatten() {
            if self.addresses.contains(&candidate) {
                return Some(format!("{ip} is a cloud metadata service"));
            }
            if let Some(e) =
                self.configured.iter().find(|e| matches!(e.pattern, super::allowlist::Pattern::Ip(a) if a == candidate))
            {
                return Some(format!("{ip} is on the always-deny list ({e}, {})", e.source));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::host::canonical;

    #[test]
    fn metadata_is_denied_in_every_spelling() {
        let deny = DenyList::new(vec![]);
        for spelling in [
            "169.254.169.254",
            "2852039166",
            "0xa9.0xfe.0xa9.0xfe",
            "[::ffff:169.254.169.254]",
            "[::ffff:0:169.254.169.254]",
            "[64:ff9b::a9fe:a9fe]",
            "[2002:a9fe:a9fe::]",
            "[fd00:ec2::254]",
            "metadata.google.internal",
            "METADATA.google.internal.",
            "100.100.100.200",
            "168.63.129.16",
        ] {
            let host = canonical(spelling).unwrap();
            assert!(deny.denies(&host, 80).is_some(), "{spelling}");
        }
        assert!(deny.denies(&canonical("example.com").unwrap(), 80).is_none());
    }

    #[test]
    fn configured_telemetry_is_denied() {
        let telemetry = vec![Entry::parse("*.telemetry.example", "config.toml").unwrap()];
        let deny = DenyList::new(telemetry);
        let why = deny.denies(&canonical("a.telemetry.example").unwrap(), 443).unwrap();
        assert!(why.contains("always-deny") && why.contains("config.toml"), "{why}");
    }
}
