//! Any bytes as a rules file: an error naming a line, or rules; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = cc_policy::RuleSet::parse(text, "fuzz.toml") {
        assert!(!e.to_string().contains('\n'), "a load error spans lines: {e}");
    }
});
