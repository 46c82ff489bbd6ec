//! Whether a pushed update is a fast-forward. The gateway never holds the pack, so it
//! asks the run's own checkouts, where the pushed commit was made: if `new` is there
//! and `old` is among its ancestors, the update is a fast-forward. Object ids bind a
//! commit to its parents, so what an agent wrote into its checkout cannot fake that
//! answer; a commit found in none of them (pushed from a clone of its own) is taken
//! for a force push, which is the stricter reading.
//!
//! Only the object database is opened (libgit2, never the `git` program, which would
//! run what the agent's repository config names), and not as a repository: a copy
//! belongs to the run's user, and opening it as a repository would be refused for
//! its owner. The checkout is the agent's to write, so the way to its objects goes by
//! handle, never through a link: the checkout and any git directory a `.git` file or
//! `commondir` names are opened with no link anywhere on their path, each step below
//! them with `O_NOFOLLOW`, and those files are read only if they are regular files. What
//! libgit2 then reads inside the object directory may still be the agent's links: it
//! only ever yields a yes or a no, never bytes, and the caller bounds its time.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use cc_host::resolve::{Links, open_beneath};
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// True only when some checkout shows `old` to be an ancestor of (or equal to) `new`.
pub fn is_fast_forward(checkouts: &[PathBuf], old: &str, new: &str) -> bool {
    let (Ok(old), Ok(new)) = (git2::Oid::from_str(old), git2::Oid::from_str(new)) else {
        return false;
    };
    if old == new {
        return true;
    }
    checkouts.iter().filter_map(|dir| objects_dir(dir)).any(|objects| {
        let Ok(odb) = git2::Odb::new() else { return false };
        // The handle's own path: libgit2 starts from the directory we opened.
        if odb.add_disk_alternate(&format!("/proc/self/fd/{}", objects.as_raw_fd())).is_err() {
            return false;
        }
        let repo = git2::Repository::from_odb(odb);
        repo.is_ok_and(|repo| repo.graph_descendant_of(new, old).unwrap_or(false))
    })
}

/// An absolute directory with no link anywhere on its path.
fn open_dir(path: &Path) -> Option<OwnedFd> {
    let root =
        openat(nix::fcntl::AT_FDCWD, "/", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .ok()?;
    let relative = path.strip_prefix("/").ok()?;
    if relative.as_os_str().is_empty() {
        return Some(root);
    }
    open_beneath(root.as_fd(), relative, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Links::Refuse).ok()
}

/// A directory below an open one, by one name, never through a link.
fn child(dir: &OwnedFd, name: &str) -> Option<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty()).ok()
}

/// A small regular file below an open directory (`.git`, `commondir`): never through a
/// link, never blocking on a FIFO.
fn read_small(dir: &OwnedFd, name: &str) -> Option<String> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = std::fs::File::from(openat(dir, name, flags, Mode::empty()).ok()?);
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, 4096), &mut text).ok()?;
    Some(text.trim_end().to_owned())
}

/// The object directory of a checkout: `.git/objects`, or for a worktree (`.git` is a
/// file naming its git dir) its common dir's.
fn objects_dir(checkout: &Path) -> Option<OwnedFd> {
    let top = open_dir(checkout)?;
    if let Some(git) = child(&top, ".git") {
        return child(&git, "objects");
    }
    let named = PathBuf::from(read_small(&top, ".git")?.strip_prefix("gitdir: ")?);
    let git_dir = if named.is_absolute() { named } else { checkout.join(named) };
    let common = match read_small(&open_dir(&git_dir)?, "commondir") {
        Some(common) if Path::new(&common).is_absolute() => PathBuf::from(common),
        Some(common) => git_dir.join(common),
        None => git_dir,
    };
    child(&open_dir(&common)?, "objects")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &git2::Repository, parents: &[&git2::Commit<'_>], message: &str) -> git2::Oid {
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        let tree = repo.find_tree(repo.treebuilder(None).unwrap().write().unwrap()).unwrap();
        // The first two make a branch (a worktree needs one); the rest are loose.
        let head = (message != "c").then_some("HEAD");
        repo.commit(head, &sig, &sig, message, &tree, parents).unwrap()
    }

    #[test]
    fn ancestry_in_a_checkout_decides_and_the_unknown_is_forced() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let a = commit(&repo, &[], "a");
        let b = commit(&repo, &[&repo.find_commit(a).unwrap()], "b");
        let c = commit(&repo, &[&repo.find_commit(a).unwrap()], "c");
        let dirs = vec![PathBuf::from("/nonexistent"), dir.path().to_owned()];
        assert!(is_fast_forward(&dirs, &a.to_string(), &b.to_string()));
        assert!(!is_fast_forward(&dirs, &b.to_string(), &c.to_string()), "a sibling is a force push");
        assert!(!is_fast_forward(&dirs, &b.to_string(), &a.to_string()), "going back is a force push");
        let unknown = "1111111111111111111111111111111111111111";
        assert!(!is_fast_forward(&dirs, &a.to_string(), unknown));
        assert!(!is_fast_forward(&[], &a.to_string(), &b.to_string()));
        assert!(!is_fast_forward(&dirs, "zz", &b.to_string()));

        // A worktree's objects are its common dir's.
        let worktree = dir.path().join("wt");
        let branch = repo.branch("wt", &repo.find_commit(b).unwrap(), false).unwrap();
        let mut options = git2::WorktreeAddOptions::new();
        options.reference(Some(branch.get()));
        repo.worktree("wt", &worktree, Some(&options)).unwrap();
        assert!(std::fs::symlink_metadata(worktree.join(".git")).unwrap().is_file());
        assert!(is_fast_forward(std::slice::from_ref(&worktree), &a.to_string(), &b.to_string()));

        // Links are not followed: a checkout reached through one, or whose `.git` is one.
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(dir.path(), &linked).unwrap();
        assert!(!is_fast_forward(&[linked], &a.to_string(), &b.to_string()));
        let planted = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join(".git"), planted.path().join(".git")).unwrap();
        assert!(!is_fast_forward(&[planted.path().to_owned()], &a.to_string(), &b.to_string()));
        // A FIFO where the `.git` file belongs does not hold the check.
        let fifo = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&fifo.path().join(".git"), Mode::from_bits_truncate(0o600)).unwrap();
        assert!(!is_fast_forward(&[fifo.path().to_owned()], &a.to_string(), &b.to_string()));
    }
}
