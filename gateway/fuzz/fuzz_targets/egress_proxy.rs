//! Any bytes as the start of a connection to a run's HTTP or SOCKS5 proxy: a request,
//! "more bytes", or a one-line refusal; never a panic. What is read stays within the
//! bytes given, a target has a real port, and reading again with more bytes after a
//! complete message gives the same message.
#![no_main]

use cc_gateway::egress::{http_request, socks};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match http_request::parse(data) {
        Ok(Some(request)) => {
            assert!(request.head_len <= data.len());
            assert!(request.target.port() > 0 && !request.target.host().is_empty());
            let mut more = data.to_vec();
            more.extend_from_slice(b"tail");
            assert_eq!(http_request::parse(&more), Ok(Some(request)));
        }
        Ok(None) => assert!(data.len() <= http_request::MAX_HEAD_BYTES),
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
    if let Ok(Some((_, used))) = socks::parse_greeting(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((_, used))) = socks::parse_credentials(data) {
        assert!(used <= data.len());
    }
    match socks::parse_request(data) {
        Ok(Some((request, used))) => {
            assert!(used <= data.len());
            let mut more = data.to_vec();
            more.push(0);
            assert_eq!(socks::parse_request(&more), Ok(Some((request, used))));
        }
        Ok(None) => assert!(data.len() < 262),
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
});
