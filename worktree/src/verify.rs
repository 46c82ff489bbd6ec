//! What makes a copy independent, checked rather than assumed.

use std::path::Path;

use super::WorktreeError;

/// A checkout whose `.git` is a file (a linked worktree, a submodule's gitfile), a
/// symlink, or a directory with a `commondir`, keeps its repository elsewhere: a copy of
/// it would write refs and objects into the person's repository. Refused.
pub fn check_git_dir(checkout: &Path) -> Result<(), String> {
    let git = checkout.join(".git");
    let meta = std::fs::symlink_metadata(&git).map_err(|e| format!("cannot inspect {}: {e}", git.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{} is a symlink: its repository lives elsewhere, and a copy would write into it",
            git.display()
        ));
    }
    if !meta.is_dir() {
        return Err(format!(
            "{} is a file (a linked worktree or a submodule): register the repository's main checkout",
            git.display()
        ));
    }
    if git.join("commondir").exists() {
        return Err(format!("{} shares its repository through commondir: register the main checkout", git.display()));
    }
    Ok(())
}

/// After a clone: HEAD and every ref of the copy must resolve to objects the copy has.
/// A checkout that git changed while it was copied (a commit, a gc) fails here instead
/// of leaving a torn repository behind.
pub fn verify_clone(copy: &Path) -> Result<(), WorktreeError> {
    let changed = |what: String| WorktreeError::Io {
        action: "verify",
        path: copy.to_owned(),
        source: std::io::Error::other(format!("{what}: the checkout changed while it was copied; retry")),
    };
    let repo = git2::Repository::open(copy).map_err(|e| changed(format!("the copy is not a repository ({e})")))?;
    match repo.head() {
        Ok(head) => {
            head.peel_to_commit().map_err(|e| changed(format!("HEAD does not resolve ({})", e.message())))?;
        }
        // A repository without commits has nothing to tear.
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch || e.code() == git2::ErrorCode::NotFound => {}
        Err(e) => return Err(changed(format!("HEAD is unreadable ({})", e.message()))),
    }
    for reference in repo.references().map_err(|e| changed(format!("refs are unreadable ({})", e.message())))? {
        let reference = reference.map_err(|e| changed(format!("a ref is unreadable ({})", e.message())))?;
        let name = reference.name().unwrap_or("a ref").to_owned();
        if let Some(oid) = reference.resolve().ok().and_then(|r| r.target())
            && repo.find_object(oid, None).is_err()
        {
            return Err(changed(format!("{name} points at a missing object")));
        }
    }
    Ok(())
}
