//! Any bytes as a host a client names (CONNECT, SOCKS, a URL) and as an allowlist
//! entry: a canonical host or a one-line refusal, never a panic. A canonical host reads
//! back as itself (so two spellings of one host are never judged apart), a name is
//! lower-case ASCII within DNS's bounds, and the decision order never lets an always-
//! denied address through whatever the allowlist says.
#![no_main]

use cc_policy::egress::allowlist::{Allowlist, Entry};
use cc_policy::egress::decide::EgressPolicy;
use cc_policy::egress::deny::DenyList;
use cc_policy::egress::host::{Host, canonical};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match canonical(&text) {
        Ok(host) => {
            assert_eq!(canonical(&host.to_string()).as_ref(), Ok(&host), "{text:?}");
            if let Host::Name(name) = &host {
                assert!(name.len() <= 253 && !name.ends_with('.'), "{name}");
                assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b)));
            }
            // Whatever the allowlist holds, an always-denied host stays denied.
            let deny = DenyList::new(vec![]);
            let allow = Allowlist { entries: Entry::parse(&host.to_string(), "fuzz").into_iter().collect() };
            let policy = EgressPolicy { deny: deny.clone(), allow };
            if deny.denies(&host, 443).is_some() {
                assert!(policy.admit(&text, 443).is_err());
            }
        }
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
    if let Ok(entry) = Entry::parse(&text, "fuzz") {
        assert_eq!(Entry::parse(&entry.to_string(), "fuzz").as_ref(), Ok(&entry), "{text:?}");
    }
});
