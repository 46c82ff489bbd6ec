//! Cloning a whole tree: every directory, file and symlink, `.git` and ignored files
//! included. Symlinks are recreated (never followed), modes and times kept, ownership
//! kept when we run as root; sockets, FIFOs and devices are skipped with a warning.
//!
//! Every operation is relative to an open directory (`openat`, `fstatat`, `mkdirat`,
//! `symlinkat`), never a path resolved from the root. Provisioning is bound by metadata
//! syscalls, which btrfs serializes: more threads measured no faster (1, 2 and 8 threads
//! alike), while saving the path lookups beats `cp -a --reflink` (bench/worktrees.sh).
//! It also means that no component of the walk can be swapped for a symlink under us.

use cc_host::ServiceUser;
use std::cell::RefCell;
use std::ffi::{CStr, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, UtimensatFlags, fstat, fstatat, mkdirat, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, fchownat, symlinkat};

use super::WorktreeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneMode {
    /// `FICLONE` / `clonefile`: shared extents, no data copied.
    Reflink,
    /// Read and write every byte.
    Copy,
}

/// What happened, for progress bars and warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEvent {
    /// The count is done: this many files will be cloned.
    Planned { files: u64 },
    /// So many files are done (sent every few hundred files and at the end).
    Cloned { files_done: u64, files_total: u64 },
    /// Something that is not a directory, file or symlink.
    Skipped { path: PathBuf, kind: &'static str },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeStats {
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub skipped: u64,
}

const PROGRESS_EVERY: u64 = 256;

/// Deeper than this is a loop or an attack, not a checkout.
const MAX_DEPTH: usize = 1024;

pub(crate) const DIR_FLAGS: OFlag =
    OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// Clones `source` into `target`, which must not exist yet (its parent must).
/// On error, `target` is left for the caller to remove.
///
/// `give_to`: as root, every copied entry is owned by this user instead of keeping its
/// owner (the service user that runs the conversation's agents), set-id bits dropped:
/// the copy is theirs before any agent process exists, so that nothing privileged has
/// to walk it once an agent can write it. All but the target itself and its top-level
/// `.git`, which stay ours: git refuses to open a repository whose top or git directory
/// is someone else's, and the copy is verified with git before the caller gives those
/// two away ([`give_top`]).
pub fn clone_tree(
    source: &Path,
    target: &Path,
    mode: CloneMode,
    give_to: Option<ServiceUser>,
    progress: &(dyn Fn(TreeEvent) + Sync),
) -> Result<TreeStats, WorktreeError> {
    let source_root = open_dir_path(source)?;
    let root_stat = fstat(&source_root).map_err(errno("inspect", source))?;

    // A readdir-only count first (a few ms per 100,000 entries), so that the progress
    // bar knows its length; it also finds mount points inside the checkout, which a
    // reflink cannot cross, before anything is written.
    let files_total = count_files(&source_root, source, root_stat.st_dev, mode, 0)?;
    fs::create_dir(target).map_err(WorktreeError::io("create", target))?;
    let target_root = open_dir_path(target)?;
    progress(TreeEvent::Planned { files: files_total });
    let mut walk = Walk {
        who: Identity { give_to, ..Identity::current() },
        mode,
        progress,
        stats: TreeStats::default(),
        files_total,
        source: source.to_owned(),
        target: target.to_owned(),
    };
    walk.directory(&source_root, &target_root, Path::new(""), 0)?;
    walk.finish_dir(&target_root, &root_stat, target, false)?;
    progress(TreeEvent::Cloned { files_done: walk.stats.files, files_total: walk.stats.files });
    Ok(walk.stats)
}

struct Walk<'a> {
    who: Identity,
    mode: CloneMode,
    progress: &'a (dyn Fn(TreeEvent) + Sync),
    stats: TreeStats,
    files_total: u64,
    source: PathBuf,
    target: PathBuf,
}

