//! Removing a tree an agent wrote: relative to open directories, never following a
//! link, at any depth.

use std::ffi::OsStr;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::fcntl::{AtFlags, openat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::tree::{DIR_FLAGS, file_kind, names_in, open_dir_path};

/// Removes a tree we made. Every step is relative to an open directory and never
/// follows a link, so nothing outside the tree is touched even if a link is planted or
/// swapped in; directories an agent made unreadable (`chmod 000`) are opened up first.
/// Any depth: a directory deeper than [`REMOVE_DEPTH`] below the top is moved up to the
/// top (a rename within the tree) and removed in a later pass, so no more than that
/// many directories are ever open at once, however deep an agent nested them.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(meta) => meta,
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    let parent = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("cannot remove a root"))?;
    let parent_fd = open_dir_path(parent).map_err(|e| std::io::Error::other(e.to_string()))?;
    let top = open_to_remove(&parent_fd, OsStr::new(name), meta.mode())?;
    let mut moved_up = 0u64;
    // Each pass empties the top down to REMOVE_DEPTH; what lay deeper now waits at the
    // top. A pass that leaves the top as it found it would loop forever: an error.
    loop {
        let before = names_in(&top)?;
        if before.is_empty() {
            break;
        }
        for entry in &before {
            remove_below(&top, &top, entry, 1, &mut moved_up)?;
        }
        if names_in(&top)? == before {
            return Err(std::io::Error::other(format!("{} cannot be emptied", path.display())));
        }
    }
    Ok(unlinkat(&parent_fd, name, UnlinkatFlags::RemoveDir)?)
}

/// How deep below the top a removal descends before moving what is deeper up.
const REMOVE_DEPTH: usize = 64;

/// Removes `name` inside `dir` (`depth` below `top`): a directory's contents first,
/// never following a link; a directory at [`REMOVE_DEPTH`] is moved to `top` instead.
fn remove_below(top: &OwnedFd, dir: &OwnedFd, name: &OsStr, depth: usize, moved_up: &mut u64) -> std::io::Result<()> {
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if file_kind(st.st_mode) != SFlag::S_IFDIR {
        return Ok(unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)?);
    }
    if depth >= REMOVE_DEPTH {
        return move_to_top(top, dir, name, moved_up);
    }
    let child = open_to_remove(dir, name, st.st_mode)?;
    for entry in names_in(&child)? {
        remove_below(top, &child, &entry, depth + 1, moved_up)?;
    }
    Ok(unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
}

/// Opens a directory of the tree for removal. Our own tree: we may open up what an
/// agent closed, and only that entry itself (never what a link swapped in points at).
fn open_to_remove(dir: &OwnedFd, name: &OsStr, mode: u32) -> std::io::Result<OwnedFd> {
    let child = match openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::Error::EACCES) => {
            nix::sys::stat::fchmodat(dir, name, Mode::S_IRWXU, nix::sys::stat::FchmodatFlags::NoFollowSymlink)?;
            openat(dir, name, DIR_FLAGS, Mode::empty())?
        }
        Err(e) => return Err(e.into()),
    };
    if mode & 0o700 != 0o700 {
        fchmod(&child, Mode::from_bits_truncate((mode | 0o700) & 0o7777))?;
    }
    Ok(child)
}

/// Renames a deep directory to a fresh name at the top of the tree being removed.
fn move_to_top(top: &OwnedFd, dir: &OwnedFd, name: &OsStr, moved_up: &mut u64) -> std::io::Result<()> {
    loop {
        *moved_up += 1;
        let fresh = format!(".cc-deeper-{moved_up}");
        match nix::fcntl::renameat(dir, name, top, fresh.as_str()) {
            Ok(()) => return Ok(()),
            // Taken by something of the tree itself: the next name.
            Err(nix::Error::EEXIST | nix::Error::ENOTEMPTY | nix::Error::ENOTDIR | nix::Error::EISDIR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat::mkdirat;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn remove_tree_removes_a_tree_of_any_depth() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        fs::create_dir(&tree).unwrap();
        let mut dir = open_dir_path(&tree).unwrap();
        for level in 0..2_000 {
            mkdirat(&dir, "d", Mode::S_IRWXU).unwrap();
            if level % 500 == 0 {
                fs::write(format!("/proc/self/fd/{}/f", std::os::fd::AsRawFd::as_raw_fd(&dir)), "x").unwrap();
            }
            dir = openat(&dir, "d", DIR_FLAGS, Mode::empty()).unwrap();
        }
        drop(dir);
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }

    #[test]
    fn remove_tree_does_not_follow_links_out() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("precious"), "keep").unwrap();
        let tree = tmp.path().join("tree");
        fs::create_dir(&tree).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
        remove_tree(&tree).unwrap();
        assert_eq!(fs::read_to_string(outside.join("precious")).unwrap(), "keep");
    }

    #[test]
    fn remove_tree_opens_up_what_an_agent_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        fs::create_dir_all(tree.join("a/b/c")).unwrap();
        fs::write(tree.join("a/b/c/f"), "x").unwrap();
        for dir in ["a/b/c", "a/b", "a"] {
            fs::set_permissions(tree.join(dir), fs::Permissions::from_mode(0o000)).unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }
}
