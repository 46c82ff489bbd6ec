//! Any bytes as upstream's answer to a push, with and without side-band: a report or
//! an error; never a panic. A report read is written back and read again the same.
#![no_main]

use cc_gateway::git::report::{Answer, demultiplex, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for side_band in [false, true] {
        let Ok((report, _progress)) = demultiplex(data, side_band) else { continue };
        let Ok(parsed) = parse(&report) else { continue };
        for v2 in [false, true] {
            let body = parsed.encode(Answer { side_band, v2 });
            let (again, _) = demultiplex(&body, side_band).expect("our own framing reads back");
            let reparsed = parse(&again).expect("our own report reads back");
            assert_eq!(reparsed.refs.len(), parsed.refs.len());
        }
    }
});
