//! The code-execution vectors inside a run's writable roots, found (and, where a
//! missing one could be created by the agent, created empty) right before a launch, so
//! that the envelope can bind each of them read-only.
//!
//! The roots are the agent's to write and sandboxd is root, so the walk follows no
//! link ([`crate::beneath`]): each directory is opened from its parent's handle with
//! `O_NOFOLLOW`, and nothing is created in a directory reached any other way. A link
//! where git would expect a directory (`.git`, `.git/modules`, a submodule's
//! repository, `.git/worktrees`, a worktree's git directory) or a vector refuses the
//! launch: git would follow it, so protecting the link would protect nothing.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use cc_vectors::{GIT_DIR_VECTORS, RC_FILES};
use nix::errno::Errno;

use crate::beneath::{self, Entry};

/// How deep below a root to look for repositories (`repos/<name>/.git` is depth 2).
const REPO_DEPTH: usize = 3;

/// The inside of a git directory that holds neither repositories nor vectors: not
/// searched for submodule repositories named with slashes.
const GIT_INTERNALS: &[&str] = &["objects", "refs", "logs", "hooks", "info", "lfs", "modules", "worktrees"];

#[derive(Debug, thiserror::Error)]
pub enum ProtectError {
    #[error("{path} is a symlink where {what} must be; remove the link")]
    Link { path: PathBuf, what: &'static str },
    #[error("cannot open the run's root {path}: {source}")]
    Root { path: PathBuf, source: Errno },
}

impl ProtectError {
    /// The path a refusal names.
    pub fn path(&self) -> &Path {
        match self {
            Self::Link { path, .. } | Self::Root { path, .. } => path,
        }
    }
}

/// `create`: make the missing vectors (a launch) or only list the existing (explain).
///
/// Missing ones are created exclusively, never through a link, so that they exist to
/// be bound read-only: `hooks/` empty, `commondir` as `.` (the repository itself, which
/// is what git assumes without it), `config.worktree` and rc files empty.
pub fn prepare(writable: &[PathBuf], home: &Path, create: bool) -> Result<Vec<PathBuf>, ProtectError> {
    let mut walk = Walk { create, protected: Vec::new(), home_done: false };
    for root in writable {
        let dir =
            beneath::open_dir_no_links(root).map_err(|source| ProtectError::Root { path: root.clone(), source })?;
        walk.tree(&dir, root, REPO_DEPTH)?;
        if let Ok(below) = home.strip_prefix(root)
            && !walk.home_done
        {
            walk.home_done = true;
            walk.rc_files(&dir, below, home)?;
        }
    }
    walk.protected.sort();
    walk.protected.dedup();
    Ok(walk.protected)
}

/// The vectors of a git-worktree conversation's own worktree git directories
/// (`<common>/worktrees/<name>`: `commondir`, `config.worktree`, …), listed and never
/// created: they live in the person's repository. The rest of the common directory is
/// read-only in every envelope.
pub fn shared_vectors(shared: &[crate::policy::SharedGit]) -> Result<Vec<PathBuf>, ProtectError> {
    let mut walk = Walk { create: false, protected: Vec::new(), home_done: true };
    for git in shared {
        let dir = beneath::open_dir_no_links(&git.worktree_dir)
            .map_err(|source| ProtectError::Root { path: git.worktree_dir.clone(), source })?;
        walk.vectors(&dir, &git.worktree_dir)?;
    }
    Ok(walk.protected)
}

struct Walk {
    create: bool,
    protected: Vec<PathBuf>,
    /// HOME lies in one root at most (roots never nest); its rc files are done once.
    home_done: bool,
}

impl Walk {
    /// A directory of a root: its repository, and those below it to `depth`.
    fn tree(&mut self, dir: &OwnedFd, path: &Path, depth: usize) -> Result<(), ProtectError> {
        if let Some(git) = self.expect_dir(dir, path, ".git", "a repository's .git directory")? {
            self.git_dir(&git, &path.join(".git"), REPO_DEPTH)?;
        } else if beneath::entry_at(dir, OsStr::new(".git")) == Ok(Entry::Other) {
            // A `.git` file (a linked worktree, a submodule checkout) names the git
            // directory git uses: re-pointed, it would lead git to one the agent made.
            self.protected.push(path.join(".git"));
        }
        if depth == 0 {
            return Ok(());
        }
        for name in beneath::names(dir).unwrap_or_default() {
            if name == ".git" {
                continue;
            }
            // A link or a file is not descended; a directory swapped for a link since
            // the listing fails to open and is skipped: neither is a repository here.
            if let Ok(child) = beneath::child_dir(dir, &name) {
                self.tree(&child, &path.join(&name), depth - 1)?;
            }
        }
        Ok(())
    }

