//! Our init: PID 1 inside every native envelope (`cc-init [--nofile N]
//! [--bridge PORT=SOCKET]… [--allow-unix] [--terminal] [--check-ro PATH]…
//! [--check-rw PATH]… (-- CMD… | --command-stdin)`).
//!
//! In order:
//! 0. check that every path bound inside the run's roots is where it must be: reached
//!    from `/` with no link at all, and, for `--check-ro`, on a read-only mount.
//!    bubblewrap mounts exactly the descriptors sandboxd opened, but places each by
//!    path; a directory swapped for a link at that instant would put a protection
//!    somewhere else. Then the command does not run;
//! 1. set the rlimits everything inside inherits (no core files, `--nofile`), then
//!    `no_new_privs`;
//! 2. block the signals it forwards (every thread it starts inherits the mask);
//! 3. install the seccomp filter on ourselves, so that the command inherits it (or
//!    refuse to run the command at all: fail closed). With bridges it comes in two
//!    layers: first everything but AF_UNIX, then the bridges start as threads of ours
//!    that listen on `127.0.0.1:<port>` inside the envelope's network namespace and
//!    connect each client to the run's unix socket, then, on this thread only (a
//!    filter binds the thread that installs it and what it starts afterwards), the
//!    AF_UNIX layer: the workload itself cannot open AF_UNIX sockets;
//! 4. with `--command-stdin` (an envelope made ahead of its launch, [`crate::warm`]),
//!    wait for the command: NUL-terminated arguments on stdin, to its end; nothing at
//!    all means the envelope was not needed, and it ends;
//! 5. start the command, forward SIGTERM/SIGINT/SIGHUP to it, reap every orphan. With
//!    `--terminal` (its stdio is a pseudo-terminal's slave) we make the terminal our
//!    controlling terminal (bubblewrap's `--new-session` left us a session leader
//!    without one) and start the command in a process group of its own, the
//!    terminal's foreground one, so that Ctrl-C reaches the command's foreground job
//!    and never us ([`terminal`]);
//! 6. exit with the command's status as soon as it exits: as PID 1 of the envelope's
//!    pid namespace, our exit ends everything it left behind (background jobs,
//!    `setsid`, double forks) and the bridges with it.
//!
//! The bridges are threads rather than a process of their own: a second process was
//! one more spawn per launch and 2 MiB more resident for each idle envelope.

use std::ffi::{OsStr, OsString};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The exit status when the envelope could not be set up; the workload never ran.
pub const SETUP_FAILED: u8 = 125;
/// The most a command read from stdin may hold; sandboxd sends at most 1 MiB.
const MAX_COMMAND_BYTES: u64 = 2 << 20;

fn fail(message: String) -> ExitCode {
    eprintln!("cc-init: {message}");
    ExitCode::from(SETUP_FAILED)
}

/// The rlimits everything in the envelope inherits, soft and hard alike, so that no
/// process inside can raise them again: no core files (a core holds the memory of
/// whatever crashed, secrets included), and at most `nofile` open files.
///
/// And the umask a developer's shell has (022), whatever the supervisor's (077, as its
/// unit's): what the agent makes is private by where it is (the conversation's directory
/// is the service user's alone), and tools that expect 022 behave as they do elsewhere.
fn set_limits(nofile: Option<u64>) -> nix::Result<()> {
    use nix::sys::resource::{Resource, setrlimit};
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
    if let Some(n) = nofile {
        setrlimit(Resource::RLIMIT_NOFILE, n, n)?;
    }
    Ok(())
}

/// `PORT=SOCKET` pairs.
fn parse_bridges<'a>(args: impl Iterator<Item = &'a OsString>) -> Result<Vec<(u16, PathBuf)>, String> {
    args.map(|a| {
        let text = a.to_str().ok_or("a bridge is not UTF-8")?;
        let (port, socket) = text.split_once('=').ok_or_else(|| format!("bridge {text:?} is not PORT=SOCKET"))?;
        let port = port.parse::<u16>().map_err(|_| format!("bridge port {port:?} is not a port"))?;
        Ok((port, PathBuf::from(socket)))
    })
    .collect()
}

