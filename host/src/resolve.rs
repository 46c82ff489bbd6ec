//! Opening a path beneath a directory handle without ever leaving it (DESIGN.md §2,
//! trust rule 6), with or without `openat2`.
//!
//! The kernel does this in one call: `openat2` with `RESOLVE_BENEATH`. Some hosts
//! answer that call with ENOSYS or EPERM: kernels before 5.6, container runtimes'
//! default filters, and systemd's own seccomp filter for `RestrictSUIDSGID=`, which
//! cannot look inside `struct open_how` and so refuses the whole call. There the same
//! guarantee comes from a walk ([`Resolver::Walk`]):
//!
//! * one component at a time, each opened relative to the handle of the one before
//!   with `O_NOFOLLOW`, so a name swapped for a link between two steps is seen as a
//!   link, never followed;
//! * `..` is taken off the stack of handles the walk holds, never asked of the kernel:
//!   it cannot climb above the starting handle, and a directory renamed away during
//!   the walk cannot take it anywhere else;
//! * a link is refused ([`Links::Refuse`], `RESOLVE_NO_SYMLINKS`), or, where the caller
//!   allows links that stay inside ([`Links::StayInside`]), read through its own
//!   descriptor and spliced into the rest of the path: an absolute target is refused
//!   (EXDEV, as `RESOLVE_BENEATH` does), and more than 40 links is ELOOP.
//!
//! Both resolvers answer the same errors for the same attacks (the tests run one table
//! against each): ELOOP for a refused link, EXDEV for a way out.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstat};

/// What a resolution does with a symbolic link on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Any link, the last component included, is ELOOP (`RESOLVE_NO_SYMLINKS`).
    Refuse,
    /// A relative link is followed as long as it stays beneath the handle.
    StayInside,
}

/// How this process resolves paths beneath a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// The kernel's `openat2(RESOLVE_BENEATH)`.
    Openat2,
    /// Our component walk, where `openat2` is missing or filtered.
    Walk,
}

/// The kernel's limit on links followed in one lookup (`MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

struct Probed {
    resolver: Resolver,
    /// What `openat2` answered when it was not usable.
    refusal: Option<Errno>,
}

fn probed() -> &'static Probed {
    static PROBED: OnceLock<Probed> = OnceLock::new();
    PROBED.get_or_init(|| {
        let root = match openat(
            nix::fcntl::AT_FDCWD,
            "/",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(root) => root,
            Err(e) => return Probed { resolver: Resolver::Walk, refusal: Some(e) },
        };
        match openat2(&root, ".", kernel_how(OFlag::O_PATH, Links::Refuse)) {
            Ok(_) => Probed { resolver: Resolver::Openat2, refusal: None },
            Err(e) => Probed { resolver: Resolver::Walk, refusal: Some(e) },
        }
    })
}

impl Resolver {
    /// The resolver this process uses, probed once: `openat2` when a trivial call
    /// works, the walk otherwise.
    pub fn current() -> Resolver {
        probed().resolver
    }

    /// For the startup line and `ccctl sandbox probe`: `paths by openat2`, or
    /// `paths by component walk (openat2: ENOSYS)`.
    pub fn describe() -> String {
        match probed().refusal {
            None => "paths by openat2".to_owned(),
            Some(errno) => format!("paths by component walk (openat2: {errno})"),
        }
    }

    /// Opens `path`, relative to `dir`, without leaving `dir`. `flags` are open(2)'s
    /// (no `O_CREAT`: a name is made with `*at` calls on a resolved parent).
    pub fn open(self, dir: BorrowedFd<'_>, path: &Path, flags: OFlag, links: Links) -> Result<OwnedFd, Errno> {
        // O_TMPFILE holds O_DIRECTORY's bit: only the whole of it asks for a new file.
        if flags.contains(OFlag::O_CREAT) || flags.contains(OFlag::O_TMPFILE) {
            return Err(Errno::EINVAL);
        }
        match self {
            Resolver::Openat2 => kernel(dir, path, flags, links),
            Resolver::Walk => walk(dir, path, flags, links),
        }
    }
}

/// Opens `path` beneath `dir` with this process's resolver.
pub fn open_beneath(dir: BorrowedFd<'_>, path: &Path, flags: OFlag, links: Links) -> Result<OwnedFd, Errno> {
    Resolver::current().open(dir, path, flags, links)
}