    /// A git directory: its vectors, its submodules' repositories and its linked
    /// worktrees' git directories.
    fn git_dir(&mut self, git: &OwnedFd, path: &Path, depth: usize) -> Result<(), ProtectError> {
        self.vectors(git, path)?;
        if let Some(modules) = self.expect_dir(git, path, "modules", "the submodules' repositories (.git/modules)")? {
            self.modules(&modules, &path.join("modules"), depth, false)?;
        }
        let what = "the linked worktrees' git directories (.git/worktrees)";
        if let Some(worktrees) = self.expect_dir(git, path, "worktrees", what)? {
            let here = path.join("worktrees");
            for name in beneath::names(&worktrees).unwrap_or_default() {
                if let Some(worktree) =
                    self.expect_dir(&worktrees, &here, &name, "a linked worktree's git directory")?
                {
                    self.vectors(&worktree, &here.join(&name))?;
                }
            }
        }
        Ok(())
    }

    /// Submodules' repositories under `dir` (`.git/modules`, to `depth`): every
    /// directory holding a `config` is one, and names with slashes nest (`a/b`). Where
    /// only repositories belong (not inside one), a link refuses the launch.
    fn modules(&mut self, dir: &OwnedFd, path: &Path, depth: usize, in_repository: bool) -> Result<(), ProtectError> {
        if depth == 0 {
            return Ok(());
        }
        for name in beneath::names(dir).unwrap_or_default() {
            if in_repository && GIT_INTERNALS.iter().any(|i| name == *i) {
                continue;
            }
            let child = match beneath::entry_at(dir, &name) {
                Ok(Entry::Link) if in_repository => continue,
                Ok(Entry::Link | Entry::Dir) => self.expect_dir(dir, path, &name, "a submodule's repository")?,
                _ => None,
            };
            let Some(child) = child else { continue };
            let here = path.join(&name);
            let is_repository = beneath::entry_at(&child, OsStr::new("config")).is_ok_and(|e| e != Entry::Missing);
            if is_repository {
                self.git_dir(&child, &here, depth - 1)?;
            }
            self.modules(&child, &here, depth - 1, is_repository)?;
        }
        Ok(())
    }

    /// The vectors of one git directory, made first where missing.
    fn vectors(&mut self, git: &OwnedFd, path: &Path) -> Result<(), ProtectError> {
        if self.create {
            beneath::create_dir(git, "hooks");
            beneath::create_file(git, "commondir", b".\n");
            // Read only with extensions.worktreeConfig (in the protected config);
            // present and read-only all the same.
            beneath::create_file(git, "config.worktree", b"");
        }
        for name in GIT_DIR_VECTORS {
            self.protect(git, path, name, "a git code-execution vector, a real file or directory,")?;
        }
        Ok(())
    }

    /// Adds `name` in `dir` to the protected paths when it exists; a link there refuses
    /// the launch (git and shells would follow it).
    fn protect(&mut self, dir: &OwnedFd, path: &Path, name: &str, what: &'static str) -> Result<(), ProtectError> {
        match beneath::entry_at(dir, OsStr::new(name)) {
            Ok(Entry::Link) => Err(ProtectError::Link { path: path.join(name), what }),
            Ok(Entry::Missing) | Err(_) => Ok(()),
            Ok(_) => {
                self.protected.push(path.join(name));
                Ok(())
            }
        }
    }

