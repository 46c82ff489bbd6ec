//! One command in the guest, with pipes or on a pseudo-terminal: its output streams
//! back, its input, resizes and signals come in, and dropping the call kills its
//! process group.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::pin::Pin;
use std::process::Stdio;

use cc_proto::vmagent::v1 as pb;
use cc_proto::vmagent::v1::exec_request::Input;
use cc_proto::vmagent::v1::exec_response::Event;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::Status;

/// Where typed bytes go: a pipe's write end; and a terminal's master with its
/// control descriptor.
type Stdin = Option<Box<dyn AsyncWrite + Send + Unpin>>;
type Terminal = Option<(pty_process::OwnedWritePty, OwnedFd)>;

pub type ExecStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ExecResponse, Status>> + Send + 'static>>;

const CHUNK: usize = 16 << 10;

fn event(e: Event) -> Result<pb::ExecResponse, Status> {
    Ok(pb::ExecResponse { event: Some(e) })
}

/// Kills the command's process group when the call ends, however it ends.
struct Group(Pid);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

async fn carry(mut from: impl AsyncRead + Unpin, tx: mpsc::Sender<Result<pb::ExecResponse, Status>>, stdout: bool) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = buffer[..n].to_vec();
                let e = if stdout { Event::Stdout(chunk) } else { Event::Stderr(chunk) };
                if tx.send(event(e)).await.is_err() {
                    return;
                }
            }
        }
    }
}

pub async fn exec(mut inputs: tonic::Streaming<pb::ExecRequest>) -> Result<ExecStream, Status> {
    let start = match inputs.next().await {
        Some(Ok(pb::ExecRequest { input: Some(Input::Start(start)) })) => start,
        Some(Err(status)) => return Err(status),
        _ => return Err(Status::invalid_argument("an exec starts with what to run")),
    };
    let Some((program, args)) = start.argv.split_first() else {
        return Err(Status::invalid_argument("argv is empty"));
    };
    let os = |b: &Vec<u8>| std::ffi::OsStr::from_bytes(b).to_owned();
    let cwd = if start.cwd.is_empty() { std::path::PathBuf::from("/") } else { os(&start.cwd).into() };
    let (tx, rx) = mpsc::channel(16);
    let mut readers = Vec::new();
    let mut command = tokio::process::Command::new(os(program));
    command.args(args.iter().map(os)).env_clear().envs(&start.env).current_dir(&cwd).kill_on_drop(true);

    let (mut child, input, terminal): (_, Stdin, Terminal) = match &start.pty {
        Some(size) => {
            let fail = |e: pty_process::Error| Status::internal(format!("cannot open a terminal: {e}"));
            let (pty, pts) = pty_process::open().map_err(fail)?;
            pty.resize(pty_process::Size::new(size.rows.clamp(1, 1000) as u16, size.columns.clamp(1, 1000) as u16))
                .map_err(fail)?;
            let child = pty_process::Command::from(command).spawn(pts).map_err(|e| {
                Status::failed_precondition(format!("cannot run {}: {e}", os(program).to_string_lossy()))
            })?;
            let control = pty.as_fd().try_clone_to_owned().map_err(|e| Status::internal(e.to_string()))?;
            let (read, write) = pty.into_split();
            readers.push(tokio::spawn(carry(read, tx.clone(), true)));
            (child, None, Some((write, control)))
        }
        None => {
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
            let mut child = command.spawn().map_err(|e| {
                Status::failed_precondition(format!("cannot run {}: {e}", os(program).to_string_lossy()))
            })?;
            if let Some(out) = child.stdout.take() {
                readers.push(tokio::spawn(carry(out, tx.clone(), true)));
            }
            if let Some(err) = child.stderr.take() {
                readers.push(tokio::spawn(carry(err, tx.clone(), false)));
            }
            let stdin = child.stdin.take().map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>);
            (child, stdin, None)
        }
    };
    let pid = child.id().unwrap_or(0);
    let group = Group(Pid::from_raw(pid as i32));
    let _ = tx.send(event(Event::Started(pid))).await;

    // Input, resizes and signals, until the caller's stream ends.
    let foreground = terminal.as_ref().and_then(|(_, control)| control.try_clone().ok());
    tokio::spawn(async move {
        let mut input = input;
        let mut terminal = terminal;
        while let Some(Ok(message)) = inputs.next().await {
            match message.input {
                Some(Input::Stdin(bytes)) => {
                    if let Some((write, _)) = terminal.as_mut() {
                        let _ = write.write_all(&bytes).await;
                    } else if let Some(stdin) = input.as_mut() {
                        let _ = stdin.write_all(&bytes).await;
                    }
                }
                Some(Input::CloseStdin(_)) => input = None,
                Some(Input::Resize(size)) => {
                    if let Some((write, _)) = &terminal {
                        let size =
                            pty_process::Size::new(size.rows.clamp(1, 1000) as u16, size.columns.clamp(1, 1000) as u16);
                        let _ = write.resize(size);
                    }
                }
                Some(Input::Signal(number)) => {
                    if let Ok(signal) = Signal::try_from(number) {
                        let target = foreground
                            .as_ref()
                            .and_then(|fd| nix::unistd::tcgetpgrp(fd.as_fd()).ok())
                            .unwrap_or(Pid::from_raw(pid as i32));
                        let _ = killpg(target, signal);
                    }
                }
                Some(Input::Start(_)) | None => {}
            }
        }
    });

    tokio::spawn(async move {
        // The caller gone: the command goes too (the group's drop kills it).
        let status = tokio::select! {
            status = child.wait() => status.ok(),
            _ = tx.closed() => {
                drop(group);
                let _ = child.wait().await;
                return;
            }
        };
        use std::os::unix::process::ExitStatusExt;
        let exit = pb::ExecExit { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()) };
        // The output comes before the exit: the readers end when their pipes close,
        // or a moment after, when a process the command left holds them open.
        let all_read = futures_join(readers);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), all_read).await;
        // What is left of the group goes with the command.
        drop(group);
        let _ = tx.send(event(Event::Exit(exit))).await;
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// Waits for every reader.
async fn futures_join(readers: Vec<tokio::task::JoinHandle<()>>) {
    for reader in readers {
        let _ = reader.await;
    }
}
