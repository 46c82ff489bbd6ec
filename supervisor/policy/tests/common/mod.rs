//! The command-policy corpora, read once for every test that uses them: `corpus.txt`,
//! grown with the classifier, and `corpus_agents.txt` (issue 37), written from the
//! specification alone: what agents type in a day's work.

use cc_policy::Decision;

/// Each entry: the decision in chat mode, the decision in the read-only modes, the line.
pub fn corpus() -> Vec<(Decision, Decision, String)> {
    parse(include_str!("../corpus.txt"))
}

/// The corpus written from the specification (issue 37).
#[allow(dead_code)] // used by some test binaries and not others
pub fn agents_corpus() -> Vec<(Decision, Decision, String)> {
    parse(include_str!("../corpus_agents.txt"))
}

fn parse(text: &str) -> Vec<(Decision, Decision, String)> {
    let letter = |c: &str| match c {
        "a" => Decision::Allow,
        "k" => Decision::Ask,
        "d" => Decision::Deny,
        other => panic!("corpus: bad decision letter {other:?}"),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut it = l.splitn(3, ' ');
            let chat = letter(it.next().unwrap());
            let read_only = letter(it.next().unwrap());
            let line = it.next().expect("corpus: a line needs two letters and a command").replace("\\n", "\n");
            (chat, read_only, line)
        })
        .collect()
}

/// The command lines alone.
#[allow(dead_code)] // used by some test binaries and not others
pub fn corpus_lines() -> Vec<String> {
    corpus().into_iter().chain(agents_corpus()).map(|(_, _, line)| line).collect()
}
