//! Seatbelt's denials, as macOS's unified log reports them (`log stream`, sender
//! Sandbox): parsed, known noise filtered, turned into the same violation events as
//! on Linux. Pure, so that it is tested on fixtures anywhere; only reading the live
//! log is macOS-only.

use cc_proto::sandboxd::v1::Violation;

use crate::violations::sanitize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub process: String,
    pub pid: u32,
    pub operation: String,
    pub target: String,
}

/// `… Sandbox: cat(1234) deny(1) file-read-data /Users/me/.ssh/id_rsa`
pub fn parse(line: &str) -> Option<Denial> {
    let rest = &line[line.find("Sandbox: ")? + "Sandbox: ".len()..];
    let open = rest.find('(')?;
    let close = open + rest[open..].find(')')?;
    let process = rest[..open].trim().to_owned();
    let pid = rest[open + 1..close].parse().ok()?;
    let rest = rest[close + 1..].trim_start().strip_prefix("deny")?;
    let rest = rest.trim_start_matches(|c: char| c == '(' || c == ')' || c.is_ascii_digit()).trim_start();
    let (operation, target) = match rest.split_once(' ') {
        Some((op, target)) => (op, target.trim()),
        None => (rest, ""),
    };
    if operation.is_empty() || process.is_empty() {
        return None;
    }
    Some(Denial { process, pid, operation: operation.to_owned(), target: target.to_owned() })
}

/// Denials macOS produces on its own, whatever the command does.
pub fn is_noise(d: &Denial) -> bool {
    const NOISY_OPERATIONS: &[&str] =
        &["mach-lookup", "sysctl-read", "iokit-open", "user-preference-read", "distributed-notification-post"];
    const NOISY_TARGETS: &[&str] =
        &["/dev/dtracehelper", "/private/var/db/mds", "/Library/Preferences/", "/private/var/folders/"];
    NOISY_OPERATIONS.contains(&d.operation.as_str()) || NOISY_TARGETS.iter().any(|t| d.target.starts_with(t))
}

pub fn to_violation(d: &Denial, line: &str) -> Violation {
    Violation {
        attempted: sanitize(&d.target),
        blocked_by: sanitize(&format!("seatbelt: {}", d.operation)),
        line: sanitize(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seatbelt_denials() {
        let line = "2026-12-02 10:00:00.123456+0000  localhost kernel[0]: (Sandbox) Sandbox: cat(1234) deny(1) file-read-data /Users/me/.ssh/id_rsa";
        let d = parse(line).unwrap();
        assert_eq!(
            d,
            Denial {
                process: "cat".into(),
                pid: 1234,
                operation: "file-read-data".into(),
                target: "/Users/me/.ssh/id_rsa".into()
            }
        );
        assert!(!is_noise(&d));
        let v = to_violation(&d, line);
        assert_eq!(
            (v.attempted.as_str(), v.blocked_by.as_str()),
            ("/Users/me/.ssh/id_rsa", "seatbelt: file-read-data")
        );

        let write = parse("Sandbox: bash(77) deny(1) file-write-create /Users/me/src/demo/x").unwrap();
        assert_eq!(write.operation, "file-write-create");
        let unlink = parse("Sandbox: mv(78) deny(2) file-write-unlink /Users/me/src").unwrap();
        assert_eq!(unlink.target, "/Users/me/src");
        let net = parse("Sandbox: curl(79) deny(1) network-outbound 93.184.216.34:443").unwrap();
        assert_eq!(net.operation, "network-outbound");
        let with_space = parse("Sandbox: Google Chrome(80) deny(1) file-read-data /a b").unwrap();
        assert_eq!((with_space.process.as_str(), with_space.target.as_str()), ("Google Chrome", "/a b"));
    }

    #[test]
    fn filters_noise_and_rejects_garbage() {
        for noise in [
            "Sandbox: sh(1) deny(1) mach-lookup com.apple.coreservices.launchservicesd",
            "Sandbox: sh(1) deny(1) file-read-data /dev/dtracehelper",
            "Sandbox: sh(1) deny(1) sysctl-read kern.bootargs",
        ] {
            assert!(is_noise(&parse(noise).unwrap()), "{noise}");
        }
        for garbage in
            ["", "Sandbox: ", "Sandbox: x(notapid) deny(1) op /p", "Sandbox: x(1) allow file-read /p", "kernel: other"]
        {
            assert!(parse(garbage).is_none(), "{garbage:?}");
        }
    }

    #[test]
    fn control_characters_never_reach_an_event() {
        let d = parse("Sandbox: sh(1) deny(1) file-write-data /tmp/\u{1b}[2J\u{202e}x").unwrap();
        let v = to_violation(&d, "line\r");
        assert!(!v.attempted.contains('\u{1b}') && !v.attempted.contains('\u{202e}') && !v.line.contains('\r'));
    }
}
