//! Which addresses a run may never reach through its proxies, whatever name led there:
//! loopback, private, link-local, CGNAT, multicast, unspecified and reserved ranges,
//! the host's own interface addresses, and every IPv6 form that embeds an IPv4 address
//! (mapped, compatible, translated, NAT64, 6to4, Teredo), judged by the address it
//! embeds.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused, in words for the event and the client.
pub fn forbidden(ip: IpAddr, own: &[IpAddr]) -> Option<String> {
    if own.contains(&ip) {
        return Some(format!("{ip} is an address of this host"));
    }
    match ip {
        IpAddr::V4(v4) => v4_class(v4).map(|class| format!("{v4} is {class}")),
        IpAddr::V6(v6) => {
            if let Some(class) = v6_class(v6) {
                return Some(format!("{v6} is {class}"));
            }
            let (v4, form) = embedded_ipv4(v6)?;
            if own.contains(&IpAddr::V4(v4)) {
                return Some(format!("{v6} embeds {v4} ({form}), an address of this host"));
            }
            v4_class(v4).map(|class| format!("{v6} embeds {v4} ({form}), which is {class}"))
        }
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    const CLASSES: &[([u8; 4], u32, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified (0.0.0.0/8)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([10, 0, 0, 0], 8, "private (10/8)"),
        ([172, 16, 0, 0], 12, "private (172.16/12)"),
        ([192, 168, 0, 0], 16, "private (192.168/16)"),
        ([169, 254, 0, 0], 16, "link-local (where cloud metadata lives)"),
        ([100, 64, 0, 0], 10, "shared address space (CGNAT, 100.64/10)"),
        ([192, 0, 0, 0], 24, "IETF protocol assignments (192.0.0/24)"),
        ([192, 0, 2, 0], 24, "documentation (192.0.2/24)"),
        ([198, 51, 100, 0], 24, "documentation (198.51.100/24)"),
        ([203, 0, 113, 0], 24, "documentation (203.0.113/24)"),
        ([198, 18, 0, 0], 15, "benchmarking (198.18/15)"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([240, 0, 0, 0], 4, "reserved (240/4, broadcast included)"),
    ];
    CLASSES.iter().find(|(net, prefix, _)| in_v4(ip, *net, *prefix)).map(|(_, _, class)| *class)
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if s[0] & 0xfe00 == 0xfc00 {
        Some("unique local (fc00::/7)")
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some("link-local (fe80::/10)")
    } else if s[0] & 0xffc0 == 0xfec0 {
        Some("site-local (fec0::/10)")
    } else if s[0] & 0xff00 == 0xff00 {
        Some("multicast")
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        Some("documentation (2001:db8::/32)")
    } else if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
        Some("discard-only (100::/64)")
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address carries, and the form it is carried in.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<(Ipv4Addr, &'static str)> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some((v4, "IPv4-mapped"));
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        return Some((low, "IPv4-compatible"));
    }
    // SIIT (RFC 2765): a stateless translator maps ::ffff:0:a.b.c.d back to a.b.c.d.
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some((low, "IPv4-translated, ::ffff:0:0/96"));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some((low, "NAT64, 64:ff9b::/96"));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return Some((low, "local-use NAT64, 64:ff9b:1::/48"));
    }
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return Some((v4, "6to4, 2002::/16"));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        // Teredo: the client's address, obfuscated in the last 32 bits.
        let client = !u32::from(low);
        return Some((Ipv4Addr::from(client), "Teredo, 2001::/32"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        forbidden(s.parse().unwrap(), &[]).is_some()
    }

    #[test]
    fn internal_ranges_are_refused_and_public_ones_are_not() {
        for s in [
            "127.0.0.1",
            "127.255.255.254",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.251",
            "255.255.255.255",
            "192.0.0.192",
            "::",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "fec0::1",
        ] {
            assert!(refused(s), "{s}");
        }
        for s in ["93.184.216.34", "172.32.0.1", "100.128.0.1", "8.8.8.8", "2606:4700::1111", "1.1.1.1"] {
            assert!(!refused(s), "{s}");
        }
    }

    #[test]
    fn embedded_ipv4_is_judged_by_what_it_embeds() {
        for s in [
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::ffff:0:169.254.169.254",
            "::ffff:0:7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::7f00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ] {
            let why = forbidden(s.parse().unwrap(), &[]).unwrap_or_else(|| panic!("{s} was allowed"));
            assert!(why.contains("embeds"), "{s}: {why}");
        }
        assert!(!refused("64:ff9b::808:808"), "NAT64 of a public address is allowed");
        assert!(!refused("::ffff:0:808:808"), "a translated public address is allowed");
        let (v4, form) = embedded_ipv4("::ffff:0:10.1.2.3".parse().unwrap()).unwrap();
        assert_eq!((v4, form), (Ipv4Addr::new(10, 1, 2, 3), "IPv4-translated, ::ffff:0:0/96"));
        assert!(!refused("2002:808:808::1"));
    }

    #[test]
    fn the_hosts_own_addresses_are_refused() {
        let own: Vec<IpAddr> = vec!["203.0.114.7".parse().unwrap(), "2a01::7".parse().unwrap()];
        assert!(forbidden("203.0.114.7".parse().unwrap(), &own).unwrap().contains("this host"));
        assert!(forbidden("2a01::7".parse().unwrap(), &own).is_some());
        assert!(forbidden("::ffff:203.0.114.7".parse().unwrap(), &own).is_some());
        assert!(forbidden("203.0.114.8".parse().unwrap(), &own).is_none());
    }
}
