//! The code-execution vectors inside a run's writable roots, found (and, where a
//! missing one could be created by the agent, created empty) right before a launch, so
//! that the envelope can bind each of them read-only.

use std::fs;
use std::path::{Path, PathBuf};

use cc_vectors::{GIT_DIR_VECTORS, RC_FILES};

/// How deep below a root to look for repositories (`repos/<name>/.git` is depth 2).
const REPO_DEPTH: usize = 3;

/// `create`: make the missing vectors (a launch) or only list the existing (explain).
///
/// A vector that is a symlink is refused: git and shells follow it, so protecting the
/// link would protect nothing. Missing ones are created (exclusively, never through a
/// link) so that they exist to be bound read-only: `hooks/` empty, `commondir` as
/// `.` (the repository itself, which is what git assumes without it), rc files empty.
pub fn prepare(writable: &[PathBuf], home: &Path, create: bool) -> Result<Vec<PathBuf>, String> {
    let mut protected = Vec::new();
    for root in writable {
        for git in find_git_dirs(root, REPO_DEPTH) {
            if create {
                if fs::create_dir(git.join("hooks")).is_ok() {
                    give_to_owner_of(&git, &git.join("hooks"));
                }
                if create_exclusive(&git.join("commondir"), b".\n") {
                    give_to_owner_of(&git, &git.join("commondir"));
                }
                // Read only with extensions.worktreeConfig (in the protected config);
                // present and read-only all the same.
                if create_exclusive(&git.join("config.worktree"), b"") {
                    give_to_owner_of(&git, &git.join("config.worktree"));
                }
            }
            for name in GIT_DIR_VECTORS {
                let p = git.join(name);
                match fs::symlink_metadata(&p) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(format!(
                            "{} is a symlink: a git code-execution vector must be a real file; remove it",
                            p.display()
                        ));
                    }
                    Ok(_) => protected.push(p),
                    Err(_) => {}
                }
            }
        }
    }
    if writable.iter().any(|root| home.starts_with(root)) {
        for rc in RC_FILES {
            let p = home.join(rc);
            if create && create_exclusive(&p, b"") {
                give_to_owner_of(home, &p);
            }
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!(
                        "{} is a symlink: a shell start-up file must be a real file; remove it",
                        p.display()
                    ));
                }
                Ok(_) => protected.push(p),
                Err(_) => {}
            }
        }
    }
    Ok(protected)
}

/// Creates a file that does not exist, never through a link (O_EXCL|O_NOFOLLOW).
fn create_exclusive(path: &Path, contents: &[u8]) -> bool {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path);
    file.and_then(|mut f| f.write_all(contents)).is_ok()
}

/// What we create in someone's directory is theirs (we may be root).
fn give_to_owner_of(dir: &Path, created: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = fs::metadata(dir) {
        let _ = std::os::unix::fs::lchown(created, Some(m.uid()), Some(m.gid()));
    }
}

fn find_git_dirs(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let git = root.join(".git");
    if fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        // Submodules keep their repositories under .git/modules.
        found.extend(find_module_git_dirs(&git.join("modules"), REPO_DEPTH));
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

/// Repositories of submodules: directories under `.git/modules` that hold a `config`.
fn find_module_git_dirs(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if path.join("config").is_file() {
            found.push(path.clone());
        }
        if depth > 0 {
            found.extend(find_module_git_dirs(&path.join("modules"), depth - 1));
            for nested in find_module_git_dirs(&path, depth - 1) {
                if !found.contains(&nested) {
                    found.push(nested);
                }
            }
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
        fs::create_dir_all(root.join("demo/.git/modules/sub")).unwrap();
        fs::write(root.join("demo/.git/modules/sub/config"), "").unwrap();
        let protected = prepare(std::slice::from_ref(&root), &home, true).unwrap();
        assert!(protected.contains(&root.join("demo/.git/hooks")));
        assert!(protected.contains(&root.join("demo/.git/commondir")));
        assert_eq!(fs::read_to_string(root.join("demo/.git/commondir")).unwrap(), ".\n");
        assert!(protected.contains(&root.join("demo/.git/modules/sub/config")), "{protected:?}");
        assert!(protected.contains(&root.join("demo/.git/config")));
        assert!(protected.contains(&root.join("demo/vendor/lib/.git/hooks")));
        assert!(root.join("demo/.git/hooks").is_dir(), "created so that it can be bound read-only");
        assert!(protected.contains(&home.join(".bashrc")) && home.join(".bashrc").is_file());
    }

    #[test]
    fn a_symlinked_vector_refuses_the_launch() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        std::os::unix::fs::symlink("../evil-config", root.join("demo/.git/config")).unwrap();
        let err = prepare(std::slice::from_ref(&root), &root.join("nohome"), true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        // An rc file planted as a link is refused too, and never written through.
        let home = root.join("home");
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink("/tmp/cc-never-written", home.join(".bashrc")).unwrap();
        fs::remove_file(root.join("demo/.git/config")).unwrap();
        assert!(prepare(std::slice::from_ref(&root), &home, true).unwrap_err().contains(".bashrc"));
        assert!(!Path::new("/tmp/cc-never-written").exists());
    }
}
