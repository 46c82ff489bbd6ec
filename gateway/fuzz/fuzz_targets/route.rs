//! Any method, path and query on a run's git socket: a route or a one-line refusal;
//! never a panic. A route names a valid GitHub repository, its upstream path is
//! canonical (no `.` or `..` segment, no empty one) and routes again to itself.
#![no_main]

use cc_gateway::git::route::{is_github_repository, route};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let (method, path, query) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
    match route(method, path, query) {
        Ok(r) => {
            let (owner, name) = r.repository.split_once('/').expect("owner/name");
            assert!(is_github_repository(owner, name), "{r:?}");
            let upstream = r.upstream_path();
            let (upstream_path, upstream_query) = match upstream.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (upstream.as_str(), None),
            };
            let segments = upstream_path.strip_prefix('/').expect("absolute").split('/');
            assert!(segments.clone().all(|s| !s.is_empty() && s != "." && s != ".."), "{upstream}");
            assert_eq!(route(method, upstream_path, upstream_query).as_ref(), Ok(&r));
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
    }
});
