//! A destination's host, validated and then canonicalized the way a URL parser reads
//! it (WHATWG's host parser): IDNA to ASCII with its mappings (case, full-width dots),
//! every numeric IPv4 spelling (`2130706433`, `0x7f.1`, `0177.0.0.1`), bracketed IPv6
//! with IPv4-mapped addresses unwrapped, and one trailing dot dropped. The canonical
//! form is what is decided on and what is dialled, so two spellings of one host can
//! never be judged apart.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest host name DNS carries.
pub const MAX_HOST_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// Lower-case ASCII (IDNA applied), no trailing dot.
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("the host is empty")]
    Empty,
    #[error("the host is over {MAX_HOST_LEN} bytes")]
    TooLong,
    #[error("the host has a control byte, NUL, CR/LF or a space")]
    ControlByte,
    #[error("the host names an IPv6 zone (%), which is never allowed")]
    Zone,
    #[error("the host has a character no host name has: {0:?}")]
    BadCharacter(char),
    #[error("{0:?} is not a valid IPv4 address")]
    BadIpv4(String),
    #[error("{0:?} is not a valid IPv6 address")]
    BadIpv6(String),
    #[error("{0:?} is not a valid international domain name")]
    BadIdna(String),
    #[error("the host has an empty label, or one over {MAX_LABEL_LEN} bytes")]
    BadLabel,
}

fn shown(raw: &str) -> String {
    raw.chars().take(80).collect()
}

/// Validates `raw` (a host as a client sent it: CONNECT's target, a SOCKS domain name,
/// an absolute-form URL's host) and returns its canonical form.
pub fn canonical(raw: &str) -> Result<Host, HostError> {
    if raw.is_empty() {
        return Err(HostError::Empty);
    }
    // Room for brackets and a trailing dot; the exact bound is checked on the result.
    if raw.len() > MAX_HOST_LEN + 2 {
        return Err(HostError::TooLong);
    }
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f || b == b' ') {
        return Err(HostError::ControlByte);
    }
    if raw.contains('%') {
        return Err(HostError::Zone);
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| HostError::BadIpv6(shown(raw)))?;
        let v6: Ipv6Addr = inner.parse().map_err(|_| HostError::BadIpv6(shown(raw)))?;
        return Ok(Host::Ip(unmapped(v6)));
    }
    if raw.contains(':') {
        // A bare IPv6 literal (SOCKS hands addresses over as such); nothing else may
        // have a colon.
        let v6: Ipv6Addr = raw.parse().map_err(|_| HostError::BadIpv6(shown(raw)))?;
        return Ok(Host::Ip(unmapped(v6)));
    }
    if let Some(bad) = raw.chars().find(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || "-._".contains(*c))) {
        return Err(HostError::BadCharacter(bad));
    }
    // IDNA first, as the URL parser does: its mappings turn full-width digits and dots
    // into ASCII, which may make an IPv4 address of what did not look like one.
    let ascii = idna::domain_to_ascii(raw).map_err(|_| HostError::BadIdna(shown(raw)))?;
    if let Some(bad) = ascii.chars().find(|c| !(c.is_ascii_alphanumeric() || "-._".contains(*c))) {
        return Err(HostError::BadCharacter(bad));
    }
    if ends_in_a_number(&ascii) {
        return parse_ipv4(&ascii).map(|v4| Host::Ip(IpAddr::V4(v4))).ok_or_else(|| HostError::BadIpv4(shown(raw)));
    }
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    if name.len() > MAX_HOST_LEN {
        return Err(HostError::TooLong);
    }
    if name.split('.').any(|label| label.is_empty() || label.len() > MAX_LABEL_LEN) {
        return Err(HostError::BadLabel);
    }
    Ok(Host::Name(name.to_owned()))
}

/// An IPv4-mapped IPv6 address is the IPv4 address (both to decide and to dial).
pub fn unmapped(v6: Ipv6Addr) -> IpAddr {
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// WHATWG's "ends in a number": the last label (a trailing dot aside) is digits, or
/// parses as an IPv4 number (`0x…`). Such a host is an IPv4 address or invalid.
fn ends_in_a_number(host: &str) -> bool {
    let mut labels: Vec<&str> = host.split('.').collect();
    if labels.last() == Some(&"") {
        if labels.len() == 1 {
            return false;
        }
        labels.pop();
    }
    let last = labels.last().copied().unwrap_or("");
    (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())) || ipv4_number(last).is_some()
}

/// One part of an IPv4 address: decimal, `0x` hex (`0x` alone is 0) or `0` octal.
fn ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return Some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Longer than any u64 is an invalid address, not an overflow.
    u64::from_str_radix(digits, radix).ok()
}

