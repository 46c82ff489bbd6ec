//! A launch's report to its caller: which envelope it runs in, its output as it
//! comes (an envelope's stderr also scanned for what the envelope refused), its
//! exit; and, for bubblewrap, the envelope for the run's next launch, made once the
//! exit is queued.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// It was handed to an envelope made ahead.
    pub warm: bool,
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
    /// When the launch was asked for, and when its process started.
    pub arrived: Instant,
    pub started: Instant,
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
        let Process { mut child, group, terminal, warm } = process;
        let native = self.envelope == SandboxBackend::Native;
        for event in [Event::Envelope(self.envelope as i32), Event::ProcessId(group)] {
            let _ = tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await;
        }
        let stderr_pipe = if native { Pipe::EnvelopeStderr } else { Pipe::Stderr };
        let stdout: Option<(Box<dyn AsyncRead + Unpin + Send>, usize)> = match terminal {
            Some(terminal) => Some((Box::new(terminal), TERMINAL_CHUNK)),
            None => child.stdout.take().map(|out| (Box::new(out) as Box<dyn AsyncRead + Unpin + Send>, PIPE_CHUNK)),
        };
        let stderr = child.stderr.take();
        let output = tokio::spawn(forward(stdout, stderr, stderr_pipe, tx.clone()));
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
        let exited = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(1), output).await;
        let run_id = self.run_id;
        runs.remove(&run_id, group);
        if let Some(denials) = denials {
            denials.abort();
        }
        use std::os::unix::process::ExitStatusExt;
        let timings = pb::LaunchTimings {
            prepare_micros: cc_proto::time::micros(self.started - self.arrived),
            run_micros: cc_proto::time::micros(exited - self.started),
            report_micros: cc_proto::time::micros(exited.elapsed()),
            warm_envelope: warm,
        };
        let exit = pb::Exit {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out,
            timings: Some(timings),
        };
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

/// Forwards a launch's stdout and stderr as chunks, in one task, stdout read first
/// whenever both have output: a command that writes a line to stdout and then one to
/// stderr is reported in that order, as a terminal would show it (two tasks raced,
/// and on a loaded machine the stderr line could overtake). An envelope's stderr
/// lines are scanned for violations too.
async fn forward(
    stdout: Option<(impl AsyncRead + Unpin, usize)>,
    stderr: Option<impl AsyncRead + Unpin>,
    stderr_pipe: Pipe,
    tx: Sender,
) {
    let (mut out, out_chunk) = match stdout {
        Some((reader, chunk)) => (Some(reader), chunk),
        None => (None, PIPE_CHUNK),
    };
    let mut err = stderr;
    let mut out_side = Side::new(Pipe::Stdout, out_chunk);
    let mut err_side = Side::new(stderr_pipe, PIPE_CHUNK);
    loop {
        let (side, read) = tokio::select! {
            biased;
            read = read_some(&mut out, &mut out_side.buffer), if out.is_some() => (&mut out_side, read),
            read = read_some(&mut err, &mut err_side.buffer), if err.is_some() => (&mut err_side, read),
            else => break,
        };
        let open = match read {
            Some(n) => side.pass(n, &tx).await,
            None => {
                side.finish(&tx).await;
                if side.which == Pipe::Stdout {
                    out = None
                } else {
                    err = None
                }
                continue;
            }
        };
        if !open {
            return;
        }
    }
}

/// Reads what `pipe` has; None at its end (or on an error, which ends it too).
async fn read_some(pipe: &mut Option<impl AsyncRead + Unpin>, buffer: &mut [u8]) -> Option<usize> {
    let pipe = pipe.as_mut()?;
    match pipe.read(buffer).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// One pipe's forwarding state: its buffer and, for an envelope's stderr, the line
/// being scanned and the violations already reported.
struct Side {
    which: Pipe,
    buffer: Vec<u8>,
    partial: Vec<u8>,
    dedup: Deduplicator,
}

impl Side {
    fn new(which: Pipe, chunk: usize) -> Self {
        Self { which, buffer: vec![0u8; chunk], partial: Vec::new(), dedup: Deduplicator::new(MAX_VIOLATIONS) }
    }

    /// Sends the `n` bytes just read; false once the client is gone.
    async fn pass(&mut self, n: usize, tx: &Sender) -> bool {
        let chunk = self.buffer[..n].to_vec();
        if self.which == Pipe::EnvelopeStderr {
            self.partial.extend_from_slice(&chunk);
        }
        let event = if self.which == Pipe::Stdout { Event::Stdout(chunk) } else { Event::Stderr(chunk) };
        if tx.send(Ok(pb::LaunchResponse { event: Some(event) })).await.is_err() {
            return false;
        }
        if self.which != Pipe::EnvelopeStderr {
            return true;
        }
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            if !self.report(&line, tx).await {
                return false;
            }
        }
        // A line over 64 KiB is scanned as it stands rather than hoarded.
        if self.partial.len() > 64 * 1024 {
            let line = std::mem::take(&mut self.partial);
            return self.report(&line, tx).await;
        }
        true
    }

    /// Scans the last line, when it has no newline.
    async fn finish(&mut self, tx: &Sender) {
        if self.which == Pipe::EnvelopeStderr && !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.report(&line, tx).await;
        }
    }

    /// Reports the line's violation, if it is one not yet reported; false once the
    /// client is gone.
    async fn report(&mut self, line: &[u8], tx: &Sender) -> bool {
        match scan_line(&String::from_utf8_lossy(line)) {
            Some(v) if self.dedup.admit(&v) => {
                tx.send(Ok(pb::LaunchResponse { event: Some(Event::Violation(v)) })).await.is_ok()
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `forward` sends for a command's stdout and stderr, both already written.
    async fn forwarded(stdout: &'static [u8], stderr: &'static [u8], stderr_pipe: Pipe) -> Vec<Event> {
        let (tx, mut rx) = mpsc::channel(64);
        forward(Some((stdout, PIPE_CHUNK)), Some(stderr), stderr_pipe, tx).await;
        let mut events = Vec::new();
        while let Ok(Ok(response)) = rx.try_recv() {
            events.extend(response.event);
        }
        events
    }

    #[tokio::test]
    async fn stdout_written_before_stderr_is_forwarded_first() {
        // README command 1's shape: `cat` prints, then the shell's own error. Both
        // pipes hold their line when the forwarder looks; two tasks raced here.
        for _ in 0..100 {
            let events = forwarded(b"works\n", b"sh: 1: cannot create x: Directory nonexistent\n", Pipe::Stderr).await;
            assert!(matches!(&events[..], [Event::Stdout(out), Event::Stderr(_)] if out == b"works\n"), "{events:?}");
        }
    }

    #[tokio::test]
    async fn an_envelope_stderr_is_scanned_for_violations_and_a_last_line_without_newline_too() {
        let text = b"cat: /etc/shadow: Permission denied\ntouch: cannot touch '/usr/x': Read-only file system";
        let events = forwarded(b"", text, Pipe::EnvelopeStderr).await;
        let stderr: Vec<u8> = events
            .iter()
            .filter_map(|e| if let Event::Stderr(b) = e { Some(b.clone()) } else { None })
            .flatten()
            .collect();
        assert_eq!(stderr, text, "the stderr is forwarded whole");
        let attempted: Vec<&str> = events
            .iter()
            .filter_map(|e| if let Event::Violation(v) = e { Some(v.attempted.as_str()) } else { None })
            .collect();
        assert_eq!(attempted, ["/etc/shadow", "/usr/x"], "{events:?}");
    }
}
