//! Our init: PID 1 inside every native envelope (`cc-init -- CMD…`).
//!
//! In order: set `no_new_privs`, install the seccomp filter (or refuse to run the
//! workload at all: fail closed), start the command, forward SIGTERM/SIGINT/SIGHUP to
//! it, reap every orphan, and exit with the command's status as soon as the command
//! exits. As PID 1 of the envelope's pid namespace, our exit ends everything the
//! command left behind (background jobs, `setsid`, double forks).

use std::ffi::OsString;
use std::process::{Command, ExitCode};

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

/// The exit status when the envelope could not be set up; the workload never ran.
pub const SETUP_FAILED: u8 = 125;

pub fn main(args: &[OsString]) -> ExitCode {
    let fail = |message: String| {
        eprintln!("cc-init: {message}");
        ExitCode::from(SETUP_FAILED)
    };
    let Some(separator) = args.iter().position(|a| a == "--") else {
        return fail("usage: cc-init -- COMMAND [ARGS…]".into());
    };
    let Some((program, rest)) = args[separator + 1..].split_first() else {
        return fail("no command to run".into());
    };
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        return fail(format!("cannot set no_new_privs: {e}"));
    }
    if let Err(e) = crate::seccomp::install() {
        return fail(format!("cannot install the seccomp filter, refusing to run the command: {e}"));
    }
    let mut signals = match signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP]) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot handle signals: {e}")),
    };
    let child = match Command::new(program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cc-init: cannot run {}: {e}", program.to_string_lossy());
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let child = Pid::from_raw(child.id() as i32);
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if let Ok(signal) = nix::sys::signal::Signal::try_from(signal) {
                let _ = nix::sys::signal::kill(child, signal);
            }
        }
    });
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => return ExitCode::from(code as u8),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => return ExitCode::from(128 + signal as u8),
            // An orphan reaped, or a stop: keep waiting for the command.
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return fail(format!("cannot wait for the command: {e}")),
        }
    }
}
