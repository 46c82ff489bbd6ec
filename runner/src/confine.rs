//! Path confinement for the harness tools. Every path a tool is given is resolved
//! against the run's roots (its working directory first, then the shared roots) and
//! opened *beneath a directory handle* of one of them (`openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, or cc-host's walk with the same guarantee where openat2 is
//! filtered): `..`, an absolute symlink or any link that leads out is refused at the
//! moment of the open. Nothing here checks a string and then
//! opens it, so a component swapped for a symlink in between changes nothing.
//!
//! Writes go to a new file beside the target, then `renameat` over it: a hard link to
//! an outside file is replaced, never written through; a symlink as the last component
//! is refused; a half-written file is never seen.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cc_host::resolve::{Links, open_beneath};
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, readlink, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Longer paths than this are refused before any system call (PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The path is not the run's to touch; nothing was done.
    #[error("{path}: {reason}")]
    Refused { path: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl ConfineError {
    fn refused(path: &Path, reason: impl Into<String>) -> Self {
        ConfineError::Refused { path: shown(path), reason: reason.into() }
    }

    fn io(path: &Path, errno: Errno) -> Self {
        ConfineError::Io { path: shown(path), source: std::io::Error::from(errno) }
    }
}

/// A path as people see it in an error: lossy, one line.
fn shown(path: &Path) -> String {
    path.to_string_lossy().chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// One of the run's roots: the directory as the supervisor registered it, and a
/// handle to it opened once.
pub struct Root {
    pub path: PathBuf,
    pub writable: bool,
    /// The kernel's name for it (links in its spelling resolved), for judging where a
    /// resolved path really is.
    real: PathBuf,
    dir: OwnedFd,
}

/// The run's roots; the first is the working directory relative paths start from.
pub struct Roots {
    roots: Vec<Root>,
    /// The kernel's name for the agent's HOME, when it is one of the roots: its shell
    /// start-up files are write-protected.
    home: Option<PathBuf>,
}

/// What makes a write to a path inside a writable root refused anyway, by its path
/// below the root: anything inside a `.git`, where a write becomes code that runs
/// later (in any repository, nested ones and submodules included). HOME's start-up
/// files are judged in `entry_to_change`, which knows where HOME is.
fn protected(relative: &Path) -> Option<&'static str> {
    // Anything inside a .git: hooks and config, but also worktrees/*/commondir,
    // rebase-merge and sequencer todo lists (whose `exec` lines run on --continue),
    // modules/ (submodules' git dirs). The file tools have no business there.
    relative.components().any(|c| c.as_os_str() == ".git").then_some(
        "a repository's .git is git's own (hooks, config, todo lists run code): the tools do not write in it",
    )
}

impl Roots {
    /// Opens each root once. `roots[0]` is the working directory.
    pub fn open(roots: Vec<(PathBuf, bool)>) -> Result<Self, ConfineError> {
        let mut out = Vec::with_capacity(roots.len());
        for (path, writable) in roots {
            if !path.is_absolute() {
                return Err(ConfineError::refused(&path, "a root must be an absolute path"));
            }
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
            let dir = nix::fcntl::open(&path, flags, Mode::empty()).map_err(|e| ConfineError::io(&path, e))?;
            let real = real_path(&dir).map_err(|e| ConfineError::io(&path, e))?;
            out.push(Root { path, writable, real, dir });
        }
        if out.is_empty() {
            return Err(ConfineError::refused(Path::new(""), "a run needs at least one root"));
        }
        Ok(Roots { roots: out, home: None })
    }

    /// Names the root that is the agent's HOME (it must be one of the roots).
    pub fn with_home(mut self, home: &Path) -> Result<Self, ConfineError> {
        let root = self.roots.iter().find(|r| r.path == home);
        let root = root.ok_or_else(|| ConfineError::refused(home, "HOME must be one of the run's roots"))?;
        self.home = Some(root.real.clone());
        Ok(self)
    }

    pub fn work_dir(&self) -> &Path {
        &self.roots[0].path
    }

    /// Which root a path belongs to, and the path relative to it. Only the spelling is
    /// looked at here; the kernel judges the rest at the open.
    fn locate(&self, path: &Path) -> Result<(&Root, PathBuf), ConfineError> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.is_empty() {
            return Err(ConfineError::refused(path, "an empty path"));
        }
        if bytes.contains(&0) {
            return Err(ConfineError::refused(path, "a path with a NUL byte"));
        }
        if bytes.len() > MAX_PATH_BYTES {
            return Err(ConfineError::refused(path, format!("a path longer than {MAX_PATH_BYTES} bytes")));
        }
        let mut depth = 0i64;
        for c in path.components() {
            match c {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 && !path.is_absolute() {
                return Err(ConfineError::refused(path, "climbs out of the working directory with `..`"));
            }
        }
        if !path.is_absolute() {
            return Ok((&self.roots[0], path.to_owned()));
        }
        // The longest root that is a prefix, component by component (`/a/bc` is not in `/a/b`).
        let best = self
            .roots
            .iter()
            .filter_map(|r| path.strip_prefix(&r.path).ok().map(|rest| (r, rest)))
            .max_by_key(|(r, _)| r.path.as_os_str().len());
        match best {
            Some((root, rest)) => {
                let rest = if rest.as_os_str().is_empty() { PathBuf::from(".") } else { rest.to_owned() };
                Ok((root, rest))
            }
            None => Err(ConfineError::refused(
                path,
                "outside the run's roots (an absolute path must already be inside them)",
            )),
        }
    }

    /// Maps a resolution failure to what it means for a person.
    fn resolve_error(path: &Path, errno: Errno) -> ConfineError {
        match errno {
            Errno::EXDEV => ConfineError::refused(path, "resolves outside the run's roots (through `..` or a symlink)"),
            Errno::ELOOP => ConfineError::refused(path, "goes through a symlink that is not allowed here"),
            Errno::EAGAIN => {
                ConfineError::refused(path, "the directory changed while it was being resolved; try again")
            }
            other => ConfineError::io(path, other),
        }
    }

    /// Opens a regular file for reading.
    pub fn open_read(&self, path: &Path) -> Result<File, ConfineError> {
        let (root, rel) = self.locate(path)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        let fd =
            open_beneath(root.dir.as_fd(), &rel, flags, Links::StayInside).map_err(|e| Self::resolve_error(path, e))?;
        let stat = fstat(fd.as_fd()).map_err(|e| ConfineError::io(path, e))?;
        if !is(&stat, SFlag::S_IFREG) {
            return Err(ConfineError::refused(path, "not a regular file"));
        }
        Ok(File::from(fd))
    }

    /// Reads at most `limit` bytes of a file; the flag says whether there was more.
    pub fn read(&self, path: &Path, limit: usize) -> Result<(Vec<u8>, bool), ConfineError> {
        let mut file = self.open_read(path)?;
        let mut out = Vec::new();
        let read = (&mut file).take(limit as u64 + 1).read_to_end(&mut out);
        read.map_err(|source| ConfineError::Io { path: shown(path), source })?;
        let more = out.len() > limit;
        out.truncate(limit);
        Ok((out, more))
    }

    /// Replaces (or creates) a file with `content`, creating missing parent directories
    /// beneath the root. All or nothing: the old content stays until the rename.
    pub fn write(&self, path: &Path, content: &[u8]) -> Result<(), ConfineError> {
        let (parent, name) = self.entry_to_change(path, true)?;
        let name = name.as_os_str();
        let mode = match fstatat(parent.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if is(&st, SFlag::S_IFLNK) => {
                return Err(ConfineError::refused(path, "is a symlink: the tools do not write through links"));
            }
            Ok(st) if is(&st, SFlag::S_IFDIR) => return Err(ConfineError::refused(path, "is a directory")),
            Ok(st) if !is(&st, SFlag::S_IFREG) => return Err(ConfineError::refused(path, "not a regular file")),
            Ok(st) => Mode::from_bits_truncate(st.st_mode & 0o777),
            Err(Errno::ENOENT) => Mode::from_bits_truncate(0o644),
            Err(e) => return Err(ConfineError::io(path, e)),
        };
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // Exclusive, under a random name: the runners of other runs in the same
        // conversation write the same directories, and a runner killed mid-write leaves
        // its temporary file behind.
        let (temp, fd) = (|| {
            for _ in 0..8 {
                let temp = temp_name(name);
                match openat(parent.as_fd(), temp.as_os_str(), flags, mode) {
                    Err(Errno::EEXIST) => continue,
                    opened => return opened.map(|fd| (temp, fd)),
                }
            }
            Err(Errno::EEXIST)
        })()
        .map_err(|e| ConfineError::io(path, e))?;
        let mut file = File::from(fd);
        let written = file.write_all(content).and_then(|_| file.sync_all());
        if let Err(source) = written {
            let _ = unlinkat(parent.as_fd(), temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            return Err(ConfineError::Io { path: shown(path), source });
        }
        renameat(parent.as_fd(), temp.as_os_str(), parent.as_fd(), name).map_err(|e| {
            let _ = unlinkat(parent.as_fd(), temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            ConfineError::io(path, e)
        })
    }

    /// Removes a file (or a symlink, never what it points to) beneath a writable root.
    pub fn remove(&self, path: &Path) -> Result<(), ConfineError> {
        let (parent, name) = self.entry_to_change(path, false)?;
        let name = name.as_os_str();
        match fstatat(parent.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if is(&st, SFlag::S_IFDIR) => Err(ConfineError::refused(path, "is a directory")),
            Ok(_) => unlinkat(parent.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(|e| ConfineError::io(path, e)),
            Err(e) => Err(ConfineError::io(path, e)),
        }
    }

    /// The directory entry a write or a removal changes: its parent, opened beneath a
    /// writable root (created when `create`), and its name, refused when the entry is
    /// one of git's protected paths.
    fn entry_to_change(&self, path: &Path, create: bool) -> Result<(OwnedFd, std::ffi::OsString), ConfineError> {
        let (root, rel) = self.locate(path)?;
        if !root.writable {
            return Err(ConfineError::refused(path, "this root is read-only for the run"));
        }
        // By the spelling first, so that a refused path creates no parent on the way.
        if let Some(why) = protected(&rel) {
            return Err(ConfineError::refused(path, why));
        }
        let (parent_rel, name) = split_last(path, &rel)?;
        let parent = self.open_parent(root, path, &parent_rel, create)?;
        // Then the directory actually opened, by its real path: links inside are
        // allowed, so the spelling alone does not say where an entry is.
        let real = real_path(&parent).map_err(|e| ConfineError::io(path, e))?;
        let inside = real.strip_prefix(&root.real).map(Path::to_owned).unwrap_or_default();
        if let Some(why) = protected(&inside.join(name)) {
            return Err(ConfineError::refused(path, why));
        }
        if self.home.as_ref().is_some_and(|h| h.join(cc_vectors::HOME_GIT_CONFIG) == real.join(name)) {
            return Err(ConfineError::refused(
                path,
                "git reads HOME's .config/git/config as its global config: it is write-protected",
            ));
        }
        if self.home.as_deref() == Some(real.as_path()) && cc_vectors::is_rc_file(name.as_bytes()) {
            return Err(ConfineError::refused(
                path,
                "a shell start-up file in HOME runs in every later shell: it is write-protected",
            ));
        }
        Ok((parent, name.to_owned()))
    }

    /// Refuses, before anything is read, a change that [`Roots::write`] would refuse
    /// (a tool that reads first must not answer "not found" for a protected path).
    /// A parent that does not exist yet is left for the write to judge.
    pub fn may_change(&self, path: &Path) -> Result<(), ConfineError> {
        match self.entry_to_change(path, false) {
            Err(ConfineError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Opens a directory for listing, beneath its root.
    pub fn open_dir(&self, path: &Path) -> Result<OwnedFd, ConfineError> {
        let (root, rel) = self.locate(path)?;
        open_beneath(root.dir.as_fd(), &rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Links::StayInside)
            .map_err(|e| Self::resolve_error(path, e))
    }

    /// Opens (creating as needed) the parent directory, one component at a time, each
    /// beneath the last: a component that is a symlink is refused, not followed.
    fn open_parent(&self, root: &Root, path: &Path, parent: &Path, create: bool) -> Result<OwnedFd, ConfineError> {
        let dir = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut current = open_beneath(root.dir.as_fd(), Path::new("."), dir, Links::StayInside)
            .map_err(|e| Self::resolve_error(path, e))?;
        for component in parent.components() {
            let name = match component {
                Component::CurDir => continue,
                Component::Normal(n) => n,
                Component::ParentDir => {
                    return Err(ConfineError::refused(path, "`..` is not allowed in a path a tool writes"));
                }
                Component::RootDir | Component::Prefix(_) => continue,
            };
            let name = Path::new(name);
            current = match open_beneath(current.as_fd(), name, dir, Links::Refuse) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(current.as_fd(), name, Mode::from_bits_truncate(0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(ConfineError::io(path, e)),
                    }
                    open_beneath(current.as_fd(), name, dir, Links::Refuse).map_err(|e| Self::resolve_error(path, e))?
                }
                Err(e) => return Err(Self::resolve_error(path, e)),
            };
        }
        Ok(current)
    }
}

/// Opens a subdirectory (for listing) or a regular file of an open directory, by a
/// single name and following no link at all: what a walk uses.
pub fn open_child(dir: &OwnedFd, name: &OsStr, directory: bool) -> Result<OwnedFd, Errno> {
    let kind = if directory { OFlag::O_DIRECTORY } else { OFlag::O_NONBLOCK | OFlag::O_NOCTTY };
    open_beneath(dir.as_fd(), Path::new(name), OFlag::O_RDONLY | kind, Links::Refuse)
}

fn is(stat: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == kind
}

/// The parent (relative to the root) and the last component, which must be a name.
fn split_last<'a>(path: &Path, rel: &'a Path) -> Result<(PathBuf, &'a OsStr), ConfineError> {
    match rel.components().next_back() {
        Some(Component::Normal(name)) => Ok((rel.parent().map(Path::to_owned).unwrap_or_default(), name)),
        _ => Err(ConfineError::refused(path, "does not name a file")),
    }
}

/// The kernel's name for an open directory.
fn real_path(dir: &OwnedFd) -> Result<PathBuf, Errno> {
    use std::os::fd::AsRawFd;
    readlink(format!("/proc/self/fd/{}", dir.as_raw_fd()).as_str()).map(PathBuf::from)
}

/// `.NAME.cc-RANDOM.tmp`. Not our pid and a counter: in its envelope every runner is
/// the same pid, and several runs of one conversation write the same directories.
fn temp_name(name: &OsStr) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Without randomness (never on Linux), the counter still varies the name; the
    // exclusive open and its retries keep a clash harmless.
    let n = getrandom::u64().unwrap_or_else(|_| NEXT.fetch_add(1, Ordering::Relaxed));
    let mut t = std::ffi::OsString::from(".");
    t.push(name);
    t.push(format!(".cc-{n:016x}.tmp"));
    PathBuf::from(t)
}

/// A temporary directory with a writable `work/` root, for the tools' tests.
#[cfg(test)]
pub(crate) fn work_roots() -> (tempfile::TempDir, PathBuf, Roots) {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let roots = Roots::open(vec![(work.clone(), true)]).unwrap();
    (tmp, work, roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

    struct Fixture {
        _tmp: tempfile::TempDir,
        work: PathBuf,
        shared: PathBuf,
        outside: PathBuf,
        roots: Roots,
    }

    /// work/ (writable), shared/ (read-only), and outside/secret next to them.
    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let shared = tmp.path().join("shared");
        let outside = tmp.path().join("outside");
        for d in [&work, &shared, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(outside.join("secret"), "outside").unwrap();
        std::fs::write(shared.join("doc"), "shared").unwrap();
        let roots = Roots::open(vec![(work.clone(), true), (shared.clone(), false)]).unwrap();
        Fixture { _tmp: tmp, work, shared, outside, roots }
    }

    fn refused(r: Result<impl std::fmt::Debug, ConfineError>) -> String {
        match r {
            Err(ConfineError::Refused { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn untouched(f: &Fixture) {
        assert_eq!(std::fs::read_to_string(f.outside.join("secret")).unwrap(), "outside");
        assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1, "nothing new outside");
    }

    #[test]
    fn reads_and_writes_inside_work_by_relative_and_absolute_spellings() {
        let f = fixture();
        f.roots.write(Path::new("a/b/c.txt"), b"one").unwrap();
        assert_eq!(f.roots.read(Path::new("a/b/c.txt"), 100).unwrap(), (b"one".to_vec(), false));
        for spelling in ["a//b/c.txt", "a/./b/c.txt", "./a/b/c.txt"] {
            assert_eq!(f.roots.read(Path::new(spelling), 100).unwrap().0, b"one", "{spelling}");
        }
        f.roots.write(&f.work.join("a/b/c.txt"), b"two").unwrap();
        assert_eq!(std::fs::read(f.work.join("a/b/c.txt")).unwrap(), b"two");
        assert_eq!(f.roots.read(&f.shared.join("doc"), 3).unwrap(), (b"sha".to_vec(), true));
        // Odd but real names: spaces, globs, a tilde, bytes that are not UTF-8.
        for name in ["with space", "glob*?[x]", "~", "tab\tname"] {
            f.roots.write(Path::new(name), b"x").unwrap();
            assert!(f.work.join(name).exists(), "{name}");
        }
        let raw = Path::new(OsStr::from_bytes(b"bad\xff\xfe"));
        f.roots.write(raw, b"x").unwrap();
        assert_eq!(std::fs::read(f.work.join(raw)).unwrap(), b"x");
    }

    #[test]
    fn plain_paths_outside_are_refused() {
        let f = fixture();
        let secret = f.outside.join("secret");
        for p in [secret.clone(), PathBuf::from("/etc/passwd"), PathBuf::from("/proc/self/root/etc/passwd")] {
            assert!(refused(f.roots.read(&p, 10)).contains("outside the run's roots"), "{p:?}");
            assert!(refused(f.roots.write(&p, b"x")).contains("outside the run's roots"), "{p:?}");
        }
        for p in ["../outside/secret", "a/../../outside/secret", "../outside/new"] {
            refused(f.roots.read(Path::new(p), 10));
            refused(f.roots.write(Path::new(p), b"x"));
        }
        // A root's name as a prefix of another directory is not inside it.
        let sibling = PathBuf::from(format!("{}x/file", f.work.display()));
        refused(f.roots.write(&sibling, b"x"));
        assert!(refused(f.roots.write(&f.shared.join("doc"), b"x")).contains("read-only"));
        assert_eq!(std::fs::read_to_string(f.shared.join("doc")).unwrap(), "shared");
        untouched(&f);
    }

    #[test]
    fn links_inside_that_lead_outside_are_refused() {
        let f = fixture();
        symlink(f.outside.join("secret"), f.work.join("abs-link")).unwrap();
        symlink("../outside/secret", f.work.join("rel-link")).unwrap();
        symlink(f.outside.join("not-yet"), f.work.join("dangling")).unwrap();
        symlink(&f.outside, f.work.join("dir-link")).unwrap();
        symlink("/proc/self/root", f.work.join("proc-root")).unwrap();
        for p in ["abs-link", "rel-link", "dir-link/secret", "proc-root/etc/passwd"] {
            refused(f.roots.read(Path::new(p), 10));
        }
        for p in ["abs-link", "rel-link", "dangling", "dir-link/secret", "dir-link/new/dir/file", "proc-root/tmp/x"] {
            refused(f.roots.write(Path::new(p), b"x"));
        }
        // The links themselves are still links: nothing was replaced.
        assert!(std::fs::symlink_metadata(f.work.join("abs-link")).unwrap().file_type().is_symlink());
        assert!(!f.outside.join("not-yet").exists());
        untouched(&f);
    }

    #[test]
    fn a_hard_link_to_an_outside_file_is_replaced_not_written_through() {
        let f = fixture();
        std::fs::hard_link(f.outside.join("secret"), f.work.join("hard")).unwrap();
        f.roots.write(Path::new("hard"), b"new").unwrap();
        assert_eq!(std::fs::read(f.work.join("hard")).unwrap(), b"new");
        assert_eq!(std::fs::metadata(f.outside.join("secret")).unwrap().nlink(), 1);
        untouched(&f);
    }

    #[test]
    fn git_code_execution_vectors_are_write_protected_however_reached() {
        let f = fixture();
        std::fs::create_dir_all(f.work.join("repo/.git/hooks")).unwrap();
        std::fs::create_dir_all(f.work.join("repo/sub/.git/modules/m")).unwrap();
        symlink("repo/.git", f.work.join("gitlink")).unwrap();
        for p in [
            "repo/.git/hooks/pre-commit",
            "repo/.git/config",
            "repo/.git/info/attributes",
            "repo/sub/.git/modules/m/config",
            "repo/.git",
            "x/.git",
        ] {
            assert!(!refused(f.roots.write(Path::new(p), b"#!/bin/sh")).is_empty(), "{p}");
        }
        refused(f.roots.write(Path::new("gitlink/hooks/post-checkout"), b"x"));
        assert!(!f.work.join("repo/.git/hooks/pre-commit").exists());
        // The work tree itself is the agent's.
        f.roots.write(Path::new("repo/src/main.rs"), b"fn main() {}").unwrap();
    }

    #[test]
    fn rc_files_in_home_are_protected_and_a_refused_path_creates_no_parent() {
        let f = fixture();
        let roots = Roots::open(vec![(f.work.clone(), true), (f.shared.clone(), false)]).unwrap();
        let roots = roots.with_home(&f.work).unwrap();
        let why = refused(roots.write(Path::new(".bashrc"), b"evil"));
        assert!(why.contains("start-up file"), "{why}");
        refused(roots.write(&f.work.join("./.gitconfig"), b"evil"));
        let why = refused(roots.write(Path::new(".config/git/config"), b"[core]\n\tfsmonitor = evil\n"));
        assert!(why.contains("global config"), "{why}");
        for inside_git in
            ["repo/.git/worktrees/w/commondir", "repo/.git/rebase-merge/git-rebase-todo", "repo/.git/sequencer/todo"]
        {
            refused(roots.write(Path::new(inside_git), b"exec evil"));
        }
        roots.write(Path::new("deep/.bashrc"), b"only HOME's own are run").unwrap();
        refused(roots.write(Path::new("new/.git/hooks/post-checkout"), b"x"));
        assert!(!f.work.join("new").exists(), "no parent is made for a refused path");
        // may_change answers a refusal before anything is read, and leaves missing
        // parents to the write.
        refused(roots.may_change(Path::new(".git/config")));
        roots.may_change(Path::new("missing/dir/file")).unwrap();
        assert!(Roots::open(vec![(f.work.clone(), true)]).unwrap().with_home(&f.outside).is_err());
    }

    #[test]
    fn bad_spellings_are_refused_in_one_line() {
        let f = fixture();
        let long = "a/".repeat(MAX_PATH_BYTES);
        for p in ["", long.as_str()] {
            let r = refused(f.roots.write(Path::new(p), b"x"));
            assert!(!r.contains('\n'));
        }
        let nul = Path::new(OsStr::from_bytes(b"a\0b"));
        assert!(refused(f.roots.write(nul, b"x")).contains("NUL"));
        assert!(refused(f.roots.write(Path::new("a/.."), b"x")).contains("does not name a file"));
        std::fs::create_dir(f.work.join("d")).unwrap();
        assert!(refused(f.roots.write(Path::new("d"), b"x")).contains("directory"));
        assert!(refused(f.roots.read(Path::new("d"), 1)).contains("regular file"));
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_in_a_tight_loop_never_lets_a_write_out() {
        let f = fixture();
        let target = f.work.join("swap");
        let before = std::fs::metadata(f.outside.join("secret")).unwrap().mtime_nsec();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, target, outside) = (stop.clone(), target.clone(), f.outside.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::create_dir(&target);
                    let _ = std::fs::remove_dir_all(&target);
                    let _ = symlink(&outside, &target);
                    let _ = std::fs::remove_file(&target);
                }
            })
        };
        let mut wrote = 0;
        for _ in 0..2000 {
            if f.roots.write(Path::new("swap/secret"), b"pwned").is_ok() {
                wrote += 1;
            }
            let _ = f.roots.read(Path::new("swap/secret"), 10);
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(std::fs::read_to_string(f.outside.join("secret")).unwrap(), "outside");
        assert_eq!(std::fs::metadata(f.outside.join("secret")).unwrap().mtime_nsec(), before);
        assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1, "wrote {wrote} times inside, never outside");
    }
}
