//! Our init: PID 1 inside every native envelope
//! (`cc-init [--bridge PORT=SOCKET]… [--allow-unix] -- CMD…`).
//!
//! In order:
//! 1. set `no_new_privs`;
//! 2. start the bridges: a process of ours, started before any filter, that listens on
//!    `127.0.0.1:<port>` inside the envelope's network namespace and connects each
//!    client to the run's unix socket (the workload itself cannot open AF_UNIX sockets);
//! 3. install the seccomp filter on ourselves, so that the command inherits it (or
//!    refuse to run the command at all: fail closed);
//! 4. start the command, forward SIGTERM/SIGINT/SIGHUP to it, reap every orphan;
//! 5. exit with the command's status as soon as it exits: as PID 1 of the envelope's
//!    pid namespace, our exit ends everything it left behind (background jobs,
//!    `setsid`, double forks) and the bridges with it.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The exit status when the envelope could not be set up; the workload never ran.
pub const SETUP_FAILED: u8 = 125;

const SERVE_BRIDGES: &str = "--serve-bridges";

fn fail(message: String) -> ExitCode {
    eprintln!("cc-init: {message}");
    ExitCode::from(SETUP_FAILED)
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
    if args.first().is_some_and(|a| a == SERVE_BRIDGES) {
        // The bridge keeps AF_UNIX (its whole job) and nothing else the workload lacks.
        if let Err(e) = nix::sys::prctl::set_no_new_privs()
            .map_err(|e| e.to_string())
            .and_then(|()| crate::seccomp::install(true).map_err(|e| e.to_string()))
        {
            return fail(format!("cannot filter the bridges: {e}"));
        }
        return match parse_bridges(args[1..].iter()) {
            Ok(bridges) => serve_bridges(bridges),
            Err(e) => fail(e),
        };
    }
    let Some(separator) = args.iter().position(|a| a == "--") else {
        return fail("usage: cc-init [--bridge PORT=SOCKET]… -- COMMAND [ARGS…]".into());
    };
    let mut bridge_args = Vec::new();
    // Only the runner kind passes it: the runner serves its own unix socket.
    let mut allow_unix = false;
    let mut options = args[..separator].iter();
    while let Some(option) = options.next() {
        if option == "--allow-unix" {
            allow_unix = true;
            continue;
        }
        match (option.to_str(), options.next()) {
            (Some("--bridge"), Some(value)) => bridge_args.push(value.clone()),
            _ => return fail(format!("unknown option {}", option.to_string_lossy())),
        }
    }
    let Some((program, rest)) = args[separator + 1..].split_first() else {
        return fail("no command to run".into());
    };
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        return fail(format!("cannot set no_new_privs: {e}"));
    }
    if !bridge_args.is_empty()
        && let Err(e) = start_bridges(&bridge_args)
    {
        return fail(format!("cannot start the bridges: {e}"));
    }
    if let Err(e) = crate::seccomp::install(allow_unix) {
        return fail(format!("cannot install the seccomp filter, refusing to run the command: {e}"));
    }
    run_command(program, rest)
}

/// Starts the bridge process (ourselves, in bridge mode) and waits until it listens,
/// so that the command never races it.
fn start_bridges(bridges: &[OsString]) -> std::io::Result<()> {
    let me = std::env::current_exe()?;
    let mut child =
        Command::new(me).arg(SERVE_BRIDGES).args(bridges).stdin(Stdio::null()).stdout(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no pipe"))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.trim() != "LISTENING" {
        return Err(std::io::Error::other(format!("the bridges did not start ({})", line.trim())));
    }
    Ok(())
}

/// Bridge mode: one listener per port on the envelope's loopback; each connection is
/// joined to a new connection to its socket. Runs until the envelope ends.
fn serve_bridges(bridges: Vec<(u16, PathBuf)>) -> ExitCode {
    let mut listeners = Vec::new();
    for (port, socket) in bridges {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(l) => listeners.push((l, socket)),
            Err(e) => return fail(format!("cannot listen on 127.0.0.1:{port}: {e}")),
        }
    }
    println!("LISTENING");
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|(listener, socket)| {
            std::thread::spawn(move || {
                for client in listener.incoming().flatten() {
                    let socket = socket.clone();
                    std::thread::spawn(move || join(client, &socket));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    ExitCode::SUCCESS
}

fn join(client: TcpStream, socket: &std::path::Path) {
    let Ok(upstream) = UnixStream::connect(socket) else { return };
    let (Ok(mut client_read), Ok(mut upstream_write)) = (client.try_clone(), upstream.try_clone()) else { return };
    let (mut client_write, mut upstream_read) = (client, upstream);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

fn run_command(program: &OsStr, rest: &[OsString]) -> ExitCode {
    // Taken with sigwait rather than by a handler thread. Blocked signals are never
    // ignored, so a SIGTERM from outside still reaches us: with the default disposition
    // the kernel drops every signal but SIGKILL sent to PID 1 of a pid namespace. The
    // command starts with an empty mask ([`spawn`]).
    let mut waited = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGCHLD] {
        waited.add(signal);
    }
    if let Err(e) = waited.thread_block() {
        return fail(format!("cannot block the forwarded signals: {e}"));
    }
    let child = match spawn(program, rest) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("cc-init: cannot run {}: {}", program.to_string_lossy(), e.desc());
            return ExitCode::from(if e == nix::Error::ENOENT { 127 } else { 126 });
        }
    };
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
/// `Command` restores neither, so it is posix_spawn with both set explicitly.
fn spawn(program: &OsStr, rest: &[OsString]) -> nix::Result<Pid> {
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
    attr.set_flags(PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF)?;
    posix_spawnp(&program, &PosixSpawnFileActions::init()?, &attr, &argv, &env)
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

    #[test]
    fn bridge_arguments() {
        let ok = [OsString::from("41001=/run/cc/bridges/41001.sock")];
        assert_eq!(parse_bridges(ok.iter()).unwrap(), vec![(41001, PathBuf::from("/run/cc/bridges/41001.sock"))]);
        for bad in ["41001", "x=/s", "99999=/s"] {
            assert!(parse_bridges([OsString::from(bad)].iter()).is_err(), "{bad}");
        }
    }
}
