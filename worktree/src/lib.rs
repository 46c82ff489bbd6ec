//! Copy-on-write worktrees (DESIGN.md §4): the person's registered checkout is never
//! the directory an agent works in.
//!
//! * `reflink` (default): every file cloned with `FICLONE`/`clonefile`, `.git` included.
//!   A fully independent repository that costs no data blocks until it diverges.
//! * `copy`: the same result by byte copy, for filesystems that cannot reflink.
//! * `git-worktree`: `git worktree add`; fast, but shares the registered repository's
//!   object store and refs, and says so on every use.
//!
//! There is no silent fallback: a filesystem that cannot reflink, or a data directory on
//! another volume, is an error that names the cause and the fixes.
//!
//! A crate of its own: the supervisor owns conversations and decides when a copy is
//! made or removed; how a copy is made, checked and taken apart without following an
//! agent's links is this crate's one concept, tested (and benchmarked on a loopback
//! btrfs) without building the daemon.

mod preflight;
mod remove;
mod tree;
mod worktree_git;

use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use preflight::{check_reflink, filesystem_name};
pub use remove::remove_tree;
pub use tree::{CloneMode, TreeEvent, TreeStats, clone_tree, give_top, give_tree};
pub use worktree_git::{add_worktree, remove_worktree, undo_worktree, worktree_git_dir};

mod verify;
pub use verify::{check_git_dir, verify_clone};

/// How a conversation's copies are made. Its one spelling (`as_str`, `FromStr`, serde)
/// is what the CLI takes, the registry stores and the manifest records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    #[default]
    Reflink,
    Copy,
    GitWorktree,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reflink => "reflink",
            Self::Copy => "copy",
            Self::GitWorktree => "git-worktree",
        }
    }
}

/// A backend name that is none of the three.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown worktree backend {0:?} (expected reflink, copy or git-worktree)")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        match s {
            "" | "reflink" => Ok(Self::Reflink),
            "copy" => Ok(Self::Copy),
            "git-worktree" => Ok(Self::GitWorktree),
            other => Err(UnknownBackend(other.chars().take(64).collect())),
        }
    }
}

/// Said on every use of the git-worktree backend.
pub const GIT_WORKTREE_WARNING: &str = "the git-worktree backend shares the registered repository's object store and \
     refs: commits, branches and objects made in this conversation appear in the registered checkout";

/// The fixes, said with every refusal of the reflink backend.
const REFLINK_FIXES: &str = "move the data dir onto the checkout's btrfs, xfs (reflink=1) or APFS volume, \
     or choose --worktree-backend copy (a full copy, slow) or git-worktree (shares the checkout's objects and refs)";

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("data dir {data_dir} is on another volume than {checkout}; {REFLINK_FIXES}")]
    OtherVolume { data_dir: PathBuf, checkout: PathBuf },
    #[error("filesystem {fs} at {checkout} cannot reflink ({source}); {REFLINK_FIXES}")]
    CannotReflink { fs: String, checkout: PathBuf, source: std::io::Error },
    #[error("cannot {action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("git-worktree backend: {0}")]
    Git(#[from] git2::Error),
}

impl WorktreeError {
    /// Maps an I/O error to one that names what was done to which path.
    pub fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Self + 'a {
        move |source| Self::Io { action, path: path.to_owned(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for b in [Backend::Reflink, Backend::Copy, Backend::GitWorktree] {
            assert_eq!(b.as_str().parse::<Backend>().unwrap(), b);
        }
        assert!("cp".parse::<Backend>().is_err());
    }
}