pub fn main(args: &[OsString]) -> ExitCode {
    // Non-dumpable first: no process of the workload may read or write our memory
    // through /proc/<pid>/mem, which is not the ptrace syscall the filter refuses.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        return fail(format!("cannot make the init non-dumpable: {e}"));
    }
    let (options, command) = match args.iter().position(|a| a == "--") {
        Some(separator) => (&args[..separator], Some(&args[separator + 1..])),
        None => (args, None),
    };
    let mut bridge_args = Vec::new();
    // Only the runner kind passes it: the runner serves its own unix socket.
    let mut allow_unix = false;
    let mut command_stdin = false;
    let mut on_terminal = false;
    let mut checks: Vec<(PathBuf, bool)> = Vec::new();
    let mut nofile: Option<u64> = None;
    let mut options = options.iter();
    while let Some(option) = options.next() {
        match option.to_str() {
            Some("--allow-unix") => allow_unix = true,
            Some("--command-stdin") => command_stdin = true,
            Some("--terminal") => on_terminal = true,
            Some("--bridge") if let Some(value) = options.next() => bridge_args.push(value.clone()),
            Some("--check-ro") if let Some(path) = options.next() => checks.push((PathBuf::from(path), true)),
            Some("--check-rw") if let Some(path) = options.next() => checks.push((PathBuf::from(path), false)),
            Some("--nofile") if let Some(n) = options.next().and_then(|n| n.to_str()?.parse().ok()) => nofile = Some(n),
            _ => return fail(format!("unknown option {}", option.to_string_lossy())),
        }
    }
    for (path, read_only) in &checks {
        if let Err(e) = check_bound(path, *read_only) {
            return fail(format!("{e}, refusing to run the command"));
        }
    }
    let bridges = match parse_bridges(bridge_args.iter()) {
        Ok(bridges) => bridges,
        Err(e) => return fail(e),
    };
    let command = match (command, command_stdin) {
        (Some(command), false) => Some(command.to_vec()),
        (None, true) => None,
        _ => {
            return fail(
                "usage: cc-init [--nofile N] [--bridge PORT=SOCKET]… [--allow-unix] [--check-ro PATH]… [--check-rw PATH]… \
                 (-- COMMAND [ARGS…] | --command-stdin)"
                    .into(),
            );
        }
    };
    if let Err(e) = set_limits(nofile) {
        return fail(format!("cannot set the envelope's rlimits: {e}"));
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        return fail(format!("cannot set no_new_privs: {e}"));
    }
    // Taken with sigwait rather than by a handler thread. Blocked signals are never
    // ignored, so a SIGTERM from outside still reaches us: with the default disposition
    // the kernel drops every signal but SIGKILL sent to PID 1 of a pid namespace.
    // Blocked before any bridge thread exists, so that none of them can take one.
    let mut waited = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGCHLD] {
        waited.add(signal);
    }
    if let Err(e) = waited.thread_block() {
        return fail(format!("cannot block the forwarded signals: {e}"));
    }
    if let Err(e) = filter_and_bridge(bridges, allow_unix) {
        return fail(format!("{e}, refusing to run the command"));
    }
    let command = match command {
        Some(command) => command,
        None => {
            use std::io::Read;
            let mut bytes = Vec::new();
            if let Err(e) = std::io::stdin().lock().take(MAX_COMMAND_BYTES + 1).read_to_end(&mut bytes) {
                return fail(format!("cannot read the command from stdin: {e}"));
            }
            match parse_command(&bytes) {
                Ok(Some(command)) => command,
                // Not needed after all: the envelope ends unused.
                Ok(None) => return ExitCode::SUCCESS,
                Err(e) => return fail(e),
            }
        }
    };
    let Some((program, rest)) = command.split_first() else {
        return fail("no command to run".into());
    };
    if on_terminal && let Err(e) = terminal::take_controlling() {
        return fail(format!("cannot make the terminal the envelope's controlling terminal: {e}"));
    }
    run_command(program, rest, Start { stdin_was_ours: command_stdin, on_terminal }, &waited)
}

/// How the command is started.
#[derive(Clone, Copy)]
struct Start {
    /// Its stdin is the pipe its command came on: it gets /dev/null instead.
    stdin_was_ours: bool,
    /// Its stdio is a terminal we control: it starts in the foreground process group.
    on_terminal: bool,
}

/// The envelope's pseudo-terminal: ours to control, the command's to use.
mod terminal {
    use nix::unistd::Pid;