    /// The shell start-up files in HOME (`below` the root `root_dir`), when HOME is in
    /// a writable root. A HOME that cannot be reached without a link gets nothing made.
    fn rc_files(&mut self, root_dir: &OwnedFd, below: &Path, home: &Path) -> Result<(), ProtectError> {
        let mut home_dir = root_dir.try_clone().map_err(|e| ProtectError::Root {
            path: home.to_owned(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        for name in below.iter() {
            match beneath::child_dir(&home_dir, name) {
                Ok(next) => home_dir = next,
                Err(_) => return Ok(()),
            }
        }
        for rc in RC_FILES {
            if self.create {
                beneath::create_file(&home_dir, rc, b"");
            }
            self.protect(&home_dir, home, rc, "a shell start-up file, a real file,")?;
        }
        Ok(())
    }

    /// `name` in `dir`, opened when it is a directory; `None` when it is missing or
    /// something else (a `.git` file of a submodule checkout names its repository,
    /// which is found under `.git/modules`); a link refuses the launch.
    fn expect_dir(
        &self,
        dir: &OwnedFd,
        path: &Path,
        name: impl AsRef<OsStr>,
        what: &'static str,
    ) -> Result<Option<OwnedFd>, ProtectError> {
        let name = name.as_ref();
        let link = || ProtectError::Link { path: path.join(name), what };
        match beneath::entry_at(dir, name) {
            Ok(Entry::Link) => Err(link()),
            Ok(Entry::Dir) => match beneath::child_dir(dir, name) {
                Ok(fd) => Ok(Some(fd)),
                // Swapped for a link between the look and the open.
                Err(Errno::ELOOP | Errno::ENOTDIR) => Err(link()),
                Err(_) => Ok(None),
            },
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        (tmp, root)
    }

    #[test]
    fn finds_nested_repositories_and_creates_what_is_missing() {
        let (_tmp, root) = canonical_tmp();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        fs::write(root.join("demo/.git/config"), "").unwrap();
        fs::create_dir_all(root.join("demo/vendor/lib/.git")).unwrap();
        fs::create_dir_all(root.join("demo/.git/modules/sub")).unwrap();
        fs::write(root.join("demo/.git/modules/sub/config"), "").unwrap();
        fs::create_dir_all(root.join("demo/.git/modules/a/b")).unwrap();
        fs::write(root.join("demo/.git/modules/a/b/config"), "").unwrap();
        fs::create_dir_all(root.join("demo/.git/worktrees/wt")).unwrap();
        fs::write(root.join("demo/.git/worktrees/wt/commondir"), "../..\n").unwrap();
        let protected = prepare(std::slice::from_ref(&root), &root, true).unwrap();
        assert!(protected.contains(&root.join("demo/.git/hooks")));
        assert!(protected.contains(&root.join("demo/.git/commondir")));
        assert_eq!(fs::read_to_string(root.join("demo/.git/commondir")).unwrap(), ".\n");
        assert!(protected.contains(&root.join("demo/.git/modules/sub/config")), "{protected:?}");
        assert!(protected.contains(&root.join("demo/.git/modules/a/b/config")), "{protected:?}");
        assert!(protected.contains(&root.join("demo/.git/worktrees/wt/commondir")), "{protected:?}");
        assert!(protected.contains(&root.join("demo/.git/worktrees/wt/config.worktree")), "{protected:?}");
        assert_eq!(fs::read_to_string(root.join("demo/.git/worktrees/wt/commondir")).unwrap(), "../..\n");
        assert!(protected.contains(&root.join("demo/.git/config")));
        assert!(protected.contains(&root.join("demo/vendor/lib/.git/hooks")));
        assert!(root.join("demo/.git/hooks").is_dir(), "created so that it can be bound read-only");
        assert!(protected.contains(&root.join(".bashrc")) && root.join(".bashrc").is_file());
        // Listing only creates nothing.
        fs::remove_dir(root.join("demo/vendor/lib/.git/hooks")).unwrap();
        let listed = prepare(std::slice::from_ref(&root), &root, false).unwrap();
        assert!(
            !listed.contains(&root.join("demo/vendor/lib/.git/hooks"))
                && !root.join("demo/vendor/lib/.git/hooks").exists()
        );
    }

    #[test]
    fn a_symlinked_vector_refuses_the_launch() {
        let (_tmp, root) = canonical_tmp();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        std::os::unix::fs::symlink("../evil-config", root.join("demo/.git/config")).unwrap();
        let err = prepare(std::slice::from_ref(&root), &root.join("nohome"), true).unwrap_err();
        assert!(err.to_string().contains("is a symlink"), "{err}");
        // An rc file planted as a link is refused too, and never written through.
        let home = root.join("home");
        fs::create_dir(&home).unwrap();
        let never = root.join("never-written");
        std::os::unix::fs::symlink(&never, home.join(".bashrc")).unwrap();
        fs::remove_file(root.join("demo/.git/config")).unwrap();
        let err = prepare(&[root.clone(), home.clone()], &home, true).unwrap_err();
        assert!(err.to_string().contains(".bashrc"), "{err}");
        assert!(!never.exists());
    }

    /// Issue 16, item 1: links where git keeps repositories. Each refuses, naming the
    /// link, and nothing is created or read through it.
    #[test]
    fn links_where_repositories_are_kept_refuse_and_create_nothing_outside() {
        for (at, what) in [
            ("demo/.git/modules", "(.git/modules)"),
            ("demo/.git/modules/x", "a submodule's repository"),
            ("demo/.git/worktrees", "(.git/worktrees)"),
            ("demo/.git/worktrees/w", "a linked worktree's git directory"),
            ("demo/vendor/.git", "a repository's .git directory"),
            ("demo/.git/hooks", "code-execution vector"),
        ] {
            let (_tmp, base) = canonical_tmp();
            let root = base.join("root");
            // A host directory shaped to match: it holds a subdirectory with a `config`.
            let host = base.join("host");
            fs::create_dir_all(host.join("repo")).unwrap();
            fs::write(host.join("repo/config"), "[core]\n").unwrap();
            fs::write(host.join("config"), "[core]\n").unwrap();
            fs::create_dir_all(root.join("demo/.git/modules")).unwrap();
            fs::create_dir_all(root.join("demo/.git/worktrees")).unwrap();
            fs::create_dir_all(root.join("demo/vendor")).unwrap();
            fs::write(root.join("demo/.git/config"), "").unwrap();
            let link = root.join(at);
            let _ = fs::remove_dir(&link);
            std::os::unix::fs::symlink(&host, &link).unwrap();
            let before: Vec<_> = fs::read_dir(&host).unwrap().map(|e| e.unwrap().file_name()).collect();
            let err = prepare(std::slice::from_ref(&root), &root, true).unwrap_err();
            assert!(err.to_string().contains(what), "{at}: {err}");
            assert_eq!(err.path(), link, "{at}");
            let after: Vec<_> = fs::read_dir(&host).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(before, after, "{at}: something was made in the host directory");
            assert!(!host.join("repo/hooks").exists() && !host.join("repo/commondir").exists(), "{at}");
        }
    }

    #[test]
    fn links_elsewhere_in_a_tree_are_neither_followed_nor_refused() {
        let (_tmp, base) = canonical_tmp();
        let root = base.join("root");
        let host = base.join("host");
        fs::create_dir_all(host.join(".git")).unwrap();
        fs::create_dir_all(root.join("demo/.git")).unwrap();
        std::os::unix::fs::symlink(&host, root.join("demo/vendor")).unwrap();
        let protected = prepare(std::slice::from_ref(&root), &root, true).unwrap();
        assert!(protected.iter().all(|p| p.starts_with(&root)), "{protected:?}");
        assert!(!host.join(".git/hooks").exists(), "nothing made through the link");
    }
}
