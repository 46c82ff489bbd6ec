//! Any request line on a run's model door, and any answer a provider streams: a route
//! or a one-line refusal, and a usage read in bounded memory; never a panic. A routed
//! call is one of its provider's paths with no second spelling, and an answer cut
//! into chunks anywhere reads the same usage as the whole.
#![no_main]

use cc_gateway::model::Api;
use cc_gateway::model::route::route;
use cc_gateway::model::usage::Meter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (head, answer) = data.split_at(data.iter().position(|&b| b == 0).unwrap_or(data.len()));
    let text = String::from_utf8_lossy(head);
    let (method, target) = text.split_once(' ').unwrap_or(("POST", &text));
    let api_of = |name: &str| match name {
        "anthropic" => Some(Api::Anthropic),
        "local" => Some(Api::Openai),
        _ => None,
    };
    match route(method, target, api_of) {
        Ok((call, _)) => {
            assert!(call.path.starts_with('/') && !call.path.contains("..") && !call.path.contains('%'), "{call:?}");
            assert!(target.starts_with(&format!("/{}{}", call.provider, call.path)), "{call:?}");
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
    }
    for api in [Api::Anthropic, Api::Openai] {
        for streamed in [true, false] {
            let mut whole = Meter::new(api, streamed);
            whole.feed(answer);
            let mut chunked = Meter::new(api, streamed);
            let cut = answer.len() / 3;
            chunked.feed(&answer[..cut]);
            chunked.feed(&answer[cut..]);
            assert_eq!(whole.finish(), chunked.finish());
        }
    }
});