    /// Makes our stdin's terminal our controlling terminal. We are a session leader
    /// without one (bubblewrap's `--new-session`), and no other session has it:
    /// sandboxd opened it with `O_NOCTTY`.
    pub fn take_controlling() -> rustix::io::Result<()> {
        rustix::process::ioctl_tiocsctty(std::io::stdin())
    }

    /// Hands the terminal to `command`'s process group. The command may have looked
    /// before this (an interactive shell that finds itself in the background stops
    /// itself with SIGTTIN until it is in the foreground), so it is continued after:
    /// a SIGCONT to a group that is not stopped changes nothing.
    pub fn hand_to(command: Pid) -> nix::Result<()> {
        nix::unistd::tcsetpgrp(std::io::stdin(), command)?;
        nix::sys::signal::killpg(command, nix::sys::signal::Signal::SIGCONT)
    }
}

/// A command as sandboxd writes it: each argument followed by a NUL. `None` for no
/// bytes at all.
fn parse_command(bytes: &[u8]) -> Result<Option<Vec<OsString>>, String> {
    use std::os::unix::ffi::OsStrExt;
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() as u64 > MAX_COMMAND_BYTES {
        return Err(format!("the command on stdin is over {} MiB", MAX_COMMAND_BYTES >> 20));
    }
    let Some(body) = bytes.strip_suffix(&[0]) else {
        return Err("the command on stdin does not end with a NUL".into());
    };
    let command: Vec<OsString> = body.split(|&b| b == 0).map(|a| OsStr::from_bytes(a).to_owned()).collect();
    if command[0].is_empty() {
        return Err("the command on stdin has an empty program".into());
    }
    Ok(Some(command))
}

/// `path` as the envelope shows it: reached from `/` without any link, and on a
/// read-only mount when `read_only`.
pub fn check_bound(path: &Path, read_only: bool) -> Result<(), String> {
    use cc_host::resolve::{Links, open_beneath};
    use nix::fcntl::{OFlag, open};
    use std::os::fd::AsFd;
    let relative = path.strip_prefix("/").map_err(|_| format!("{} is not absolute", path.display()))?;
    let root = open("/", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
        .map_err(|e| format!("cannot open /: {e}"))?;
    let fd = open_beneath(root.as_fd(), relative, OFlag::O_PATH, Links::Refuse)
        .map_err(|e| format!("{} is not where it was bound in this envelope ({e})", path.display()))?;
    if read_only {
        let mount = nix::sys::statvfs::fstatvfs(&fd).map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
        if !mount.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
            return Err(format!("{} is not read-only in this envelope", path.display()));
        }
    }
    Ok(())
}

/// Installs the filter on this thread, with the bridges started between its two layers
/// when there are any.
fn filter_and_bridge(bridges: Vec<(u16, PathBuf)>, allow_unix: bool) -> Result<(), String> {
    let seccomp = |e: crate::seccomp::SeccompError| format!("cannot install the seccomp filter: {e}");
    if bridges.is_empty() {
        return crate::seccomp::install(allow_unix).map_err(seccomp);
    }
    // The bridges keep AF_UNIX (their whole job) and nothing else the workload lacks.
    crate::seccomp::install(true).map_err(seccomp)?;
    start_bridges(bridges).map_err(|e| format!("cannot start the bridges: {e}"))?;
    if !allow_unix {
        crate::seccomp::install_unix_denial().map_err(seccomp)?;
    }
    Ok(())
}

/// A bridge's listener on the envelope's loopback, with reno for its connections
/// (each accepted one inherits it): with BBR, a common default, the kernel paces
/// every burst on a qdisc-less loopback with a timer of its own, and curl behind the
/// bridge got 0.3× of direct. Set on the listener, since switching an accepted
/// socket away from BBR leaves its pacing on. Best effort: any kernel allows reno.
fn bridge_listener(port: u16) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
    let _ = setsockopt(&listener, sockopt::TcpCongestion, &OsString::from("reno"));
    Ok(listener)
}