/// WHATWG's IPv4 parser: one to four parts, the last filling the bytes left.
fn parse_ipv4(host: &str) -> Option<Ipv4Addr> {
    let mut parts: Vec<&str> = host.split('.').collect();
    if parts.last() == Some(&"") && parts.len() > 1 {
        parts.pop();
    }
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts.iter().map(|p| ipv4_number(p)).collect::<Option<_>>()?;
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) {
        return None;
    }
    if *last >= 256u64.pow(5 - numbers.len() as u32) {
        return None;
    }
    let mut address = *last;
    for (i, n) in init.iter().enumerate() {
        address += n * 256u64.pow(3 - i as u32);
    }
    u32::try_from(address).ok().map(Ipv4Addr::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Host {
        Host::Ip(s.parse().unwrap())
    }

    fn name(s: &str) -> Host {
        Host::Name(s.into())
    }

    #[test]
    fn every_spelling_of_loopback_and_metadata_is_one_address() {
        for spelling in [
            "127.0.0.1",
            "2130706433",
            "0x7f000001",
            "0x7f.1",
            "0177.0.0.1",
            "0177.1",
            "127.1",
            "127.0.1",
            "127.0.0.1.",
            "0x7F.0.0.1",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "::ffff:127.0.0.1",
            "１２７．０．０．１",
        ] {
            assert_eq!(canonical(spelling), Ok(ip("127.0.0.1")), "{spelling}");
        }
        for spelling in ["169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "[::ffff:a9fe:a9fe]"] {
            assert_eq!(canonical(spelling), Ok(ip("169.254.169.254")), "{spelling}");
        }
        assert_eq!(canonical("[::1]"), Ok(ip("::1")));
        assert_eq!(canonical("[fd00:ec2::254]"), Ok(ip("fd00:ec2::254")));
        assert_eq!(
            canonical("[64:ff9b::a9fe:a9fe]"),
            Ok(ip("64:ff9b::a9fe:a9fe")),
            "NAT64 stays IPv6, judged by its embedded address"
        );
        assert_eq!(canonical("0"), Ok(ip("0.0.0.0")));
        assert_eq!(canonical("0x"), Ok(ip("0.0.0.0")));
    }

    #[test]
    fn names_are_lower_case_ascii_without_a_trailing_dot() {
        assert_eq!(canonical("Example.COM."), Ok(name("example.com")));
        assert_eq!(canonical("bücher.example"), Ok(name("xn--bcher-kva.example")));
        assert_eq!(canonical("xn--bcher-kva.example"), Ok(name("xn--bcher-kva.example")));
        assert_eq!(canonical("EXAMPLE．com"), Ok(name("example.com")), "a full-width dot is a dot");
        assert_eq!(canonical("_srv.example.com"), Ok(name("_srv.example.com")));
        assert_eq!(canonical("1.2.3.example"), Ok(name("1.2.3.example")));
        assert_eq!(canonical("example.0x"), Err(HostError::BadIpv4("example.0x".into())), "it ends in a number");
    }

    #[test]
    fn bad_hosts_are_refused_with_their_reason() {
        let long = format!("{}.com", "a.".repeat(130));
        let label = format!("{}.com", "a".repeat(64));
        for (raw, expected) in [
            ("", HostError::Empty),
            (".", HostError::Empty),
            ("example.com\r\nHost: evil", HostError::ControlByte),
            ("example.com\0.evil", HostError::ControlByte),
            ("exa mple.com", HostError::ControlByte),
            ("[fe80::1%25eth0]", HostError::Zone),
            ("fe80::1%eth0", HostError::Zone),
            ("example.com/evil", HostError::BadCharacter('/')),
            ("user@example.com", HostError::BadCharacter('@')),
            ("example.com:80", HostError::BadIpv6("example.com:80".into())),
            ("[::1", HostError::BadIpv6("[::1".into())),
            ("256.0.0.1", HostError::BadIpv4("256.0.0.1".into())),
            ("1.2.3.4.5", HostError::BadIpv4("1.2.3.4.5".into())),
            ("99999999999999999999999", HostError::BadIpv4("99999999999999999999999".into())),
            ("4294967296", HostError::BadIpv4("4294967296".into())),
            ("a..b", HostError::BadLabel),
            (label.as_str(), HostError::BadLabel),
            (long.as_str(), HostError::TooLong),
        ] {
            let got = canonical(raw);
            assert_eq!(got.as_ref().err(), Some(&expected), "{raw:?} gave {got:?}");
            assert!(!expected.to_string().contains('\n'));
        }
    }

    #[test]
    fn the_display_form_reads_back_as_itself() {
        for raw in ["example.com", "10.0.0.1", "[2001:db8::1]", "bücher.example"] {
            let host = canonical(raw).unwrap();
            assert_eq!(canonical(&host.to_string()), Ok(host.clone()), "{raw}");
        }
    }
}
