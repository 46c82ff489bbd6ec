//! The code-execution vectors inside a run's writable roots, found (and, where a
//! missing one could be created by the agent, created empty) right before a launch, so
//! that the envelope can bind each of them read-only.

use std::fs;
use std::path::{Path, PathBuf};

/// Shell and tool start-up files in HOME: written by an agent, run by the next shell.
const RC_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".inputrc",
    ".gitconfig",
];

/// How deep below a root to look for repositories (`repos/<name>/.git` is depth 2).
const REPO_DEPTH: usize = 3;

/// `create`: make the missing vectors (a launch) or only list the existing (explain).
pub fn prepare(writable: &[PathBuf], home: &Path, create: bool) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    for root in writable {
        for git in find_git_dirs(root, REPO_DEPTH) {
            let hooks = git.join("hooks");
            // A missing hooks directory could be created and filled by the agent.
            if create && fs::create_dir(&hooks).is_ok() {
                give_to_owner_of(&git, &hooks);
            }
            for name in ["hooks", "config", "config.worktree", "commondir", "info"] {
                let p = git.join(name);
                if is_real(&p) {
                    protected.push(p);
                }
            }
        }
    }
    if writable.iter().any(|root| home.starts_with(root)) {
        for rc in RC_FILES {
            let p = home.join(rc);
            if create && fs::symlink_metadata(&p).is_err() && fs::write(&p, b"").is_ok() {
                give_to_owner_of(home, &p);
            }
            if is_real(&p) {
                protected.push(p);
            }
        }
    }
    protected
}

/// What we create in someone's directory is theirs (we may be root).
fn give_to_owner_of(dir: &Path, created: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = fs::metadata(dir) {
        let _ = std::os::unix::fs::lchown(created, Some(m.uid()), Some(m.gid()));
    }
}

/// Exists and is not a symlink (a bind through a link would protect the wrong thing).
fn is_real(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_symlink())
}

fn find_git_dirs(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let git = root.join(".git");
    if fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        found.push(git);
    }
    if depth == 0 {
        return found;
    }
    let Ok(entries) = fs::read_dir(root) else { return found };
    for entry in entries.flatten() {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && entry.file_name() != ".git" {
            found.extend(find_git_dirs(&entry.path(), depth - 1));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_repositories_and_creates_what_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        fs::write(root.join("demo/.git/config"), "").unwrap();
        fs::create_dir_all(root.join("demo/vendor/lib/.git")).unwrap();
        let home = root.join("home");
        fs::create_dir(&home).unwrap();
        let protected = prepare(std::slice::from_ref(&root), &home, true);
        assert!(protected.contains(&root.join("demo/.git/hooks")));
        assert!(protected.contains(&root.join("demo/.git/config")));
        assert!(protected.contains(&root.join("demo/vendor/lib/.git/hooks")));
        assert!(root.join("demo/.git/hooks").is_dir(), "created so that it can be bound read-only");
        assert!(protected.contains(&home.join(".bashrc")) && home.join(".bashrc").is_file());
    }

    #[test]
    fn symlinks_are_not_protected_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("demo/.git/config")).unwrap();
        let protected = prepare(std::slice::from_ref(&root), &root.join("nohome"), true);
        assert!(!protected.contains(&root.join("demo/.git/config")));
    }
}
