//! The command-policy corpus (`corpus.txt`): every line in every mode, through the whole
//! gate with the shipped default rules, against the decision written next to it.

use cc_policy::{Action, Decision, Mode, evaluate};

mod common;

use common::{agents_corpus, corpus};

fn decide(line: &str, mode: Mode) -> (Decision, String) {
    let e = evaluate(&Action::bash(line, mode), &[]);
    (e.decision, e.reason)
}

#[test]
fn every_line_in_every_mode_gets_its_decision() {
    check(corpus(), 300);
}

#[test]
fn every_line_agents_type_in_every_mode_gets_its_decision() {
    check(agents_corpus(), 400);
}

fn check(corpus: Vec<(Decision, Decision, String)>, at_least: usize) {
    assert!(corpus.len() >= at_least, "the corpus has {} lines", corpus.len());
    let mut failures = Vec::new();
    for (chat, read_only, line) in &corpus {
        for mode in Mode::ALL {
            let want = if mode == Mode::Chat { *chat } else { *read_only };
            let (got, reason) = decide(line, mode);
            if got != want {
                failures.push(format!("{mode:<11} want {want:<5} got {got:<5} {line:?}  ({reason})"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} decisions differ:\n{}",
        failures.len(),
        corpus.len() * 4,
        failures.join("\n")
    );
}