fn kernel_how(flags: OFlag, links: Links) -> OpenHow {
    let mut resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
    if links == Links::Refuse {
        resolve |= ResolveFlag::RESOLVE_NO_SYMLINKS;
    }
    // No O_NOFOLLOW: with it O_PATH would open a trailing link itself; without it,
    // RESOLVE_NO_SYMLINKS refuses a link anywhere, the last component included.
    OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(resolve)
}

fn kernel(dir: BorrowedFd<'_>, path: &Path, flags: OFlag, links: Links) -> Result<OwnedFd, Errno> {
    let how = kernel_how(flags, links);
    // EAGAIN: with RESOLVE_BENEATH a path holding `..` fails so whenever anything on
    // the machine renamed during the lookup, and the man page asks for a retry. A few
    // tries; a storm of renames still ends in a clear refusal.
    let mut tries = 0;
    loop {
        match openat2(dir, path, how) {
            Err(Errno::EAGAIN) if tries < 32 => tries += 1,
            other => return other,
        }
    }
}

/// The walk: see the module's documentation.
fn walk(dir: BorrowedFd<'_>, path: &Path, flags: OFlag, links: Links) -> Result<OwnedFd, Errno> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(Errno::ENOENT);
    }
    if bytes.starts_with(b"/") {
        return Err(Errno::EXDEV);
    }
    // A trailing slash asks for a directory, as it does of the kernel.
    let flags = if bytes.ends_with(b"/") { flags | OFlag::O_DIRECTORY } else { flags };
    let mut pending = names(bytes);
    // The directories entered below `dir`; empty means we stand in `dir` itself.
    let mut entered: Vec<OwnedFd> = Vec::new();
    let mut followed = 0;
    while let Some(name) = pending.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            entered.pop().ok_or(Errno::EXDEV)?;
            continue;
        }
        let here = entered.last().map_or(dir, AsFd::as_fd);
        let step = if pending.is_empty() { last_step(here, &name, flags)? } else { middle_step(here, &name)? };
        match step {
            Step::Opened(fd) if pending.is_empty() => return Ok(fd),
            Step::Opened(dir) => entered.push(dir),
            Step::Link(link) => {
                if links == Links::Refuse {
                    return Err(Errno::ELOOP);
                }
                followed += 1;
                if followed > MAX_LINKS {
                    return Err(Errno::ELOOP);
                }
                let target = readlinkat(&link, "")?;
                let target = target.as_bytes();
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target.starts_with(b"/") {
                    return Err(Errno::EXDEV);
                }
                for part in names(target).into_iter().rev() {
                    pending.push_front(part);
                }
            }
        }
    }
    // The path ended on `.` or `..` (or a link to one): the directory we stand in.
    let here = entered.last().map_or(dir, AsFd::as_fd);
    openat(here, ".", flags | OFlag::O_CLOEXEC, Mode::empty())
}

/// The non-empty components of a path, `.` and `..` kept.
fn names(bytes: &[u8]) -> VecDeque<OsString> {
    bytes.split(|&b| b == b'/').filter(|n| !n.is_empty()).map(|n| OsStr::from_bytes(n).to_owned()).collect()
}

enum Step {
    Opened(OwnedFd),
    /// An `O_PATH` descriptor of the link itself.
    Link(OwnedFd),
}

fn is_link(fd: &OwnedFd) -> Result<bool, Errno> {
    Ok(SFlag::from_bits_truncate(fstat(fd)?.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

/// A directory on the way: opened as whatever the name is, never through it.
fn middle_step(here: BorrowedFd<'_>, name: &OsStr) -> Result<Step, Errno> {
    let fd = openat(here, name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
    let kind = SFlag::from_bits_truncate(fstat(&fd)?.st_mode) & SFlag::S_IFMT;
    match kind {
        SFlag::S_IFDIR => Ok(Step::Opened(fd)),
        SFlag::S_IFLNK => Ok(Step::Link(fd)),
        _ => Err(Errno::ENOTDIR),
    }
}

/// The last component, opened with the caller's flags and never through a link.
fn last_step(here: BorrowedFd<'_>, name: &OsStr, flags: OFlag) -> Result<Step, Errno> {
    match openat(here, name, flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
        // O_PATH with O_NOFOLLOW opens a link itself rather than failing.
        Ok(fd) if flags.contains(OFlag::O_PATH) && is_link(&fd)? => Ok(Step::Link(fd)),
        Ok(fd) => Ok(Step::Opened(fd)),
        // A link (ELOOP), or a link where a directory was asked for (ENOTDIR): look at
        // the name itself. If it is no link after all, the first answer stands.
        Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
            let fd = openat(here, name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
            if is_link(&fd)? { Ok(Step::Link(fd)) } else { Err(e) }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
