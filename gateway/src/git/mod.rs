//! git's smart protocol as the gateway sees it on a push, as pure functions over bytes so
//! that it is tested exhaustively and fuzzed (`gateway/fuzz`).
//!
//! A push (`POST …/git-receive-pack`) is a short head of pkt-lines, the ref-update
//! commands, then the pack as raw bytes. The gateway reads the head as it streams
//! ([`request`]), asks the gate about each ref, forwards the allowed commands and the
//! pack upstream without holding the pack, and answers refused refs with git's own
//! report-status ([`report`]) so that `git push` prints
//! `! [remote rejected] main -> main (Control Center policy: …)`.

pub mod pktline;
pub mod plan;
pub mod report;
pub mod request;
pub mod route;

/// A ref name git would accept (`git check-ref-format`), under `refs/`: what may be
/// named in a command we forward or a status line we write.
pub fn is_valid_ref_name(name: &str) -> bool {
    const MAX_REF_BYTES: usize = 4096;
    name.len() <= MAX_REF_BYTES
        && name.starts_with("refs/")
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.bytes().any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
        && !name.split('/').any(|c| c.is_empty() || c.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_follow_check_ref_format() {
        for ok in ["refs/heads/main", "refs/tags/v1.0", "refs/heads/feature/x-y_z", "refs/for/main%topic"] {
            assert!(is_valid_ref_name(ok), "{ok}");
        }
        for bad in [
            "main",
            "refs/heads/",
            "refs/heads/a..b",
            "refs/heads/a.lock",
            "refs/heads/.hidden",
            "refs/heads/a b",
            "refs/heads/a\nb",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a@{0}",
            "refs//heads",
            "refs/heads/x.",
            "refs/heads/a\\b",
        ] {
            assert!(!is_valid_ref_name(bad), "{bad:?}");
        }
    }
}
