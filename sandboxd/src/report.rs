//! A launch's report to its caller: which envelope it runs in, its output as it
//! comes (an envelope's stderr also scanned for what the envelope refused), its
//! exit; and, for bubblewrap, the envelope for the run's next launch, made once the
//! exit is queued.

use std::sync::Arc;
use std::time::Duration;

use cc_proto::common::v1::SandboxBackend;
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::launch_response::Event;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::bwrap::Kind;
use crate::launch::Launcher;
use crate::policy::RunPolicy;
use crate::runs::{Runs, kill_group};
use crate::violations::{Deduplicator, scan_line};

/// A pipe is read in chunks of up to a pipe's default capacity: an agent that writes
/// fast (a gigabyte of stream-json) costs each process it crosses a message per
/// 64 KiB rather than per 16 KiB.
const PIPE_CHUNK: usize = 64 * 1024;
/// A terminal's output is read in smaller chunks: what a person sees comes sooner, and
/// a terminal session's per-client queue is counted in them.
const TERMINAL_CHUNK: usize = 16 * 1024;
/// Violation reports per launch, at most.
pub(crate) const MAX_VIOLATIONS: usize = 64;

/// A launch's process, started.
pub(crate) struct Process {
    pub child: tokio::process::Child,
    /// Its process group, which a kill of the run signals.
    pub group: u32,
    /// A terminal's master, whose read half is the output (the child has no pipes).
    pub terminal: Option<pty_process::OwnedReadPty>,
}

/// What the next envelope is made from: the launcher, the policy the launch ran
/// under and its kind.
pub(crate) type Next = (Arc<Launcher>, Arc<RunPolicy>, Kind);

/// How a launch is reported.
pub(crate) struct Report {
    pub run_id: String,
    pub envelope: SandboxBackend,
    /// 0: none.
    pub timeout_seconds: u32,
}

pub(crate) type Sender = mpsc::Sender<Result<pb::LaunchResponse, Status>>;

/// A launch's events: where they are sent, and the stream its caller reads.
pub(crate) fn channel() -> (Sender, ReceiverStream<Result<pb::LaunchResponse, Status>>) {
    let (tx, rx) = mpsc::channel(64);
    (tx, ReceiverStream::new(rx))
}

impl Report {
    /// Reports `process` on `tx` until it exits, is timed out or its caller goes.
    /// `denials`: on macOS, the task forwarding Seatbelt's denials of its group
    /// (macOS reports them in its log, not to the command), ended with it.
    pub async fn run(
        self,
        process: Process,
        runs: Arc<Runs>,
        next: Option<Next>,
        tx: Sender,
        denials: Option<tokio::task::JoinHandle<()>>,
    ) {
        let Process { mut child, group, terminal } = process;
        let native = self.envelope == SandboxBackend::Native;
        for event in [Event::Envelope(self.envelope as i32), Event::ProcessId(group)] {
            let _ = tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await;
        }
        let stderr_pipe = if native { Pipe::EnvelopeStderr } else { Pipe::Stderr };
        let stdout = match terminal {
            Some(terminal) => Some(tokio::spawn(forward(terminal, tx.clone(), Pipe::Stdout, TERMINAL_CHUNK))),
            None => child.stdout.take().map(|out| tokio::spawn(forward(out, tx.clone(), Pipe::Stdout, PIPE_CHUNK))),
        };
        let stderr = child.stderr.take().map(|err| tokio::spawn(forward(err, tx.clone(), stderr_pipe, PIPE_CHUNK)));
        let limit = self.timeout_seconds;
        let timeout = async {
            if limit == 0 {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(Duration::from_secs(u64::from(limit))).await
            }
        };
        let (status, timed_out) = tokio::select! {
            status = child.wait() => (status.ok(), false),
            _ = timeout => {
                kill_group(group);
                (child.wait().await.ok(), true)
            }
            _ = tx.closed() => {
                kill_group(group);
                (child.wait().await.ok(), false)
            }
        };
        // Nothing of the launch outlives it: in an envelope our init's exit already
        // ended its pid namespace. Unwrapped, the rest of the process group goes now
        // (setsid escapes it: the residual risk the README states). Its leader is
        // reaped, so the id could in principle be reused: only unwrapped launches,
        // whose members keep the group alive, are signalled after the exit.
        if !native {
            kill_group(group);
        }
        for reader in [stdout, stderr].into_iter().flatten() {
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        let run_id = self.run_id;
        runs.remove(&run_id, group);
        if let Some(denials) = denials {
            denials.abort();
        }
        use std::os::unix::process::ExitStatusExt;
        let exit = pb::Exit { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()), timed_out };
        // The next envelope is announced before the exit is reported, so that the
        // next launch waits for it rather than making its own, and made once the exit
        // is queued, so that it never delays it; in a task of its own, so that a
        // client slow to read its events never holds it up.
        let next = next.map(|(launcher, policy, kind)| {
            let sender = runs.expect_warm(&run_id, &policy, kind);
            (launcher, policy, kind, sender)
        });
        let exit = tx.try_send(Ok(pb::LaunchResponse { event: Some(Event::Exit(exit)) }));
        if let Some((launcher, policy, kind, sender)) = next {
            tokio::spawn(launcher.prewarm(run_id, kind, policy, sender));
        }
        if let Err(mpsc::error::TrySendError::Full(exit)) = exit {
            let _ = tx.send(exit).await;
        }
    }
}

/// Which of a launch's pipes [`forward`] carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Stdout,
    /// An unwrapped launch's stderr: carried as it is.
    Stderr,
    /// An envelope's stderr: also scanned for what the envelope refused.
    EnvelopeStderr,
}

/// Forwards a pipe as chunks, and an envelope's stderr lines as violations too.
async fn forward(mut pipe: impl AsyncRead + Unpin, tx: Sender, which: Pipe, chunk: usize) {
    let mut buffer = vec![0u8; chunk];
    let mut partial: Vec<u8> = Vec::new();
    let mut dedup = Deduplicator::new(MAX_VIOLATIONS);
    let scan = which == Pipe::EnvelopeStderr;
    // Reports the line's violation, if it is one not yet reported; false once the
    // client is gone.
    let report = async |line: &[u8], dedup: &mut Deduplicator| match scan_line(&String::from_utf8_lossy(line)) {
        Some(v) if dedup.admit(&v) => {
            tx.send(Ok(pb::LaunchResponse { event: Some(Event::Violation(v)) })).await.is_ok()
        }
        _ => true,
    };
    loop {
        let n = match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = buffer[..n].to_vec();
        let event = if which == Pipe::Stdout { Event::Stdout(chunk.clone()) } else { Event::Stderr(chunk.clone()) };
        if tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await.is_err() {
            return;
        }
        if scan {
            partial.extend_from_slice(&chunk);
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                if !report(&line, &mut dedup).await {
                    return;
                }
            }
            // A line over 64 KiB is scanned as it stands rather than hoarded.
            if partial.len() > 64 * 1024 && !report(&std::mem::take(&mut partial), &mut dedup).await {
                return;
            }
        }
    }
    // The last line, when it has no newline.
    if scan && !partial.is_empty() {
        report(&partial, &mut dedup).await;
    }
}
