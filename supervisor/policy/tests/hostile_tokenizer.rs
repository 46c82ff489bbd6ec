//! Lines that made brush-parser's tokenizer loop at the end of its input, allocating
//! without bound: a here-document operator whose tag runs into an unterminated
//! expansion and trailing blanks. One such command from an agent took the gate's
//! process and then the machine's memory (CI's property test reached 24 GB before the
//! kernel killed it). The workspace builds brush-parser from third_party/brush-parser,
//! which carries upstream's fix (reubeno/brush#1270).
//!
//! This test binary caps its own address space first, so that a regression fails here
//! as an allocation failure, within a second, rather than by exhausting the machine.

use cc_policy::command::check;
use cc_policy::{Decision, Mode};
use nix::sys::resource::{Resource, setrlimit};

#[test]
fn here_document_tags_cut_off_by_the_end_of_the_line_are_decided_at_once() {
    let cap = 2 << 30;
    setrlimit(Resource::RLIMIT_AS, cap, cap).expect("cap this test's address space");
    let hostile = ["<<E$[\t\t", "cat <<E$(  ", "<<E$((  ", "<<x$( \t", "<<E$(\t\t", "bash -c '<<E$(  '", "ls <<E$[  "];
    for line in hostile {
        for mode in Mode::ALL {
            // Decided, whatever the decision: bash itself refuses these lines.
            let _ = check(line, mode);
        }
    }
    // What a denied command carries stays denied with the tag after it.
    for mode in Mode::ALL {
        assert_eq!(check("sudo rm -rf / <<E$(  ", mode).decision, Decision::Deny, "{mode}");
    }
}
