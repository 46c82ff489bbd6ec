//! Paths inside a run's roots, reached by directory handle and never through a link
//! (DESIGN.md §2, trust rule 6).
//!
//! sandboxd runs as root, and a run's roots are the agent's to write: any path-based
//! call below a root would follow whatever link the agent planted there, with root's
//! rights. So everything sandboxd inspects, creates or binds inside a root goes through
//! this module: each directory is opened from its parent's handle with `O_NOFOLLOW`, a
//! file is created with `O_EXCL|O_NOFOLLOW` and given away through its own descriptor,
//! and what bubblewrap binds is an already-open descriptor ([`open_bound`]), so nothing
//! can change between the check and the mount.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, fchown};

const DIR_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// What a name inside an open directory is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Missing,
    Link,
    Dir,
    /// A regular file, a socket, a FIFO…: something that is neither of the above.
    Other,
}

pub fn entry_at(dir: &OwnedFd, name: &OsStr) -> Result<Entry, Errno> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(match kind(&st) {
            SFlag::S_IFLNK => Entry::Link,
            SFlag::S_IFDIR => Entry::Dir,
            _ => Entry::Other,
        }),
        Err(Errno::ENOENT) => Ok(Entry::Missing),
        Err(e) => Err(e),
    }
}

/// Gives the socket `name` in `dir` to `uid`/`gid`, never through a link, and only if it
/// is a socket: a name swapped for a link, or for a hard link to a file, is refused.
pub fn chown_socket(dir: &OwnedFd, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno> {
    if kind(&fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?) != SFlag::S_IFSOCK {
        return Err(Errno::ENOTSOCK);
    }
    nix::unistd::fchownat(dir, name, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), AtFlags::AT_SYMLINK_NOFOLLOW)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// Opens an absolute directory path one component at a time from `/`, each with
/// `O_NOFOLLOW`: a link anywhere on the way fails the open (`ELOOP` or `ENOTDIR`).
/// Only for paths that hold no link by construction (a run's roots are registered
/// resolved).
pub fn open_dir_no_links(path: &Path) -> Result<OwnedFd, Errno> {
    let mut current = openat(nix::fcntl::AT_FDCWD, "/", DIR_FLAGS, Mode::empty())?;
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => current = child_dir(&current, name)?,
            // `.` and `..` never appear in a registered root; refuse rather than guess.
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok(current)
}

/// A subdirectory of an open directory, by one name, never through a link.
pub fn child_dir(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(dir, name, DIR_FLAGS, Mode::empty())
}

/// The names in an open directory, `.` and `..` left out.
pub fn names(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let mut listing = nix::dir::Dir::from_fd(dir.try_clone().map_err(|_| Errno::EMFILE)?)?;
    Ok(listing
        .iter()
        .filter_map(Result::ok)
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_owned())
        .filter(|n| n != "." && n != "..")
        .collect())
}

/// Creates `name` in `dir` as a new file holding `contents`, exclusively and never
/// through a link, owned like `dir` (we may be root; what we make in someone's directory
/// is theirs). False when it exists already, or cannot be made.
pub fn create_file(dir: &OwnedFd, name: &str, contents: &[u8]) -> bool {
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(fd) = openat(dir, name, flags, Mode::from_bits_truncate(0o644)) else { return false };
    give_to_owner_of(dir, &fd);
    // The mode asked for, whatever the umask (the supervisor's is 077): others read it.
    if fchmod(&fd, Mode::from_bits_truncate(0o644)).is_err() {
        return false;
    }
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, contents).is_ok()
}

/// Creates the directory `name` in `dir`, owned like `dir`. False when it exists
/// already, or cannot be made.
pub fn create_dir(dir: &OwnedFd, name: &str) -> bool {
    if mkdirat(dir, name, Mode::from_bits_truncate(0o755)).is_err() {
        return false;
    }
    // Through its own handle: if it was swapped for a link since, nothing is changed.
    if let Ok(made) = child_dir(dir, OsStr::new(name)) {
        give_to_owner_of(dir, &made);
        let _ = fchmod(&made, Mode::from_bits_truncate(0o755));
    }
    true
}