impl Walk<'_> {
    fn directory(&mut self, from: &OwnedFd, to: &OwnedFd, relative: &Path, depth: usize) -> Result<(), WorktreeError> {
        let here = self.source.join(relative);
        if depth > MAX_DEPTH {
            return Err(too_deep(&here));
        }
        let (source, target) = (self.source.clone(), self.target.clone());
        let mut listing =
            Dir::from_fd(from.try_clone().map_err(WorktreeError::io("read", &here))?).map_err(errno("read", &here))?;
        for entry in listing.iter() {
            let entry = entry.map_err(errno("read", &here))?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let child = relative.join(OsStr::from_bytes(name.to_bytes()));
            // Read errors name the checkout's path, write errors the copy's.
            let src = || source.join(&child);
            let dst = || target.join(&child);
            let st = fstatat(from, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| errno("inspect", &src())(e))?;
            match file_kind(st.st_mode) {
                SFlag::S_IFDIR => {
                    mkdirat(to, name, Mode::S_IRWXU).map_err(|e| errno("create", &dst())(e))?;
                    let child_from =
                        openat(from, name, DIR_FLAGS, Mode::empty()).map_err(|e| errno("open", &src())(e))?;
                    let child_to = openat(to, name, DIR_FLAGS, Mode::empty()).map_err(|e| errno("open", &dst())(e))?;
                    self.directory(&child_from, &child_to, &child, depth + 1)?;
                    let keep_ours = depth == 0 && name.to_bytes() == b".git";
                    self.finish_dir(&child_to, &st, &dst(), !keep_ours)?;
                    self.stats.dirs += 1;
                }
                SFlag::S_IFREG => {
                    self.file(from, to, name, &st, &child)?;
                    self.stats.files += 1;
                    self.stats.bytes += st.st_size as u64;
                    if self.stats.files.is_multiple_of(PROGRESS_EVERY) {
                        (self.progress)(TreeEvent::Cloned {
                            files_done: self.stats.files,
                            files_total: self.files_total,
                        });
                    }
                }
                SFlag::S_IFLNK => {
                    let link = readlinkat(from, name).map_err(|e| errno("read link", &src())(e))?;
                    symlinkat(link.as_os_str(), to, name).map_err(|e| errno("create link", &dst())(e))?;
                    if let Some((uid, gid)) = self.who.chown_to(st.st_uid, st.st_gid, true) {
                        let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
                        fchownat(to, name, Some(uid), Some(gid), AtFlags::AT_SYMLINK_NOFOLLOW)
                            .map_err(|e| errno("set the owner of", &dst())(e))?;
                    }
                    let (atime, mtime) = timespecs(&st);
                    utimensat(to, name, &atime, &mtime, UtimensatFlags::NoFollowSymlink)
                        .map_err(|e| errno("set the times of", &dst())(e))?;
                    self.stats.symlinks += 1;
                }
                _ => {
                    self.stats.skipped += 1;
                    (self.progress)(TreeEvent::Skipped { path: src(), kind: special_kind(st.st_mode) });
                }
            }
        }
        Ok(())
    }

    /// One regular file. The source is opened without following links and without
    /// blocking (a FIFO swapped in after the stat cannot hang us) and must still be the
    /// file that was listed; its mode and times come from that open file. The target
    /// is created exclusively, filled, then given the mode, owner and times by handle.
    fn file(
        &self,
        from: &OwnedFd,
        to: &OwnedFd,
        name: &CStr,
        listed: &FileStat,
        child: &Path,
    ) -> Result<(), WorktreeError> {
        let src = self.source.join(child);
        let dst = self.target.join(child);
        let read = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let input = File::from(openat(from, name, read, Mode::empty()).map_err(errno("open", &src))?);
        let st = fstat(input.as_fd()).map_err(errno("inspect", &src))?;
        if file_kind(st.st_mode) != SFlag::S_IFREG || st.st_ino != listed.st_ino || st.st_dev != listed.st_dev {
            return Err(WorktreeError::Io {
                action: "copy",
                path: src,
                source: std::io::Error::other("it was replaced while the checkout was being copied; retry"),
            });
        }
        let wanted = st.st_mode & self.who.kept_mode_bits();
        // Created with its final mode when the umask lets it through: one syscall fewer.
        let exact = wanted & !0o777 == 0 && wanted & self.who.umask == 0;
        let output = self.clone_data(input, to, name, &src, &dst, if exact { wanted } else { 0o600 })?;
        let owner = self.who.chown_to(st.st_uid, st.st_gid, true);
        let chowned = owner.is_some();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&output, Some(uid), Some(gid))
                .map_err(WorktreeError::io("set the owner of", &dst))?;
        }
        // After the owner: chown clears set-uid bits.
        if !exact || chowned {
            output
                .set_permissions(fs::Permissions::from_mode(wanted))
                .map_err(WorktreeError::io("set the mode of", &dst))?;
        }
        output.set_times(file_times(&st)).map_err(WorktreeError::io("set the times of", &dst))
    }

    /// Creates the target file with its content; returns it open for writing.
    #[cfg(not(target_os = "macos"))]
    fn clone_data(
        &self,
        input: File,
        to: &OwnedFd,
        name: &CStr,
        src: &Path,
        dst: &Path,
        mode: u32,
    ) -> Result<File, WorktreeError> {
        let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut output =
            File::from(openat(to, name, create, Mode::from_bits_truncate(mode)).map_err(errno("create", dst))?);
        match self.mode {
            CloneMode::Reflink => reflink_copy::reflink_file(&input, &output).map_err(|source| WorktreeError::Io {
                action: "reflink",
                path: src.to_owned(),
                source,
            })?,
            CloneMode::Copy => byte_copy(input, &mut output, src, dst)?,
        }
        Ok(output)
    }

    /// macOS can only clone into a new file (`clonefile`), by path.
    #[cfg(target_os = "macos")]
    fn clone_data(
        &self,
        input: File,
        to: &OwnedFd,
        name: &CStr,
        src: &Path,
        dst: &Path,
        mode: u32,
    ) -> Result<File, WorktreeError> {
        match self.mode {
            CloneMode::Reflink => {
                reflink_copy::reflink_file_to_path(&input, dst).map_err(|source| WorktreeError::Io {
                    action: "reflink",
                    path: src.to_owned(),
                    source,
                })?;
                let write = OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                Ok(File::from(openat(to, name, write, Mode::empty()).map_err(errno("open", dst))?))
            }
            CloneMode::Copy => {
                let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let mut output =
                    File::from(openat(to, name, create, Mode::from_bits_truncate(mode)).map_err(errno("create", dst))?);
                byte_copy(input, &mut output, src, dst)?;
                Ok(output)
            }
        }
    }

    /// Mode, owner and times of a directory, once everything in it exists (creating
    /// entries changes its mtime, and a read-only directory would refuse its children).
    /// `give`: whether `give_to` applies (not to the top and its `.git`).
    fn finish_dir(&self, dir: &OwnedFd, st: &FileStat, path: &Path, give: bool) -> Result<(), WorktreeError> {
        let dir = File::from(dir.try_clone().map_err(WorktreeError::io("open", path))?);
        if let Some((uid, gid)) = self.who.chown_to(st.st_uid, st.st_gid, give) {
            std::os::unix::fs::fchown(&dir, Some(uid), Some(gid))
                .map_err(WorktreeError::io("set the owner of", path))?;
        }
        dir.set_permissions(fs::Permissions::from_mode(st.st_mode & self.who.kept_mode_bits()))
            .map_err(WorktreeError::io("set the mode of", path))?;
        dir.set_times(file_times(st)).map_err(WorktreeError::io("set the times of", path))
    }
}

