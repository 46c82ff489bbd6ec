//! Pseudo-terminal launches: the pair is opened here, the slave becomes the envelope's
//! stdio (and, by our init, its controlling terminal), the master stays with us. What
//! the caller sends becomes keystrokes, a resize or a signal for the foreground job.
//!
//! Output is read from the master only as fast as the caller takes it (the launch's
//! event channel is bounded), so a command that prints without end blocks on its
//! terminal instead of growing our memory.

use std::os::fd::{AsFd, OwnedFd};

use cc_proto::sandboxd::v1 as pb;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::error::LaunchError;
use crate::spawn::TerminalSlave;

/// What the caller of an interactive launch sends after the launch.
#[derive(Debug)]
pub enum Input {
    /// Bytes for the process's stdin (typed into its terminal).
    Stdin(Vec<u8>),
    /// The terminal's new size (a terminal only).
    Resize(pb::PtySize),
    /// A signal for the terminal's foreground process group (a terminal only).
    Signal(i32),
}

/// A checked size: 1–[`cc_host::terminal::MAX_CELLS`] columns and rows.
pub fn size(size: &pb::PtySize) -> Result<pty_process::Size, LaunchError> {
    let (columns, rows) = cc_host::terminal::cells(size.columns, size.rows).map_err(LaunchError::BadRequest)?;
    Ok(pty_process::Size::new(rows, columns))
}

/// A terminal opened for a launch.
pub struct Opened {
    pub master: pty_process::Pty,
    pub slave: TerminalSlave,
}

/// Opens a pseudo-terminal of `size`. The slave is opened with `O_NOCTTY`, so that it
/// becomes no one's controlling terminal until our init takes it; as root, it is
/// handed to `owner`, the user the envelope runs as, as login hands a terminal over.
pub fn open(size: &pb::PtySize, owner: Option<cc_host::ServiceUser>) -> Result<Opened, LaunchError> {
    let size = self::size(size)?;
    let cannot =
        |e: &dyn std::fmt::Display| LaunchError::CannotStart(std::io::Error::other(format!("a terminal: {e}")));
    let (master, slave) = pty_process::open().map_err(|e| cannot(&e))?;
    master.resize(size).map_err(|e| cannot(&e))?;
    let slave: OwnedFd = slave.as_fd().try_clone_to_owned().map_err(|e| cannot(&e))?;
    if let Some(owner) = owner {
        let (uid, gid) = (nix::unistd::Uid::from_raw(owner.uid), nix::unistd::Gid::from_raw(owner.gid));
        nix::unistd::fchown(&slave, Some(uid), Some(gid)).map_err(|e| cannot(&e))?;
    }
    Ok(Opened { master, slave: TerminalSlave(slave) })
}

/// Carries the caller's input to the terminal until either ends: bytes are typed (by
/// a writer of their own, so that a command that reads nothing holds up only the
/// bytes), a resize is set on the master (the kernel tells the foreground job with
/// SIGWINCH), a signal goes to the foreground process group by the kernel's own
/// reference to it (TIOCSIG), never by a number that could by then name a process
/// outside the envelope. Messages are taken in order: a signal sent after bytes the
/// command does not read waits for them, as a key typed after them would.
pub async fn feed(mut input: mpsc::Receiver<Input>, mut master: pty_process::OwnedWritePty, control: OwnedFd) {
    let (typed, mut to_type) = mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = to_type.recv().await {
            if master.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    while let Some(message) = input.recv().await {
        match message {
            Input::Stdin(bytes) => {
                if typed.send(bytes).await.is_err() {
                    break;
                }
            }
            Input::Resize(new) => {
                if let Ok(new) = size(&new) {
                    let _ = rustix::termios::tcsetwinsize(&control, new.into());
                }
            }
            Input::Signal(number) => {
                if let Some(signal) = cc_host::terminal::signal(number) {
                    let _ = cc_host::terminal::signal_foreground(&control, signal);
                }
            }
        }
    }
    writer.abort();
}
