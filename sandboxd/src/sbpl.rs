//! The macOS envelope: a Seatbelt (SBPL) profile for `sandbox-exec`, generated from
//! the same run policy as the Linux envelope (DESIGN.md §5). Pure, so that it is
//! tested on every platform; only the launch through `/usr/bin/sandbox-exec` is
//! macOS-only.
//!
//! `(allow default)` with carve-outs, as the original product chose (deny-default
//! makes an interactive shell unusable). In SBPL a later rule overrides an earlier one,
//! so the order below is the policy: secrets unreadable; every write denied, the run's
//! roots allowed, the write-deny set and protected paths denied again;
//! `file-write-unlink` denied on every denied path and all its ancestors, so that a
//! rename cannot get round a write deny; exec denied for dangerous binaries and for
//! anything in a writable root; network only to the bridge ports and DNS. Every path
//! is emitted as given and in its resolved spellings (`/tmp` is `/private/tmp`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bwrap::{Kind, roots};
use crate::policy::RunPolicy;

/// macOS's PATH_MAX: a longer path cannot name a file, and is refused.
pub const MAX_PATH_BYTES: usize = 1024;

/// Binaries no agent command may run, whatever the mode.
pub const DANGEROUS_BINARIES: &[&str] = &[
    "/usr/bin/sudo",
    "/usr/bin/su",
    "/usr/bin/login",
    "/usr/sbin/chown",
    "/usr/bin/osascript",
    "/usr/bin/security",
    "/usr/sbin/diskutil",
    "/sbin/mount",
    "/usr/bin/csrutil",
    "/bin/launchctl",
    "/usr/bin/dscl",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SbplError {
    #[error("path {0:?} is not UTF-8: SBPL cannot name it")]
    NotUtf8(String),
    #[error("path {0} is longer than {MAX_PATH_BYTES} bytes")]
    TooLong(String),
    #[error("path {0:?} is not absolute")]
    NotAbsolute(String),
}

/// What a profile is made from besides the policy.
pub struct ProfileInputs<'a> {
    pub policy: &'a RunPolicy,
    pub kind: Kind,
    /// Paths no process may read (the person's ~/.ssh, ~/.aws, …, the data dir).
    pub secrets: &'a [PathBuf],
    /// Protected paths inside writable roots (`.git/hooks`, rc files).
    pub protected: &'a [PathBuf],
    /// Loopback ports of the run's bridges (egress proxy, push gateway).
    pub ports: &'a [u16],
    /// Resolves symlinks in a path (the real filesystem in production).
    pub resolve: &'a dyn Fn(&Path) -> Option<PathBuf>,
}

/// Every spelling of a path: as given, resolved, and across macOS's `/private` links.
pub fn spellings(path: &Path, resolve: &dyn Fn(&Path) -> Option<PathBuf>) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut add = |p: PathBuf| {
        for top in ["/tmp", "/var", "/etc"] {
            if let Ok(rest) = p.strip_prefix(top) {
                out.insert(Path::new("/private").join(top.trim_start_matches('/')).join(rest));
            }
            if let Ok(rest) = p.strip_prefix(Path::new("/private").join(top.trim_start_matches('/'))) {
                out.insert(Path::new(top).join(rest));
            }
        }
        out.insert(p);
    };
    add(path.to_owned());
    if let Some(resolved) = resolve(path) {
        add(resolved);
    }
    out
}

