//! Where a run may connect: exact names, `*.name` for the names strictly under it,
//! exact IP addresses, each with an optional `:port`. `*` and a wildcard over a public
//! suffix (`*.com`, `*.co.uk`) are refused when the list is read, with `file:line`,
//! since they would allow nearly everything.
//!
//! ```text
//! # one entry a line
//! api.example.com
//! *.githubusercontent.example
//! registry.example.org:443
//! 127.0.0.1:8080        # an exact address and port: also lifts the internal-address check
//! ```

use std::net::IpAddr;

use super::host::{Host, canonical};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// This name only.
    Name(String),
    /// Names strictly under this one (`*.example.com`: not `example.com` itself).
    Under(String),
    /// This address only.
    Ip(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub pattern: Pattern,
    pub port: Option<u16>,
    /// Where it came from: `base`, `github`, `workspace:NAME`, `file:line`.
    pub source: String,
}

impl Entry {
    /// Parses one entry; `source` names it in the list and in decisions.
    pub fn parse(text: &str, source: &str) -> Result<Entry, String> {
        let text = text.trim();
        if text == "*" || text.is_empty() {
            return Err(format!("{text:?} would allow every host: name hosts, or *.name for the names under one"));
        }
        let (host, port) = split_port(text)?;
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if host.contains('*') {
            return Err(format!("{text:?}: a wildcard is allowed only as a whole first label (*.example.com)"));
        }
        let pattern = match canonical(host).map_err(|e| format!("{text:?}: {e}"))? {
            Host::Ip(ip) if !wildcard => Pattern::Ip(ip),
            Host::Ip(_) => return Err(format!("{text:?}: a wildcard over an IP address means nothing")),
            Host::Name(name) if wildcard => {
                if is_public_suffix(&name) {
                    return Err(format!(
                        "{text:?} covers a public suffix (every {name} site): name the sites under it instead"
                    ));
                }
                Pattern::Under(name)
            }
            Host::Name(name) => Pattern::Name(name),
        };
        Ok(Entry { pattern, port, source: source.to_owned() })
    }

    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.pattern, host) {
            (Pattern::Name(n), Host::Name(h)) => n == h,
            (Pattern::Under(n), Host::Name(h)) => {
                h.strip_suffix(n.as_str()).is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            }
            (Pattern::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }

    /// Whether it names exactly this address and port (what lifts the check on
    /// internal addresses for one service a person chose).
    pub fn is_exact_address(&self, ip: IpAddr, port: u16) -> bool {
        self.pattern == Pattern::Ip(ip) && self.port == Some(port)
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.pattern {
            Pattern::Name(n) => f.write_str(n)?,
            Pattern::Under(n) => write!(f, "*.{n}")?,
            Pattern::Ip(ip) => write!(f, "{}", Host::Ip(*ip))?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// `host[:port]`, `[v6]:port`; a bare IPv6 address has no port.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port_of = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("{text:?}: bad port {p:?}"));
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(|| format!("{text:?}: no closing ]"))?;
        let host = &text[..inner.len() + 2];
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, Some(port_of(port)?))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("{text:?}: unexpected {after:?} after the address")),
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            Ok((host, Some(port_of(port)?)))
        }
        _ => Ok((text, None)),
    }
}

/// A name that is itself an ICANN public suffix (`com`, `co.uk`), or a single label.
fn is_public_suffix(name: &str) -> bool {
    !name.contains('.')
        || psl::suffix(name.as_bytes())
            .is_some_and(|s| s.as_bytes() == name.as_bytes() && s.typ() == Some(psl::Type::Icann))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct ListError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

/// An allowlist: the union of its parts, each entry with its source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    pub entries: Vec<Entry>,
}

