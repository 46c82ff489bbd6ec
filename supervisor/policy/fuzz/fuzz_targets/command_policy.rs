//! Any bytes, as a command line, in every mode: the classifier must answer, not panic,
//! and appending a denied command must never loosen the decision.
#![no_main]

use cc_policy::Mode;
use cc_policy::command::check;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    for mode in Mode::ALL {
        let _ = check(line, mode);
    }
    // A line ending in an odd number of backslashes continues onto the appended one,
    // which then is not a command of its own: the property does not apply.
    // Likewise a heredoc still open at the end of the line: the appended line may be
    // its delimiter, which bash reads and does not run.
    if line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 || line.contains("<<") {
        return;
    }
    for mode in Mode::ALL {
        let before = check(line, mode).decision;
        let after = check(&format!("{line}\nrm -rf /"), mode).decision;
        assert!(after >= before, "{mode}: appending a denied command loosened {line:?}");
    }
});