pub(crate) fn file_kind(mode: u32) -> SFlag {
    SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits())
}

fn too_deep(path: &Path) -> WorktreeError {
    WorktreeError::Io {
        action: "walk",
        path: path.to_owned(),
        source: std::io::Error::other(format!("deeper than {MAX_DEPTH} directories")),
    }
}

pub(crate) fn open_dir_path(path: &Path) -> Result<OwnedFd, WorktreeError> {
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
        .open(path)
        .map_err(WorktreeError::io("open", path))?;
    Ok(OwnedFd::from(dir))
}

/// Regular files below `dir`, from `readdir` alone (`d_type`; an lstat only when the
/// filesystem does not say). For a reflink, a directory on another filesystem (a mount
/// inside the checkout) is refused here, before anything is written.
fn count_files(dir: &OwnedFd, path: &Path, root_dev: u64, mode: CloneMode, depth: usize) -> Result<u64, WorktreeError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    let mut listing =
        Dir::from_fd(dir.try_clone().map_err(WorktreeError::io("read", path))?).map_err(errno("read", path))?;
    for entry in listing.iter() {
        let entry = entry.map_err(errno("read", path))?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            Some(kind) => kind,
            None => match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|st| file_kind(st.st_mode)) {
                Ok(SFlag::S_IFDIR) => Type::Directory,
                Ok(SFlag::S_IFREG) => Type::File,
                _ => continue,
            },
        };
        match kind {
            Type::File => count += 1,
            Type::Directory => {
                let child_path = path.join(OsStr::from_bytes(name.to_bytes()));
                let child = openat(dir, name, DIR_FLAGS, Mode::empty()).map_err(errno("open", &child_path))?;
                if mode == CloneMode::Reflink {
                    let dev = fstat(&child).map_err(errno("inspect", &child_path))?.st_dev;
                    if dev != root_dev {
                        return Err(WorktreeError::Io {
                            action: "reflink",
                            path: child_path,
                            source: std::io::Error::other(
                                "it is a mount of another filesystem inside the checkout, which a reflink cannot cross; \
                                 unmount it or choose --worktree-backend copy",
                            ),
                        });
                    }
                }
                count += count_files(&child, &child_path, root_dev, mode, depth + 1)?;
            }
            _ => {}
        }
    }
    Ok(count)
}