/// Listens on every bridge's port, then serves each from a thread of its own: when
/// this returns the ports accept, so the command never races them. The threads run
/// until the envelope ends.
fn start_bridges(bridges: Vec<(u16, PathBuf)>) -> std::io::Result<()> {
    let mut listeners = Vec::new();
    for (port, socket) in bridges {
        listeners.push((bridge_listener(port)?, socket));
    }
    for (listener, socket) in listeners {
        std::thread::Builder::new().name(format!("bridge {}", socket.display())).spawn(move || {
            for client in listener.incoming().flatten() {
                let socket = socket.clone();
                let _ = std::thread::Builder::new().spawn(move || join(client, &socket));
            }
        })?;
    }
    Ok(())
}

fn join(client: TcpStream, socket: &std::path::Path) {
    let Ok(upstream) = UnixStream::connect(socket) else { return };
    // As large a send buffer as the system allows (`net.core.wmem_max`), as the gateway
    // gives its side: a Unix socket's default makes an upload take turns every few pages.
    let _ = nix::sys::socket::setsockopt(&upstream, nix::sys::socket::sockopt::SndBuf, &(4 << 20));
    let (Ok(mut client_read), Ok(mut upstream_write)) = (client.try_clone(), upstream.try_clone()) else { return };
    let (mut client_write, mut upstream_read) = (client, upstream);
    let up = std::thread::spawn(move || {
        let _ = carry(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(std::net::Shutdown::Write);
    });
    let _ = carry(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

/// One direction of a bridge, until its source ends: spliced through a pipe, so the
/// bytes stay in the kernel (`std::io::copy` moves 8 KiB per two system calls, and held
/// a proxied download to a quarter of loopback's speed); copied when no pipe can be had.
fn carry<R, W>(from: &mut R, to: &mut W) -> std::io::Result<()>
where
    R: std::io::Read + std::os::fd::AsFd,
    W: std::io::Write + std::os::fd::AsFd,
{
    use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};
    // 1 MiB each way (a 256 KiB pipe held a tunnel to a third of loopback's speed: the
    // two ends took turns every quarter MiB); a pipe the kernel keeps under 64 KiB (past
    // the user's pipe allowance) is no better than a buffered copy, done instead.
    const CHUNK: usize = 1 << 20;
    let pipe = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok().filter(|(_, write)| {
        if fcntl(write, FcntlArg::F_SETPIPE_SZ(CHUNK as i32)).is_err() {
            let _ = fcntl(write, FcntlArg::F_SETPIPE_SZ(256 << 10));
        }
        fcntl(write, FcntlArg::F_GETPIPE_SZ).is_ok_and(|size| size >= 64 << 10)
    });
    let Some((pipe_read, pipe_write)) = pipe else {
        let mut from = std::io::BufReader::with_capacity(CHUNK, from);
        return std::io::copy(&mut from, to).map(drop);
    };
    loop {
        let filled = splice(from.as_fd(), None, &pipe_write, None, CHUNK, SpliceFFlags::SPLICE_F_MOVE)?;
        if filled == 0 {
            return Ok(());
        }
        let mut left = filled;
        while left > 0 {
            left -= splice(&pipe_read, None, to.as_fd(), None, left, SpliceFFlags::SPLICE_F_MOVE)?;
        }
    }
}

fn run_command(program: &OsStr, rest: &[OsString], start: Start, waited: &SigSet) -> ExitCode {
    // The command starts with an empty mask ([`spawn`]).
    let child = match spawn(program, rest, start) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("cc-init: cannot run {}: {}", program.to_string_lossy(), e.desc());
            return ExitCode::from(if e == nix::Error::ENOENT { 127 } else { 126 });
        }
    };
    if start.on_terminal
        && let Err(e) = terminal::hand_to(child)
    {
        let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
        return fail(format!("cannot give the terminal to the command: {e}"));
    }
    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Some(code) = reap(child) {
                    return code;
                }
            }
            Ok(signal) => {
                let _ = nix::sys::signal::kill(child, signal);
            }
            Err(nix::Error::EINTR) => {}
            Err(e) => return fail(format!("cannot wait for a signal: {e}")),
        }
    }
}

