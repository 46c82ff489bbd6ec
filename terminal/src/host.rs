//! The host backend: a login shell on the server's host, as the supervisor's user, on
//! a pseudo-terminal of ours. No envelope and no gate: it is a person's terminal.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::session::{Control, Exit, Hosted, Inputs, Size};

/// How long a command may take to go after SIGHUP before it is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(3);
/// How long output left behind by the command's exit (a background job still holding
/// the terminal) is still read.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);
/// Output is read in chunks of at most this.
pub const CHUNK: usize = 16 << 10;

/// What to start.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// argv[0], when not the program (a login shell's `-bash`).
    pub arg0: Option<OsString>,
    pub cwd: PathBuf,
    /// Added to the supervisor's own environment.
    pub env: Vec<(String, String)>,
    pub size: Size,
}

/// The supervisor user's login shell, from the password database: `(program, argv0)`.
pub fn login_shell() -> (PathBuf, OsString) {
    let shell = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.shell)
        .filter(|s| s.is_absolute() && s.exists())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    let name = shell.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "sh".into());
    (shell, OsString::from(format!("-{name}")))
}

/// The supervisor user's home directory.
pub fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.dir))
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Starts `spec` on a new pseudo-terminal, as the leader of a session of its own
/// whose controlling terminal it is, fed by `inputs`.
pub fn start(spec: Spec, inputs: Inputs) -> std::io::Result<Hosted> {
    let fail = |e: pty_process::Error| std::io::Error::other(e.to_string());
    let (pty, pts) = pty_process::open().map_err(fail)?;
    pty.resize(pty_process::Size::new(spec.size.rows, spec.size.columns)).map_err(fail)?;
    let mut command = pty_process::Command::new(&spec.program)
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .kill_on_drop(true);
    if let Some(arg0) = &spec.arg0 {
        command = command.arg0(arg0);
    }
    let mut child = command.spawn(pts).map_err(fail)?;
    let pid = child.id().unwrap_or(0);
    let master: OwnedFd = pty.as_fd().try_clone_to_owned()?;
    let (mut read, mut write) = pty.into_split();

    let (output_tx, output) = mpsc::channel::<Bytes>(4);
    let reader = tokio::spawn(async move {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            match read.read(&mut buffer).await {
                // EIO once no process holds the slave any more.
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if output_tx.send(Bytes::copy_from_slice(&buffer[..n])).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    // Typing has a writer of its own: a command that reads nothing holds up only the
    // typing, never a resize, a signal or the hangup.
    let Inputs { mut typed, mut controls, mut hangup } = inputs;
    let writer = tokio::spawn(async move {
        while let Some(bytes) = typed.recv().await {
            if write.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });

    let (exited_tx, exited) = oneshot::channel();
    tokio::spawn(async move {
        let group = Pid::from_raw(pid as i32);
        let mut reason = String::new();
        let status = loop {
            tokio::select! {
                status = child.wait() => break status.ok(),
                Some(control) = controls.recv() => match control {
                    Control::Resize(size) => {
                        let size = pty_process::Size::new(size.rows, size.columns);
                        let _ = rustix::termios::tcsetwinsize(&master, size.into());
                    }
                    Control::Signal(number) => {
                        if let Some(signal) = cc_host::terminal::signal(number) {
                            let _ = cc_host::terminal::signal_foreground(&master, signal);
                        }
                    }
                },
                // Asked for, or the session is gone (its sender dropped).
                _ = hangup.changed() => {
                    reason = hangup.borrow().clone().unwrap_or_else(|| "its session ended".to_owned());
                    break hang_up(&mut child, group).await;
                }
            }
        };
        writer.abort();
        // What the command printed last is read; a background job that keeps the
        // terminal open does not keep the session.
        let drain = reader.abort_handle();
        if tokio::time::timeout(DRAIN_AFTER_EXIT, reader).await.is_err() {
            drain.abort();
        }
        use std::os::unix::process::ExitStatusExt;
        let exit = Exit { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()), reason };
        let _ = exited_tx.send(exit);
    });
    Ok(Hosted { output, exited, pid })
}

/// Ends the command's session: SIGHUP (and SIGCONT, so that a stopped job gets it),
/// then SIGKILL if it is still there after [`HANGUP_GRACE`].
async fn hang_up(child: &mut tokio::process::Child, group: Pid) -> Option<std::process::ExitStatus> {
    let _ = killpg(group, Signal::SIGHUP);
    let _ = killpg(group, Signal::SIGCONT);
    match tokio::time::timeout(HANGUP_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            child.wait().await.ok()
        }
    }
}