fn errno<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> WorktreeError + 'a {
    move |e| WorktreeError::Io { action, path: path.to_owned(), source: e.into() }
}

fn system_time(secs: i64, nanos: i64) -> std::time::SystemTime {
    let nanos = Duration::from_nanos(nanos.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn file_times(st: &FileStat) -> fs::FileTimes {
    fs::FileTimes::new()
        .set_accessed(system_time(st.st_atime, st.st_atime_nsec))
        .set_modified(system_time(st.st_mtime, st.st_mtime_nsec))
}

fn timespecs(st: &FileStat) -> (TimeSpec, TimeSpec) {
    (TimeSpec::new(st.st_atime, st.st_atime_nsec), TimeSpec::new(st.st_mtime, st.st_mtime_nsec))
}

/// Who we are, for deciding which metadata calls a clone can skip, and whom the copy
/// is for.
struct Identity {
    root: bool,
    uid: u32,
    gid: u32,
    umask: u32,
    /// Every entry's owner instead of its source's (see [`clone_tree`]).
    give_to: Option<ServiceUser>,
}

impl Identity {
    fn current() -> Self {
        Self {
            root: nix::unistd::geteuid().is_root(),
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            umask: current_umask(),
            give_to: None,
        }
    }

    /// The owner to set on the copy of an entry owned by `uid:gid`, when one must be
    /// set: only root can give a file away, and only a different owner needs it.
    /// `give`: whether `give_to` applies to this entry.
    fn chown_to(&self, uid: u32, gid: u32, give: bool) -> Option<(u32, u32)> {
        let (uid, gid) = self.give_to.filter(|_| give).map_or((uid, gid), |u| (u.uid, u.gid));
        (self.root && (uid != self.uid || gid != self.gid)).then_some((uid, gid))
    }

    /// The mode bits a copy keeps: all, or without set-uid and set-gid when it is
    /// given to someone else.
    fn kept_mode_bits(&self) -> u32 {
        if self.give_to.is_some() { 0o1777 } else { 0o7777 }
    }
}

/// The process umask, read without changing it (`umask(2)` can only be read by
/// setting it, which would race with every other thread). Unknown: assume the
/// strictest, so that every file gets an explicit chmod.
fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok()))
        })
        .unwrap_or(0o777)
}

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0; 256 * 1024]);
}