impl Allowlist {
    /// One entry a line, `#` comments; every bad line is an error naming it.
    pub fn parse(text: &str, source_name: &str) -> Result<Allowlist, ListError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = format!("{source_name}:{}", i + 1);
            let entry = Entry::parse(line, &at).map_err(|message| ListError {
                source_name: source_name.to_owned(),
                line: i + 1,
                message,
            })?;
            entries.push(entry);
        }
        Ok(Allowlist { entries })
    }

    /// Entries given one by one (configuration arrays), each named `source`.
    pub fn of(items: &[&str], source: &str) -> Result<Allowlist, String> {
        let entries = items.iter().map(|i| Entry::parse(i, source)).collect::<Result<_, _>>()?;
        Ok(Allowlist { entries })
    }

    pub fn extend(&mut self, other: Allowlist) {
        self.entries.extend(other.entries);
    }

    /// The first entry that allows `host:port`.
    pub fn matching(&self, host: &Host, port: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.matches(host, port))
    }

    pub fn names_exact_address(&self, ip: IpAddr, port: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.is_exact_address(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(list: &Allowlist, host: &str, port: u16) -> bool {
        list.matching(&canonical(host).unwrap(), port).is_some()
    }

    #[test]
    fn wildcards_cover_strict_subdomains_only() {
        let list = Allowlist::parse("*.example.test\nexact.example.org:443\n", "egress.txt").unwrap();
        assert!(allows(&list, "a.example.test", 443));
        assert!(allows(&list, "A.B.Example.Test.", 80));
        for host in ["example.test", "badexample.test", "example.test.evil.test", "aexample.test"] {
            assert!(!allows(&list, host, 443), "{host}");
        }
        assert!(allows(&list, "exact.example.org", 443));
        assert!(!allows(&list, "exact.example.org", 80), "the port is part of the entry");
        assert!(!allows(&list, "a.exact.example.org", 443));
        assert_eq!(list.matching(&canonical("a.example.test").unwrap(), 1).unwrap().source, "egress.txt:1");
    }

    #[test]
    fn addresses_match_only_themselves() {
        let list = Allowlist::parse("127.0.0.1:8080\n[::1]:8443\n10.0.0.5\n", "l").unwrap();
        assert!(allows(&list, "127.0.0.1", 8080));
        assert!(allows(&list, "2130706433", 8080), "the canonical form is what matches");
        assert!(!allows(&list, "127.0.0.1", 8081));
        assert!(allows(&list, "[::1]", 8443));
        assert!(list.names_exact_address("127.0.0.1".parse().unwrap(), 8080).is_some());
        assert!(list.names_exact_address("10.0.0.5".parse().unwrap(), 80).is_none(), "no port: not exact");
    }

    #[test]
    fn entries_that_allow_too_much_or_nothing_are_refused_with_their_line() {
        for (text, words) in [
            ("*", "every host"),
            ("*.com", "public suffix"),
            ("*.co.uk", "public suffix"),
            ("*.test", "public suffix"),
            ("*.*.example.com", "whole first label"),
            ("a*.example.com", "whole first label"),
            ("*.10.0.0.1", "IP address"),
            ("example.com:0", "bad port"),
            ("example.com:99999", "bad port"),
            ("exa mple.com", "control byte"),
            ("[::1", "closing"),
        ] {
            let err = Allowlist::parse(&format!("ok.example.com\n# comment\n{text}\n"), "egress.txt").unwrap_err();
            assert_eq!(err.line, 3, "{text}");
            assert!(err.to_string().starts_with("egress.txt:3: ") && err.to_string().contains(words), "{text}: {err}");
        }
        assert!(Allowlist::parse("*.github.io\n", "l").is_ok(), "a private suffix is a person's choice");
    }

    #[test]
    fn entries_print_as_they_read() {
        for text in ["example.com", "*.example.com", "example.com:8443", "10.0.0.1:80", "[::1]:443"] {
            let entry = Entry::parse(text, "t").unwrap();
            assert_eq!(entry.to_string(), text);
            assert_eq!(Entry::parse(&entry.to_string(), "t").unwrap(), entry);
        }
    }
}
