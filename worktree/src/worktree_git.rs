//! The git-worktree backend: `git worktree add` on a branch `cc/<conversation>`.
//! It writes into the registered repository (its worktree list and a branch), which is
//! exactly why it is weaker and is announced on every use.

use std::path::Path;

use git2::{Repository, WorktreeAddOptions, WorktreePruneOptions};

use super::WorktreeError;

fn worktree_name(conversation: &str, repo: &str) -> String {
    format!("cc-{conversation}-{repo}")
}

/// The git directory a conversation's worktree of `checkout` uses inside the
/// registered repository (`<checkout>/.git/worktrees/<name>`). Computed, never read
/// from the worktree's `.git` file, which is the agent's to rewrite.
pub fn worktree_git_dir(checkout: &Path, conversation: &str, repo: &str) -> std::path::PathBuf {
    checkout.join(".git").join("worktrees").join(worktree_name(conversation, repo))
}

/// Adds a worktree of `checkout` at `target` on a new branch; returns the branch name.
pub fn add_worktree(checkout: &Path, target: &Path, conversation: &str, repo: &str) -> Result<String, WorktreeError> {
    let repository = Repository::open(checkout)?;
    let head = repository.head()?.peel_to_commit()?;
    let branch_name = format!("cc/{conversation}");
    let branch = repository.branch(&branch_name, &head, false)?;
    let mut options = WorktreeAddOptions::new();
    options.reference(Some(branch.get()));
    repository.worktree(&worktree_name(conversation, repo), target, Some(&options))?;
    Ok(branch_name)
}

/// Undoes a provisioning that failed: the worktree entry, and the branch if it still
/// points where it was made (nobody has committed on it).
pub fn undo_worktree(checkout: &Path, conversation: &str, repo: &str) -> Result<(), WorktreeError> {
    remove_worktree(checkout, conversation, repo)?;
    let repository = Repository::open(checkout)?;
    let head = repository.head()?.peel_to_commit()?.id();
    if let Ok(mut branch) = repository.find_branch(&format!("cc/{conversation}"), git2::BranchType::Local)
        && branch.get().target() == Some(head)
    {
        branch.delete()?;
    }
    Ok(())
}

/// Forgets the worktree in the registered repository. The working directory itself is
/// removed by the caller; the branch, which may hold the agent's commits, is kept. A
/// repository that is gone, or a worktree it no longer knows, is already forgotten.
pub fn remove_worktree(checkout: &Path, conversation: &str, repo: &str) -> Result<(), WorktreeError> {
    let repository = match Repository::open(checkout) {
        Ok(r) => r,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let worktree = match repository.find_worktree(&worktree_name(conversation, repo)) {
        Ok(w) => w,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    worktree.prune(Some(WorktreePruneOptions::new().valid(true).locked(false).working_tree(false)))?;
    Ok(())
}