/// An SBPL string literal.
fn quote(path: &Path) -> Result<String, SbplError> {
    let text = path.to_str().ok_or_else(|| SbplError::NotUtf8(path.to_string_lossy().into_owned()))?;
    if !path.is_absolute() {
        return Err(SbplError::NotAbsolute(text.to_owned()));
    }
    if text.len() > MAX_PATH_BYTES {
        return Err(SbplError::TooLong(text.chars().take(64).collect::<String>() + "…"));
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(out)
}

/// One rule over several paths, each in every spelling.
fn rule(out: &mut String, action: &str, filter: &str, paths: &BTreeSet<PathBuf>) -> Result<(), SbplError> {
    if paths.is_empty() {
        return Ok(());
    }
    let _ = writeln!(out, "({action}");
    for p in paths {
        let _ = writeln!(out, "  ({filter} {})", quote(p)?);
    }
    out.push_str(")\n");
    Ok(())
}

pub fn profile(inputs: &ProfileInputs<'_>) -> Result<String, SbplError> {
    let resolve = inputs.resolve;
    let all = |paths: &mut dyn Iterator<Item = &PathBuf>| -> BTreeSet<PathBuf> {
        paths.flat_map(|p| spellings(p, resolve)).collect()
    };
    let (writable, _readonly) = roots(inputs.policy, inputs.kind);
    let writable = all(&mut writable.iter());
    let secrets = all(&mut inputs.secrets.iter());
    let denied = all(&mut inputs.policy.write_deny.iter().chain(inputs.protected));
    let mut ancestors = BTreeSet::new();
    for path in &denied {
        let mut p = path.as_path();
        while let Some(parent) = p.parent() {
            ancestors.insert(parent.to_owned());
            p = parent;
        }
    }

    let mut out = String::from("(version 1)\n(allow default)\n");
    out.push_str("\n; Secrets: unreadable.\n");
    rule(&mut out, "deny file-read*", "subpath", &secrets)?;
    out.push_str("\n; Writes: none, except the run's roots and the usual devices.\n(deny file-write*)\n");
    rule(&mut out, "allow file-write*", "subpath", &writable)?;
    out.push_str(
        "(allow file-write-data\n  (literal \"/dev/null\")\n  (literal \"/dev/zero\")\n  (literal \"/dev/dtracehelper\")\n  (regex #\"^/dev/tty\"))\n",
    );
    out.push_str("\n; Never writable, whatever allows them above: the write-deny set and protected paths.\n");
    rule(&mut out, "deny file-write*", "subpath", &denied)?;
    out.push_str("\n; No rename or unlink of a denied path or of any of its ancestors.\n");
    rule(&mut out, "deny file-write-unlink", "literal", &denied.union(&ancestors).cloned().collect())?;
    out.push_str("\n; Exec: never the dangerous binaries, never anything in a writable root.\n");
    rule(&mut out, "deny process-exec", "literal", &DANGEROUS_BINARIES.iter().map(PathBuf::from).collect())?;
    rule(&mut out, "deny process-exec", "subpath", &writable)?;
    out.push_str("\n; Network: the run's bridges on loopback, and DNS.\n(deny network*)\n");
    if !inputs.ports.is_empty() {
        out.push_str("(allow network-outbound\n");
        for port in inputs.ports {
            let _ = writeln!(out, "  (remote ip \"localhost:{port}\")");
        }
        out.push_str(")\n");
    }
    out.push_str("(allow network-outbound\n  (literal \"/private/var/run/mDNSResponder\"))\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn identity(_: &Path) -> Option<PathBuf> {
        None
    }

    fn policy(work: &str, deny: &[&str]) -> RunPolicy {
        RunPolicy {
            run_id: "r1".into(),
            agent_work: Some("/Users/me/Library/cc/conversations/c1/agents/a/work".into()),
            agent_config: Some("/Users/me/Library/cc/conversations/c1/agents/a/config".into()),
            repos: Some("/Users/me/Library/cc/conversations/c1/repos".into()),
            attachments: None,
            work_dir: work.into(),
            write_deny: deny.iter().map(PathBuf::from).collect(),
            env: BTreeMap::new(),
            bridges: BTreeMap::new(),
            runner_socket_dir: None,
            shared_git: vec![],
            identities: vec![],
            limits: Default::default(),
        }
    }

    fn golden(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
        if std::env::var_os("CC_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("{} missing: run with CC_UPDATE_GOLDEN=1", path.display()));
        assert_eq!(actual, expected, "{name} changed: review it, then CC_UPDATE_GOLDEN=1");
    }

    #[test]
    fn golden_harness_bash() {
        let p = policy("/Users/me/Library/cc/conversations/c1/repos/demo", &["/Users/me/src/demo"]);
        let protected = [PathBuf::from("/Users/me/Library/cc/conversations/c1/repos/demo/.git/hooks")];
        let secrets = [PathBuf::from("/Users/me/.ssh"), PathBuf::from("/Users/me/.aws")];
        let inputs = ProfileInputs {
            policy: &p,
            kind: Kind::HarnessBash,
            secrets: &secrets,
            protected: &protected,
            ports: &[],
            resolve: &identity,
        };
        golden("harness_bash.sb", &profile(&inputs).unwrap());
    }

    #[test]
    fn golden_overlay_with_bridges() {
        let p =
            policy("/Users/me/Library/cc/conversations/c1/repos/demo", &["/Users/me/src/demo", "/Users/me/src/lib"]);
        let secrets = [PathBuf::from("/Users/me/.config/gh")];
        let inputs = ProfileInputs {
            policy: &p,
            kind: Kind::Overlay,
            secrets: &secrets,
            protected: &[],
            ports: &[41001, 41002],
            resolve: &identity,
        };
        golden("overlay.sb", &profile(&inputs).unwrap());
    }

    /// A harness_bash profile of `p` with no secrets, protected paths or bridges.
    fn bare_profile(p: &RunPolicy) -> Result<String, SbplError> {
        profile(&ProfileInputs {
            policy: p,
            kind: Kind::HarnessBash,
            secrets: &[],
            protected: &[],
            ports: &[],
            resolve: &identity,
        })
    }

    #[test]
    fn golden_tmp_paths_in_both_spellings() {
        let mut p = policy("/tmp/cc/conversations/c2/repos/x", &["/var/folders/ab/T/checkout"]);
        p.agent_work = None;
        let text = bare_profile(&p).unwrap();
        assert!(text.contains("(subpath \"/private/tmp/cc/conversations/c2/repos/x\")"));
        assert!(text.contains("(subpath \"/private/var/folders/ab/T/checkout\")"));
        golden("tmp_spellings.sb", &text);
    }

    #[test]
    fn strings_are_escaped_and_bounded() {
        let p = policy("/Users/me/we\"ird\\dir", &["/Users/me/a\nb"]);
        let text = bare_profile(&p).unwrap();
        assert!(text.contains("\"/Users/me/we\\\"ird\\\\dir\""), "{text}");
        assert!(text.contains("\"/Users/me/a\\x0ab\""), "{text}");
        let long = format!("/{}", "x".repeat(MAX_PATH_BYTES + 1));
        let p = policy(&long, &[]);
        assert!(matches!(bare_profile(&p), Err(SbplError::TooLong(_))));
    }

    /// A small deterministic generator, so that the property runs without a dependency.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn path(&mut self) -> PathBuf {
            let tops = ["/tmp", "/private/tmp", "/var", "/Users/me", "/etc", "/opt"];
            let mut p = PathBuf::from(tops[(self.next() % tops.len() as u64) as usize]);
            for _ in 0..(1 + self.next() % 4) {
                p.push(format!("d{}", self.next() % 7));
            }
            p
        }
    }

    #[test]
    fn every_denied_path_is_denied_in_every_spelling_and_its_ancestors_cannot_be_unlinked() {
        let mut rng = Lcg(7);
        for _ in 0..300 {
            let deny: Vec<PathBuf> = (0..1 + rng.next() % 4).map(|_| rng.path()).collect();
            let protected: Vec<PathBuf> = (0..rng.next() % 3).map(|_| rng.path()).collect();
            let mut p = policy("/Users/me/work", &[]);
            p.write_deny = deny.clone();
            let inputs = ProfileInputs {
                policy: &p,
                kind: Kind::HarnessBash,
                secrets: &[],
                protected: &protected,
                ports: &[],
                resolve: &identity,
            };
            let text = profile(&inputs).unwrap();
            let deny_write = section(&text, "; Never writable");
            let deny_unlink = section(&text, "; No rename or unlink");
            for path in deny.iter().chain(&protected) {
                for spelling in spellings(path, &identity) {
                    let q = quote(&spelling).unwrap();
                    assert!(deny_write.contains(&format!("(subpath {q})")), "{q} not write-denied:\n{text}");
                    assert!(deny_unlink.contains(&format!("(literal {q})")), "{q} not unlink-denied:\n{text}");
                    let mut ancestor = spelling.as_path();
                    while let Some(parent) = ancestor.parent() {
                        assert!(
                            deny_unlink.contains(&format!("(literal {})", quote(parent).unwrap())),
                            "{} not unlink-denied",
                            parent.display()
                        );
                        ancestor = parent;
                    }
                }
            }
            // The denials come after the allows they override.
            assert!(text.find("(allow file-write*").unwrap() < text.find("; Never writable").unwrap());
        }
    }

    fn section<'a>(text: &'a str, heading: &str) -> &'a str {
        let start = text.find(heading).unwrap();
        let rest = &text[start + heading.len()..];
        &rest[..rest.find("\n;").unwrap_or(rest.len())]
    }
}