/// Starts the command as the workload expects a fresh process: no signal blocked (ours
/// are, for sigwait, and a mask is inherited across exec) and SIGPIPE at its default
/// (the Rust runtime ignores it, and an ignored signal is inherited too). std's
/// `Command` restores neither, so it is posix_spawn with both set explicitly. Its stdin
/// is ours (the runner reads its bootstrap there), or /dev/null when ours was the pipe
/// its command came on. On a terminal it leads a process group of its own. Nothing but its stdio
/// reaches it: a descriptor that sandboxd, or whoever started the supervisor, inherited
/// without close-on-exec would otherwise pass through bubblewrap into every envelope.
fn spawn(program: &OsStr, rest: &[OsString], start: Start) -> nix::Result<Pid> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawnp};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| nix::Error::EINVAL);
    let program = c(program)?;
    let mut argv = vec![program.clone()];
    for arg in rest {
        argv.push(c(arg)?);
    }
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok())
        .collect();
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_sigmask(&SigSet::empty())?;
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    attr.set_sigdefault(&pipe)?;
    let mut flags = PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF;
    if start.on_terminal {
        // Group 0: a group of its own, led by the command.
        attr.set_pgroup(Pid::from_raw(0))?;
        flags |= PosixSpawnFlags::POSIX_SPAWN_SETPGROUP;
    }
    attr.set_flags(flags)?;
    let io = |e: std::io::Error| nix::Error::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO));
    let mut files = PosixSpawnFileActions::init()?;
    // Held until the spawn has happened.
    let null = if start.stdin_was_ours { Some(std::fs::File::open("/dev/null").map_err(io)?) } else { None };
    if let Some(null) = &null {
        files.add_dup2(std::os::fd::AsRawFd::as_raw_fd(null), 0)?;
    }
    // Ours are all close-on-exec (Rust opens them so, the bridges' sockets included);
    // what we inherited is listed here. Closing one that is gone meanwhile (the listing's
    // own) is an error posix_spawn ignores.
    let inherited: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(io)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in inherited {
        files.add_close(fd)?;
    }
    posix_spawnp(&program, &files, &attr, &argv, &env)
}

/// Reaps every child that has exited (orphans included); the command's exit status
/// once it is among them.
fn reap(command: Pid) -> Option<ExitCode> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => return Some(ExitCode::from(code as u8)),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                return Some(ExitCode::from(128 + signal as u8));
            }
            Ok(WaitStatus::StillAlive) => return None,
            // An orphan reaped: look for more.
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Some(fail(format!("cannot wait for the command: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What bubblewrap placed by path is checked as the envelope shows it: a link on
    /// the way, a missing path, or a writable mount where a read-only bind belongs.
    #[test]
    fn bound_paths_are_checked_as_the_envelope_shows_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        check_bound(&dir.join("real"), false).unwrap();
        assert!(check_bound(&dir.join("real"), true).unwrap_err().contains("is not read-only"));
        assert!(check_bound(&dir.join("link"), false).unwrap_err().contains("is not where it was bound"));
        assert!(check_bound(&dir.join("link/x"), false).is_err());
        assert!(check_bound(&dir.join("missing"), false).is_err());
        assert!(check_bound(Path::new("relative"), false).is_err());
    }

    #[test]
    fn a_command_from_stdin() {
        assert_eq!(parse_command(b"").unwrap(), None);
        let command = parse_command(b"/bin/sh\0-c\0\0echo a\0").unwrap().unwrap();
        assert_eq!(command, ["/bin/sh", "-c", "", "echo a"].map(OsString::from));
        let one = parse_command(b"true\0").unwrap().unwrap();
        assert_eq!(one, [OsString::from("true")]);
        for bad in [&b"true"[..], b"\0", b"\0x\0", b"sh\0-c"] {
            assert!(parse_command(bad).is_err(), "{bad:?}");
        }
        let huge = vec![b'a'; (MAX_COMMAND_BYTES + 1) as usize];
        assert!(parse_command(&huge).unwrap_err().contains("over 2 MiB"));
    }

    #[test]
    fn a_bridges_connections_are_not_paced_by_bbr() {
        let listener = bridge_listener(0).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let algorithm = nix::sys::socket::getsockopt(&accepted, sockopt::TcpCongestion).unwrap();
        assert_eq!(algorithm, "reno");
        drop(client);
    }

    #[test]
    fn bridge_arguments() {
        let ok = [OsString::from("41001=/run/cc/bridges/41001.sock")];
        assert_eq!(parse_bridges(ok.iter()).unwrap(), vec![(41001, PathBuf::from("/run/cc/bridges/41001.sock"))]);
        for bad in ["41001", "x=/s", "99999=/s"] {
            assert!(parse_bridges([OsString::from(bad)].iter()).is_err(), "{bad}");
        }
    }
}
