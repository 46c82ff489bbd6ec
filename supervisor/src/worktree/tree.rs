//! Cloning a whole tree: every directory, file and symlink, `.git` and ignored files
//! included. Symlinks are recreated (never followed), modes and times kept, ownership
//! kept when we run as root; sockets, FIFOs and devices are skipped with a warning.
//! Files are cloned in parallel (rayon): that is where the time goes.

use std::cell::RefCell;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use filetime::FileTime;
use rayon::prelude::*;

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
    /// The walk is done: this many files will be cloned.
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

/// Clones `source` into `target`, which must not exist yet (its parent must).
/// On error, `target` is left for the caller to remove.
pub fn clone_tree(
    source: &Path,
    target: &Path,
    mode: CloneMode,
    progress: &(dyn Fn(TreeEvent) + Sync),
) -> Result<TreeStats, WorktreeError> {
    let as_root = nix::unistd::geteuid().is_root();
    let mut stats = TreeStats::default();
    let mut dirs: Vec<(PathBuf, Metadata)> = Vec::new();
    let mut files: Vec<(PathBuf, PathBuf, Metadata)> = Vec::new();

    let root_meta = fs::symlink_metadata(source).map_err(WorktreeError::io("inspect", source))?;
    fs::create_dir(target).map_err(WorktreeError::io("create", target))?;
    dirs.push((target.to_owned(), root_meta));

    // Parents come before their children in the walk, so every directory exists before
    // anything is created in it.
    for entry in walkdir::WalkDir::new(source).follow_links(false).min_depth(1) {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(source).to_owned();
            WorktreeError::Io { action: "read", path, source: e.into() }
        })?;
        let relative = entry.path().strip_prefix(source).expect("walkdir stays below its root");
        let destination = target.join(relative);
        let meta = entry.metadata().map_err(|e| WorktreeError::Io {
            action: "inspect",
            path: entry.path().to_owned(),
            source: e.into(),
        })?;
        let kind = meta.file_type();
        if kind.is_dir() {
            fs::create_dir(&destination).map_err(WorktreeError::io("create", &destination))?;
            stats.dirs += 1;
            dirs.push((destination, meta));
        } else if kind.is_symlink() {
            let link = fs::read_link(entry.path()).map_err(WorktreeError::io("read link", entry.path()))?;
            std::os::unix::fs::symlink(&link, &destination).map_err(WorktreeError::io("create link", &destination))?;
            finish(&destination, &meta, as_root, true)?;
            stats.symlinks += 1;
        } else if kind.is_file() {
            stats.bytes += meta.len();
            files.push((entry.path().to_owned(), destination, meta));
        } else {
            stats.skipped += 1;
            progress(TreeEvent::Skipped { path: entry.path().to_owned(), kind: special_kind(&meta) });
        }
    }

    let total = files.len() as u64;
    stats.files = total;
    progress(TreeEvent::Planned { files: total });
    let done = AtomicU64::new(0);
    // Each clone is a few metadata syscalls that mostly wait on the filesystem, so more
    // threads than cores keep the disk busy.
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2) * 4;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| WorktreeError::io("start copy threads for", source)(std::io::Error::other(e)))?;
    pool.install(|| {
        files.par_iter().try_for_each(|(from, to, meta)| {
            clone_file(from, to, meta, mode, as_root)?;
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(PROGRESS_EVERY) {
                progress(TreeEvent::Cloned { files_done: n, files_total: total });
            }
            Ok::<_, WorktreeError>(())
        })
    })?;
    progress(TreeEvent::Cloned { files_done: total, files_total: total });

    // Directory modes and times last, deepest first: creating entries changes a
    // directory's mtime, and a read-only directory would refuse its own children.
    for (dir, meta) in dirs.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(WorktreeError::io("set the mode of", dir))?;
        finish(dir, meta, as_root, false)?;
    }
    Ok(stats)
}

/// One regular file, by handle: the target is created exclusively (never through a
/// link planted in the copy), filled, then given the source's mode, owner and times.
fn clone_file(from: &Path, to: &Path, meta: &Metadata, mode: CloneMode, as_root: bool) -> Result<(), WorktreeError> {
    let input = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(from)
        .map_err(WorktreeError::io("open", from))?;
    let mut output = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(WorktreeError::io("create", to))?;
    match mode {
        CloneMode::Reflink => {
            reflink_copy::reflink_file(&input, &output).map_err(WorktreeError::io("reflink", from))?
        }
        CloneMode::Copy => byte_copy(input, &mut output, from, to)?,
    }
    if as_root {
        std::os::unix::fs::fchown(&output, Some(meta.uid()), Some(meta.gid()))
            .map_err(WorktreeError::io("set the owner of", to))?;
    }
    // After the owner: chown clears set-uid bits.
    output
        .set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(WorktreeError::io("set the mode of", to))?;
    let times = fs::FileTimes::new()
        .set_accessed(meta.accessed().unwrap_or(std::time::UNIX_EPOCH))
        .set_modified(meta.modified().map_err(WorktreeError::io("read the times of", from))?);
    output.set_times(times).map_err(WorktreeError::io("set the times of", to))
}

/// Times, and ownership when we are root (a copy made by a root supervisor still
/// belongs to the checkout's owner).
fn finish(path: &Path, meta: &Metadata, as_root: bool, symlink: bool) -> Result<(), WorktreeError> {
    if as_root {
        std::os::unix::fs::lchown(path, Some(meta.uid()), Some(meta.gid()))
            .map_err(WorktreeError::io("set the owner of", path))?;
    }
    let atime = FileTime::from_last_access_time(meta);
    let mtime = FileTime::from_last_modification_time(meta);
    let set = if symlink { filetime::set_symlink_file_times } else { filetime::set_file_times };
    set(path, atime, mtime).map_err(WorktreeError::io("set the times of", path))
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

fn special_kind(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_socket() {
        "socket"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// Removes a tree we made, never following a symlink out of it, even when the tree has
/// read-only directories in it (copied modes).
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(meta) if !meta.is_dir() => return fs::remove_file(path),
        Ok(_) => {}
    }
    for entry in walkdir::WalkDir::new(path).follow_links(false).into_iter().flatten() {
        if entry.file_type().is_dir()
            && let Ok(meta) = entry.metadata()
            && meta.mode() & 0o700 != 0o700
        {
            fs::set_permissions(entry.path(), fs::Permissions::from_mode(meta.mode() | 0o700))?;
        }
    }
    // std's remove_dir_all does not follow symlinks (and is safe against a link swapped in).
    fs::remove_dir_all(path)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let stats = clone_tree(&src, &dst, CloneMode::Copy, &|e| events.lock().unwrap().push(e)).unwrap();
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
        assert!(clone_tree(&src, &dst, CloneMode::Copy, &|_| {}).is_err());
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
}