fn give_to_owner_of(dir: &OwnedFd, made: &OwnedFd) {
    if let Ok(st) = fstat(dir) {
        let _ = fchown(made, Some(Uid::from_raw(st.st_uid)), Some(Gid::from_raw(st.st_gid)));
    }
}

/// A file's device and inode: what it is, whatever path leads to it.
pub type Identity = (u64, u64);

/// The identity of an open descriptor.
// The casts are needed where st_dev is not u64 (macOS).
#[allow(clippy::unnecessary_cast)]
pub fn identity(fd: impl AsFd) -> Option<Identity> {
    fstat(fd).ok().map(|st| (st.st_dev as u64, st.st_ino as u64))
}

/// Why a path to be bound could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("the run's {path} changed since it was registered (moved or replaced by a link): refusing to launch")]
    RootChanged { path: PathBuf },
    #[error("{path} is not inside any of the run's roots: refusing to bind it")]
    OutsideRoots { path: PathBuf },
    #[error("{path} goes through a symlink or leaves its root since it was checked: refusing to launch")]
    Link { path: PathBuf },
    #[error("cannot open {path} to bind it: {source}")]
    Open { path: PathBuf, source: Errno },
}

/// Opens every path of `bound`, in order, as the descriptor bubblewrap will bind
/// (`--bind-fd`). Each root is opened with no link anywhere on its path and must still
/// be the directory registered (`roots`: path and device/inode); each path inside one
/// is opened beneath its root's handle with no link followed (`RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS`). bubblewrap then mounts exactly these files: it checks that
/// what it mounted has the descriptor's device and inode, and fails otherwise.
#[cfg(target_os = "linux")]
pub fn open_bound(roots: &[(PathBuf, Identity)], bound: &[PathBuf]) -> Result<Vec<OwnedFd>, BindError> {
    let mut handles: Vec<(&Path, OwnedFd)> = Vec::with_capacity(roots.len());
    for (root, registered) in roots {
        let fd = open_no_links(root).map_err(|_| BindError::RootChanged { path: root.clone() })?;
        if identity(&fd) != Some(*registered) {
            return Err(BindError::RootChanged { path: root.clone() });
        }
        handles.push((root, fd));
    }
    bound
        .iter()
        .map(|path| {
            // The innermost root holding it.
            let (root, handle) = handles
                .iter()
                .filter(|(root, _)| path.starts_with(root))
                .max_by_key(|(root, _)| root.as_os_str().len())
                .ok_or_else(|| BindError::OutsideRoots { path: path.clone() })?;
            let relative = path.strip_prefix(root).unwrap_or(path);
            if relative.as_os_str().is_empty() {
                return handle.try_clone().map_err(|e| BindError::Open { path: path.clone(), source: io_errno(e) });
            }
            open_path_beneath(handle, relative).map_err(|e| match e {
                Errno::ELOOP | Errno::EXDEV | Errno::ENOTDIR => BindError::Link { path: path.clone() },
                e => BindError::Open { path: path.clone(), source: e },
            })
        })
        .collect()
}

/// An `O_PATH` descriptor of an absolute path with no link anywhere on it. What the
/// supervisor uses for the runner's envelope, whose argv it executes itself.
#[cfg(target_os = "linux")]
pub fn open_no_links(path: &Path) -> Result<OwnedFd, Errno> {
    let root = openat(nix::fcntl::AT_FDCWD, "/", DIR_FLAGS, Mode::empty())?;
    let relative = path.strip_prefix("/").map_err(|_| Errno::EINVAL)?;
    if relative.as_os_str().is_empty() {
        return Ok(root);
    }
    open_path_beneath(&root, relative)
}

