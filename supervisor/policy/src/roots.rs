//! Where a run may write, decided from names before anything runs (issue 37).
//!
//! The harness's own file tools are confined by the runner, which opens every path
//! beneath the run's roots. An agent that writes with its own tools (Claude Code's
//! Write and Edit, an ACP agent's edit) asks first, through its hook or a permission
//! request, and that answer is judged here the same way: a write into a registered
//! checkout, outside every root of the run, or into a root the run may only read is
//! denied with that reason, whatever a rule says. The envelope still stops what the
//! answer cannot see (a link planted inside a root): this judges names, as the gate's
//! path rules do.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// One of a run's roots, and whether the run may write beneath it.
#[derive(Debug, Clone, Copy)]
pub struct Root<'a> {
    pub path: &'a Path,
    pub writable: bool,
}

/// Why a write is refused by where it lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misplaced {
    /// Into a registered checkout: the run works in its copy, never in the original.
    Checkout { path: String },
    /// Outside every root of the run.
    Outside { path: String },
    /// Beneath a root the run may only read (its attachments).
    ReadOnly { path: String },
}

impl Misplaced {
    /// The reason the agent and the run's events are given.
    pub fn reason(&self) -> String {
        match self {
            Misplaced::Checkout { path } => format!(
                "{path} is in a registered checkout, which a run never writes: write the run's copy, under its working directory"
            ),
            Misplaced::Outside { path } => {
                format!("{path} is outside the run's roots: write under its working directory")
            }
            Misplaced::ReadOnly { path } => format!("{path} is in the run's attachments, which it may only read"),
        }
    }
}

/// `gate_path` (as [`crate::paths::gate_path`] spells it: relative to `work_dir`, or
/// absolute) as an absolute path, `.` and `..` resolved by spelling.
pub fn absolute(gate_path: &str, work_dir: &Path) -> PathBuf {
    let joined = work_dir.join(gate_path);
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(n) => parts.push(n),
            Component::ParentDir => {
                parts.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let mut out = PathBuf::from("/");
    out.extend(parts);
    out
}

/// The first of `paths` (gate paths) that a write may not touch, and why: a registered
/// checkout first, since a copy is never inside its original.
pub fn check_write(paths: &[String], work_dir: &Path, roots: &[Root], checkouts: &[&Path]) -> Result<(), Misplaced> {
    for raw in paths {
        let path = absolute(raw, work_dir);
        let shown = path.display().to_string();
        if checkouts.iter().any(|c| path.starts_with(c)) {
            return Err(Misplaced::Checkout { path: shown });
        }
        // The innermost root decides: a read-only root inside a writable one stays read-only.
        let root = roots.iter().filter(|r| path.starts_with(r.path)).max_by_key(|r| r.path.components().count());
        match root {
            None => return Err(Misplaced::Outside { path: shown }),
            Some(root) if !root.writable => return Err(Misplaced::ReadOnly { path: shown }),
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::gate_path;

    const WORK: &str = "/data/conversations/c1/repos/demo";

    fn check(raw: &str) -> Result<(), Misplaced> {
        let work = Path::new(WORK);
        let roots = [
            Root { path: Path::new("/data/conversations/c1/repos"), writable: true },
            Root { path: Path::new("/data/conversations/c1/agents/a/work"), writable: true },
            Root { path: Path::new("/data/workspaces/default/attachments"), writable: false },
        ];
        let checkouts = [Path::new("/home/me/demo"), Path::new("/srv/real/demo")];
        check_write(&[gate_path(raw, work)], work, &roots, &checkouts)
    }

    #[test]
    fn a_write_lands_inside_a_writable_root_or_is_refused_by_where_it_lands() {
        for inside in [
            "src/lib.rs",
            "./notes.txt",
            "/data/conversations/c1/repos/demo/a/../b.txt",
            "../other-repo/x",
            "/data/conversations/c1/agents/a/work/.cache/x",
            ".",
        ] {
            assert_eq!(check(inside), Ok(()), "{inside}");
        }
        let outside = |p: &str| Err(Misplaced::Outside { path: p.to_owned() });
        assert_eq!(check("/etc/passwd"), outside("/etc/passwd"));
        assert_eq!(check("../../../../../etc/passwd"), outside("/etc/passwd"));
        assert_eq!(check("/data/conversations/c1/repos/../../c2/repos/x"), outside("/data/conversations/c2/repos/x"));
        assert_eq!(check("/tmp/x.py"), outside("/tmp/x.py"));
        // A name that merely begins like a root is not beneath it.
        assert_eq!(check("/data/conversations/c1/repos2/x"), outside("/data/conversations/c1/repos2/x"));
        assert_eq!(
            check("/home/me/demo/src/lib.rs"),
            Err(Misplaced::Checkout { path: "/home/me/demo/src/lib.rs".into() })
        );
        assert_eq!(
            check("/home/me/x/../demo/.git/hooks/pre-commit"),
            Err(Misplaced::Checkout { path: "/home/me/demo/.git/hooks/pre-commit".into() })
        );
        assert_eq!(
            check("/data/workspaces/default/attachments/spec.pdf"),
            Err(Misplaced::ReadOnly { path: "/data/workspaces/default/attachments/spec.pdf".into() })
        );
    }

    #[test]
    fn the_reason_names_the_path_and_what_to_do_instead() {
        let reason = check("/etc/passwd").unwrap_err().reason();
        assert_eq!(reason, "/etc/passwd is outside the run's roots: write under its working directory");
        assert!(check("/home/me/demo/x").unwrap_err().reason().contains("registered checkout"));
    }

    #[test]
    fn a_checkout_inside_a_root_is_still_a_checkout() {
        let work = Path::new("/w/repos/demo");
        let roots = [Root { path: Path::new("/w"), writable: true }];
        let checkouts = [Path::new("/w/registered")];
        let paths = [gate_path("/w/registered/a", work)];
        assert!(matches!(check_write(&paths, work, &roots, &checkouts), Err(Misplaced::Checkout { .. })));
    }
}
