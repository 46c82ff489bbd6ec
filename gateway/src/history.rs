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
//! its owner.

use std::path::{Path, PathBuf};

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
        if odb.add_disk_alternate(&objects.to_string_lossy()).is_err() {
            return false;
        }
        let repo = git2::Repository::from_odb(odb);
        repo.is_ok_and(|repo| repo.graph_descendant_of(new, old).unwrap_or(false))
    })
}

/// The object directory of a checkout: `.git/objects`, or for a worktree (`.git` is a
/// file naming its git dir) its common dir's.
fn objects_dir(checkout: &Path) -> Option<PathBuf> {
    let dot_git = checkout.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git.join("objects"));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let git_dir = PathBuf::from(text.strip_prefix("gitdir: ")?.trim_end());
    let git_dir = if git_dir.is_absolute() { git_dir } else { checkout.join(git_dir) };
    let common = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(common) => {
            let common = PathBuf::from(common.trim_end());
            if common.is_absolute() { common } else { git_dir.join(common) }
        }
        Err(_) => git_dir,
    };
    Some(common.join("objects"))
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
        assert!(is_fast_forward(&[worktree], &a.to_string(), &b.to_string()));
    }
}