/// An `O_PATH` descriptor of `relative` beneath `dir`, no link followed on the way or
/// at the end: by `openat2`, or by the walk where that is filtered ([`crate::resolve`]).
#[cfg(target_os = "linux")]
fn open_path_beneath(dir: &OwnedFd, relative: &Path) -> Result<OwnedFd, Errno> {
    crate::resolve::open_beneath(dir.as_fd(), relative, OFlag::O_PATH, crate::resolve::Links::Refuse)
}

#[cfg(target_os = "linux")]
fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn only_a_socket_is_given_away_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(tmp.path().join("s.sock")).unwrap();
        std::fs::write(tmp.path().join("file"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("s.sock"), tmp.path().join("link")).unwrap();
        let dir = open_dir_no_links(&std::fs::canonicalize(tmp.path()).unwrap()).unwrap();
        let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        assert_eq!(chown_socket(&dir, OsStr::new("s.sock"), uid, gid), Ok(()));
        assert_eq!(chown_socket(&dir, OsStr::new("file"), uid, gid), Err(Errno::ENOTSOCK));
        assert_eq!(chown_socket(&dir, OsStr::new("link"), uid, gid), Err(Errno::ENOTSOCK));
        assert_eq!(chown_socket(&dir, OsStr::new("missing"), uid, gid), Err(Errno::ENOENT));
    }

    fn id(path: &Path) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).unwrap();
        (m.dev(), m.ino())
    }

    #[test]
    fn bound_paths_open_only_beneath_their_root_and_through_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("root");
        std::fs::create_dir_all(root.join("repo/.git/hooks")).unwrap();
        std::fs::write(root.join("repo/.git/config"), "").unwrap();
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink("../../outside", root.join("repo/up")).unwrap();
        let roots = vec![(root.clone(), id(&root))];
        let good = [root.clone(), root.join("repo/.git/hooks"), root.join("repo/.git/config")];
        let fds = open_bound(&roots, &good).unwrap();
        for (fd, path) in fds.iter().zip(&good) {
            assert_eq!(identity(fd), Some(id(path)), "{path:?}");
        }
        for bad in [root.join("link"), root.join("link/x"), root.join("repo/up")] {
            assert!(matches!(open_bound(&roots, std::slice::from_ref(&bad)), Err(BindError::Link { .. })), "{bad:?}");
        }
        assert!(matches!(open_bound(&roots, std::slice::from_ref(&outside)), Err(BindError::OutsideRoots { .. })));
        // A root swapped for another directory, or for a link, is not the registered one.
        std::fs::rename(&root, base.join("away")).unwrap();
        std::fs::create_dir(&root).unwrap();
        assert!(matches!(open_bound(&roots, &good[..1]), Err(BindError::RootChanged { .. })));
        std::fs::remove_dir(&root).unwrap();
        std::os::unix::fs::symlink(base.join("away"), &root).unwrap();
        assert!(matches!(open_bound(&roots, &good[..1]), Err(BindError::RootChanged { .. })));
    }

    #[test]
    fn created_files_are_exclusive_and_never_written_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open_dir_no_links(&std::fs::canonicalize(tmp.path()).unwrap()).unwrap();
        let target = tmp.path().join("target");
        std::os::unix::fs::symlink(&target, tmp.path().join("commondir")).unwrap();
        assert!(!create_file(&dir, "commondir", b".\n"));
        assert!(!target.exists());
        assert!(create_file(&dir, "config.worktree", b""));
        assert!(!create_file(&dir, "config.worktree", b"again"), "exclusive");
        assert!(create_dir(&dir, "hooks") && !create_dir(&dir, "hooks"));
        assert_eq!(entry_at(&dir, OsStr::new("commondir")), Ok(Entry::Link));
        assert_eq!(entry_at(&dir, OsStr::new("hooks")), Ok(Entry::Dir));
        assert_eq!(entry_at(&dir, OsStr::new("nothing")), Ok(Entry::Missing));
        let link = std::fs::canonicalize(tmp.path()).unwrap().join("commondir");
        assert!(open_dir_no_links(&link).is_err());
    }
}
