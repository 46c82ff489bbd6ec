//! Any bytes as the start of a push: a head, "need more", or an error; never a panic.
//! A head read is one git would send again the same way.
#![no_main]

use cc_gateway::git::request::parse_head;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((head, at))) = parse_head(data) {
        assert!(at <= data.len());
        let all: Vec<_> = head.commands.iter().collect();
        let again = head.encode(&all);
        if let Ok(Some((reparsed, used))) = parse_head(&again) {
            assert_eq!(used, again.len());
            assert_eq!(reparsed.commands, head.commands);
        } else if !head.commands.is_empty() {
            panic!("a head we read does not read back after encoding");
        }
    }
});
