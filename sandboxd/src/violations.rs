//! Violation telemetry: stderr lines of wrapped processes that show the envelope
//! refusing something. Pure, so that it is tested on fixtures.

use cc_proto::sandboxd::v1::Violation;

/// Message fragments, and what they mean.
const MARKERS: &[(&str, &str)] = &[
    ("Read-only file system", "read-only file system"),
    ("Operation not permitted", "operation not permitted"),
    ("Permission denied", "permission denied"),
    ("EPERM", "operation not permitted"),
];

/// Removes control and bidi characters, so that nothing a process printed can rewrite
/// a terminal or a transcript.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .filter(|c| {
            !c.is_control()
                && !matches!(
                    c,
                    '\u{061c}'
                        | '\u{200b}'..='\u{200f}'
                        | '\u{2028}'
                        | '\u{2029}'
                        | '\u{202a}'..='\u{202e}'
                        | '\u{2066}'..='\u{2069}'
                        | '\u{feff}'
                )
        })
        .take(500)
        .collect()
}

/// The violation one stderr line reports, if any.
pub fn scan_line(line: &str) -> Option<Violation> {
    let (marker, blocked_by) = MARKERS.iter().find(|(m, _)| line.contains(m))?;
    let clean = sanitize(line);
    Some(Violation { attempted: attempted(&clean, marker), blocked_by: (*blocked_by).to_owned(), line: clean })
}

/// What was attempted: the path or command the message names. Tools print
/// `tool: 'path': Reason`, `tool: cannot create 'path': Reason`, `tool: path: Reason`.
fn attempted(line: &str, marker: &str) -> String {
    let before = line.split(marker).next().unwrap_or("").trim_end_matches([' ', ':', '(']);
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’'), ('`', '\'')] {
        if let Some(end) = before.rfind(close)
            && let Some(start) = before[..end].rfind(open)
            && start + open.len_utf8() < end
        {
            return before[start + open.len_utf8()..end].to_owned();
        }
    }
    before.rsplit(": ").next().unwrap_or(before).trim().to_owned()
}

/// Deduplicates a storm: the same attempt blocked the same way is reported once per
/// launch, and at most `limit` reports in all.
pub struct Deduplicator {
    seen: std::collections::HashSet<(String, String)>,
    limit: usize,
}

impl Deduplicator {
    pub fn new(limit: usize) -> Self {
        Self { seen: Default::default(), limit }
    }

    pub fn admit(&mut self, v: &Violation) -> bool {
        self.seen.len() < self.limit && self.seen.insert((v.attempted.clone(), v.blocked_by.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_common_tool_messages() {
        let cases = [
            ("touch: cannot touch '/etc/passwd': Read-only file system", "/etc/passwd", "read-only file system"),
            ("bash: /home/u/x: Permission denied", "/home/u/x", "permission denied"),
            (
                "sh: 1: cannot create /usr/bin/evil: Read-only file system",
                "cannot create /usr/bin/evil",
                "read-only file system",
            ),
            ("unshare: unshare failed: Operation not permitted", "unshare failed", "operation not permitted"),
            ("mkdir: cannot create directory ‘/opt/x’: Permission denied", "/opt/x", "permission denied"),
        ];
        for (line, attempted, blocked) in cases {
            let v = scan_line(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(v.attempted, attempted, "{line}");
            assert_eq!(v.blocked_by, blocked, "{line}");
        }
        assert!(scan_line("all fine").is_none());
    }

    #[test]
    fn output_is_sanitized_and_bounded() {
        let v = scan_line("x: '\x1b[31m/etc\u{202e}': Permission denied\r").unwrap();
        assert!(!v.line.contains('\x1b') && !v.line.contains('\u{202e}') && !v.line.contains('\r'));
        let long = format!("{}: Permission denied", "a".repeat(10_000));
        assert!(scan_line(&long).unwrap().line.len() <= 500);
    }

    #[test]
    fn storms_are_deduplicated() {
        let mut d = Deduplicator::new(3);
        let v = scan_line("touch: cannot touch '/a': Read-only file system").unwrap();
        assert!(d.admit(&v));
        assert!(!d.admit(&v));
        for p in ["/b", "/c", "/d"] {
            let v = scan_line(&format!("touch: cannot touch '{p}': Read-only file system")).unwrap();
            let admitted = d.admit(&v);
            assert_eq!(admitted, p != "/d", "{p}");
        }
    }
}
