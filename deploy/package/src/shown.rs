//! What a guide shows against what its blocks printed. A guide's `text` block is the
//! output a reader sees; the docs test runs the blocks and holds the output to it.
//!
//! Some things differ by nature from one run to the next, and are compared by shape:
//! ids, hashes, times, ports, pids, measured amounts and column padding (see
//! [`normalize`]). The test's own directories are first written back as the guides
//! spell them ([`Paths`]). A shown line `...` stands for any number of printed lines,
//! for output too long to show whole. Everything else must match line for line.

use std::sync::LazyLock;

use regex::Regex;

use crate::guides::marker;

/// The test's directories and the ones the guides show in their place.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    pairs: Vec<(String, String)>,
}

impl Paths {
    /// `printed` is written as `shown` wherever it appears; the longest first, so that
    /// a data directory inside a home is not taken for the home.
    pub fn with(mut self, printed: &str, shown: &str) -> Paths {
        self.pairs.push((printed.to_owned(), shown.to_owned()));
        self.pairs.sort_by_key(|(printed, _)| std::cmp::Reverse(printed.len()));
        self
    }

    fn apply(&self, text: &str) -> String {
        self.pairs.iter().fold(text.to_owned(), |text, (printed, shown)| text.replace(printed, shown))
    }
}

/// Each block's output, by its `NAME:LINE`, from the log of a whole guide.
pub fn split(log: &str, blocks: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in log.lines() {
        if let Some(at) = blocks.iter().find(|at| line == marker(at)) {
            out.push((at.clone(), String::new()));
        } else if let Some((_, output)) = out.last_mut() {
            output.push_str(line);
            output.push('\n');
        }
    }
    out
}

/// Shapes that differ between runs, in the order they are replaced.
static SHAPES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"[ \t]+", " "),
        (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
        (r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", "<time>"),
        (r"\b\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?\b", "<time>"),
        // Runs, conversations, approvals: a letter and 15 or 16 hex digits.
        (r"\b[a-z][0-9a-f]{15,16}\b", "<id>"),
        // Commits and digests.
        (r"\b[0-9a-f]{7,64}\b", "<hex>"),
        (r"\b(127\.0\.0\.1|localhost|\[::1\]):\d+", "$1:<port>"),
        (r"\bpid[ =]\d+", "pid <n>"),
        (r#""(\w*pid)": ?\d+"#, "\"$1\":<n>"),
        // A helper's PID column, after its state.
        (r"\b(running|starting|stopping) \d+\b", "$1 <n>"),
        (r"\b\d+(\.\d+)? ?(ms|µs)\b", "<n> ms"),
        // What the host has installed: bubblewrap 0.8.0, qemu 7.2.22, a 6.1.0-57-cloud-amd64 kernel.
        (r"\b\d+\.\d+\.\d+(-[0-9A-Za-z][0-9A-Za-z.+~-]*)?\b", "<version>"),
        (r"\b\d+\.\d+\b", "<n.n>"),
    ]
    .into_iter()
    .map(|(pattern, by)| (Regex::new(pattern).expect("a valid pattern"), by))
    .collect()
});

/// `text` with what differs between runs replaced by its shape, lines trimmed at the
/// end and trailing blank lines dropped.
pub fn normalize(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            let line = SHAPES.iter().fold(line.to_owned(), |line, (shape, by)| shape.replace_all(&line, *by).into());
            line.trim_end().to_owned()
        })
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Where the printed output first parts from the shown one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shown line {line} {expected:?} was printed as {found:?}")]
pub struct Mismatch {
    /// 1-based, within the shown block.
    pub line: usize,
    pub expected: String,
    /// `None`: the output ended first.
    pub found: Option<String>,
}

