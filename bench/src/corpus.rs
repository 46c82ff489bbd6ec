//! The command-policy corpus the tests use, one command line per entry (shared by
//! `cc-bench gate` and the criterion bench).

pub fn corpus() -> Vec<String> {
    include_str!("../../supervisor/policy/tests/corpus.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}