/// A real byte copy: `std::fs::copy` would use `copy_file_range`, which may share
/// extents behind our back; the copy backend promises a copy.
fn byte_copy(mut input: File, output: &mut File, from: &Path, to: &Path) -> Result<(), WorktreeError> {
    BUFFER.with_borrow_mut(|buffer| {
        loop {
            let n = input.read(buffer).map_err(WorktreeError::io("read", from))?;
            if n == 0 {
                return Ok::<(), WorktreeError>(());
            }
            output.write_all(&buffer[..n]).map_err(WorktreeError::io("write", to))?;
        }
    })
}

fn special_kind(mode: u32) -> &'static str {
    match file_kind(mode) {
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFCHR => "character device",
        _ => "special file",
    }
}

/// Gives the copy `name` in `dir` and its `.git` directory, the two entries
/// [`clone_tree`] leaves ours, to `owner`; each through a handle opened without
/// following a link.
pub fn give_top(dir: &OwnedFd, name: &OsStr, ServiceUser { uid, gid }: ServiceUser) -> std::io::Result<()> {
    let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    let top = openat(dir, name, DIR_FLAGS, Mode::empty())?;
    match openat(&top, ".git", DIR_FLAGS, Mode::empty()) {
        Ok(git) => nix::unistd::fchown(&git, uid, gid)?,
        Err(nix::Error::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(nix::unistd::fchown(&top, uid, gid)?)
}

/// Gives `name` in `dir`, and everything below it, to `owner`, never following a link:
/// each directory is opened from its parent's handle with `O_NOFOLLOW`, each entry is
/// changed with `fchownat(AT_SYMLINK_NOFOLLOW)` (a link itself, never what it points
/// at), and a regular file with more than one name is left as it is (another name may
/// be outside the tree). For trees no agent writes while this runs: a git worktree just
/// added, or a copy made before copies were given to the service user.
pub fn give_tree(dir: &OwnedFd, name: &OsStr, user: ServiceUser, depth: usize) -> std::io::Result<()> {
    let ServiceUser { uid, gid } = user;
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other(format!("deeper than {MAX_DEPTH} directories")));
    }
    let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let kind = file_kind(st.st_mode);
    if kind == SFlag::S_IFDIR {
        let child = openat(dir, name, DIR_FLAGS, Mode::empty())?;
        for entry in names_in(&child)? {
            give_tree(&child, &entry, user, depth + 1)?;
        }
    } else if kind == SFlag::S_IFREG && st.st_nlink > 1 {
        return Ok(());
    }
    if (st.st_uid, st.st_gid) != (uid, gid) {
        fchownat(dir, name, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), AtFlags::AT_SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

pub(crate) fn names_in(dir: &OwnedFd) -> std::io::Result<Vec<std::ffi::OsString>> {
    Ok(cc_host::beneath::names(dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remove_tree;
    use std::os::unix::fs::MetadataExt;

    fn sample_tree(root: &Path) {
        fs::create_dir_all(root.join("src/deep/er")).unwrap();
        fs::write(root.join("README"), "hello").unwrap();
        fs::write(root.join("src/deep/er/file.bin"), vec![7u8; 100_000]).unwrap();
        fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("README", root.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("outside")).unwrap();
        std::os::unix::fs::symlink("does/not/exist", root.join("dangling")).unwrap();
        fs::create_dir(root.join("ro")).unwrap();
        fs::write(root.join("ro/inside"), "x").unwrap();
        fs::set_permissions(root.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    #[test]
    fn copy_mode_reproduces_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        sample_tree(&src);
        let events = std::sync::Mutex::new(Vec::new());
        let stats = clone_tree(&src, &dst, CloneMode::Copy, None, &|e| events.lock().unwrap().push(e)).unwrap();
        assert_eq!(stats.files, 4);
        assert_eq!(stats.symlinks, 3);
        assert_eq!(stats.skipped, 1);
        assert_eq!(fs::read(dst.join("src/deep/er/file.bin")).unwrap(), vec![7u8; 100_000]);
        assert_eq!(fs::metadata(dst.join("run.sh")).unwrap().mode() & 0o777, 0o755);
        assert_eq!(fs::read_link(dst.join("outside")).unwrap(), Path::new("/etc/passwd"));
        assert_eq!(fs::read_link(dst.join("dangling")).unwrap(), Path::new("does/not/exist"));
        assert!(!dst.join("fifo").exists());
        assert_eq!(fs::metadata(dst.join("ro")).unwrap().mode() & 0o777, 0o555);
        assert_eq!(
            fs::metadata(src.join("src/deep")).unwrap().modified().unwrap(),
            fs::metadata(dst.join("src/deep")).unwrap().modified().unwrap()
        );
        let events = events.into_inner().unwrap();
        assert!(events.iter().any(|e| matches!(e, TreeEvent::Skipped { kind: "FIFO", .. })));
        assert!(events.contains(&TreeEvent::Cloned { files_done: 4, files_total: 4 }));

        remove_tree(&dst).unwrap();
        assert!(!dst.exists());
        assert!(src.join("ro/inside").exists());
    }

    #[test]
    fn an_existing_target_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        sample_tree(&src);
        fs::create_dir(&dst).unwrap();
        assert!(clone_tree(&src, &dst, CloneMode::Copy, None, &|_| {}).is_err());
    }

    /// Issue 16, item 2: as root, the copy is the service user's as it is made, but
    /// for its top and `.git`, which git needs to be ours to verify; `give_top` gives
    /// those; set-id bits do not survive being given away.
    #[test]
    fn a_copy_is_given_away_as_it_is_made() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        fs::create_dir_all(src.join(".git/objects")).unwrap();
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::write(src.join("a/b/f"), "x").unwrap();
        fs::write(src.join("suid"), "x").unwrap();
        fs::set_permissions(src.join("suid"), fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink("a", src.join("link")).unwrap();
        clone_tree(&src, &dst, CloneMode::Copy, Some(ServiceUser::NOBODY), &|_| {}).unwrap();
        let uid = |p: &str| fs::symlink_metadata(dst.join(p)).unwrap().uid();
        for given in ["a", "a/b", "a/b/f", ".git/objects", "link", "suid"] {
            assert_eq!(uid(given), 65534, "{given}");
        }
        assert_eq!((uid(""), uid(".git")), (0, 0), "the top and .git wait for give_top");
        assert_eq!(fs::metadata(dst.join("suid")).unwrap().mode() & 0o7777, 0o755);
        let parent = open_dir_path(tmp.path()).unwrap();
        give_top(&parent, OsStr::new("dst"), ServiceUser::NOBODY).unwrap();
        assert_eq!((uid(""), uid(".git")), (65534, 65534));
    }

    /// Issue 16, item 5: any depth, by handle, with at most REMOVE_DEPTH directories
    /// open at once.
    #[test]
    fn umask_is_read_without_changing_it() {
        let before = current_umask();
        assert!(before <= 0o777);
        assert_eq!(current_umask(), before);
    }
}