/// Whether `printed` (with `paths` written as the guides spell them) is what `shown`
/// shows.
pub fn compare(shown: &str, printed: &str, paths: &Paths) -> Result<(), Mismatch> {
    let shown = normalize(shown);
    let printed = normalize(&paths.apply(printed));
    // reach[i][j]: the first i shown lines match the first j printed ones.
    let (n, m) = (shown.len(), printed.len());
    let mut reach = vec![vec![false; m + 1]; n + 1];
    reach[0][0] = true;
    for i in 0..=n {
        for j in 0..=m {
            if !reach[i][j] || i == n {
                continue;
            }
            if shown[i] == "..." {
                reach[i + 1][j..].fill(true);
            } else if j < m && shown[i] == printed[j] {
                reach[i + 1][j + 1] = true;
            }
        }
    }
    if reach[n][m] {
        return Ok(());
    }
    // The furthest shown line reached, and the first printed line after it.
    let (i, j) = (0..=n).rev().find_map(|i| (0..=m).rev().find(|j| reach[i][*j]).map(|j| (i, j))).unwrap_or((0, 0));
    let expected = shown.get(i).cloned().unwrap_or_else(|| "(the end of the output)".into());
    Err(Mismatch { line: i + 1, expected, found: printed.get(j).cloned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(shown: &str, printed: &str) -> bool {
        compare(shown, printed, &Paths::default()).is_ok()
    }

    #[test]
    fn what_differs_between_runs_is_compared_by_shape() {
        assert!(ok(
            "r50443a1dbafa015  running  conversation c82350a6b708cb236  runner pid 4242\n",
            "r0123456789abcde running conversation cffffffffffffffff runner pid 7\n"
        ));
        assert!(ok("3905696 first commit\n", "a1b2c3d first commit\n"));
        assert!(ok("created 2026-12-06T08:24:57.593Z\n", "created 2027-01-01T00:00:00Z\n"));
        assert!(ok("bridged as 127.0.0.1:41418\n", "bridged as 127.0.0.1:5\n"));
        assert!(ok("took 12 ms, 0.25 s\n", "took 3.5 ms, 10.00 s\n"));
        assert!(ok("qemu 7.2.22, image 6.1.0-57-cloud-amd64)\n", "qemu 8.0.1, image 6.1.0-60-cloud-amd64)\n"));
        assert!(ok("ok\n\n\n", "ok"));
        assert!(ok("sandboxd  running   7983     0\n", "sandboxd running 12 0\n"));
        assert!(ok(r#"{"pid":22947,"runner_pid": 3}"#, r#"{"pid":1,"runner_pid": 99}"#));
        assert!(!ok("sandboxd running 7983 0\n", "sandboxd running 7983 1\n"), "restarts count");
    }

    #[test]
    fn words_and_exact_numbers_must_match() {
        assert!(!ok("exit 125\n", "exit 1\n"));
        assert!(!ok("wrote 12 bytes\n", "wrote 13 bytes\n"));
        assert!(!ok("denied: rm\n", "allowed: rm\n"));
        assert!(!ok("a\nb\n", "a\n"), "a missing line");
        assert!(!ok("a\n", "a\nb\n"), "a line more");
    }

    #[test]
    fn an_ellipsis_stands_for_any_lines() {
        assert!(ok("first\n...\nlast\n", "first\nx\ny\nlast\n"));
        assert!(ok("first\n...\nlast\n", "first\nlast\n"));
        assert!(ok("...\n", "anything\nat all\n"));
        assert!(!ok("first\n...\nlast\n", "first\nx\n"));
    }

    #[test]
    fn the_mismatch_names_the_shown_line_and_what_came_instead() {
        let err = compare("a\nb\nc\n", "a\nB\nc\n", &Paths::default()).unwrap_err();
        assert_eq!(err, Mismatch { line: 2, expected: "b".into(), found: Some("B".into()) });
        let err = compare("a\nb\n", "a\n", &Paths::default()).unwrap_err();
        assert_eq!(err.found, None);
        let err = compare("a\n", "a\nmore\n", &Paths::default()).unwrap_err();
        assert_eq!((err.line, err.found), (2, Some("more".into())));
    }

    #[test]
    fn the_tests_directories_are_written_as_the_guides_spell_them() {
        let paths =
            Paths::default().with("/tmp/x/home", "/home/me").with("/tmp/x/home/data", "/var/lib/control-center");
        assert!(
            compare("/var/lib/control-center/a /home/me/b\n", "/tmp/x/home/data/a /tmp/x/home/b\n", &paths).is_ok()
        );
    }

    #[test]
    fn split_cuts_a_log_at_each_blocks_marker() {
        let blocks = vec!["g.md:3".to_owned(), "g.md:9".to_owned()];
        let log = "prelude noise\n@@docs-block g.md:3@@\none\ntwo\n@@docs-block g.md:9@@\nthree\n";
        assert_eq!(
            split(log, &blocks),
            vec![("g.md:3".into(), "one\ntwo\n".into()), ("g.md:9".into(), "three\n".into())]
        );
    }
}
