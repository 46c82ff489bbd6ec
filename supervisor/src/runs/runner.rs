//! A run's runner: launched in its envelope by sandboxd, watched, and launched again
//! when it dies.
//!
//! Launched like every envelope (trust rule: every process in a run's envelope is
//! sandboxd's), interactively: the helper handshake (HELLO, the bootstrap with the
//! runner's secret, READY) travels on the launch's stdio, and its end is the launch's
//! exit. The supervisor opens none of the paths the runner's envelope binds and execs
//! no bubblewrap for it.
//!
//! A runner that dies (a bug, the OOM killer at the run's memory limit, a kill -9, a
//! sandboxd that died and took its envelopes with it) is launched again, with the
//! helpers' backoff and budget, and its run stays running: the run's state is its
//! conversation's work, which the runner only serves, and a file tool call a moment
//! later should not have to start a new run. Only a spent budget (it dies again and
//! again) fails the run.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cc_proto::bootstrap::Bootstrap;
use cc_proto::client::PresentSecret;
use cc_proto::common::v1::{EnvelopeKind, SandboxBackend};
use cc_proto::helper::{HELLO_LINE, MAX_MESSAGE_BYTES, READY_LINE};
use cc_proto::runner::v1::runner_client::RunnerClient;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_interactive_request::Input;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::secret::PeerSecret;
use serde_json::json;
use tokio::sync::{oneshot, watch};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;

use super::{
    LiveRun, RunError, RunManager, RunState, RunnerClientWithSecret, RunnerSlot, StopRequest, answer, stop_reason,
};
use crate::backoff::{Backoff, NextStart};
use crate::convert::path_bytes;
use crate::helpers::SUPERVISOR_PEER;

/// What every start of a run's runner is told.
pub(super) struct RunnerStart {
    /// Its roots, as the runner's bootstrap takes them (JSON).
    pub roots: String,
    pub home: String,
    pub socket: PathBuf,
}

/// A started runner.
pub(super) struct Runner {
    /// Its launch; dropped, sandboxd kills the envelope.
    pub launch: RunnerLaunch,
    /// The runner's own pid.
    pub pid: u32,
    pub client: RunnerClientWithSecret,
    /// In its envelope (its exit then carries our init's status).
    pub enveloped: bool,
}

impl Runner {
    pub fn envelope_name(&self) -> &'static str {
        if self.enveloped { "native" } else { "unwrapped" }
    }
}

/// How every message about a runner that failed to start begins.
pub(super) const DID_NOT_START: &str = "the run's runner did not start";
/// Starts of one runner made in a row when the runner is not what failed: each waits
/// for the sandboxd that replaces a lost one. They do not count against the restart
/// budget, which is the runner's.
const START_ATTEMPTS: u32 = 3;

/// Why one start of a runner failed.
enum Attempt {
    /// Not the runner's doing: sandboxd went away during the start, taking the runner's
    /// envelope; or another process serves the run's socket (a runner whose start
    /// sandboxd lost as it bound it), which is never talked to. Start again.
    Again(String),
    Failed(RunError),
}

/// How the runner ended. `enveloped`: the exit is our init's, which reports a command
/// a signal ended as 128 + the signal, as a shell does.
pub(super) fn describe_exit(exit: &sb::Exit, enveloped: bool) -> String {
    match super::acp::exit_of(exit.code, exit.signal, enveloped) {
        (_, Some(signal)) => format!("signal {signal}"),
        (Some(code), None) => format!("code {code}"),
        (None, None) => "status unknown".into(),
    }
}

/// A runner's launch after its handshake: a task reads it to its end (the runner's
/// output goes to our log) and says how it ended. Dropped, the task is aborted, which
/// drops the call: sandboxd kills the envelope.
pub(super) struct RunnerLaunch {
    reader: tokio::task::JoinHandle<()>,
    ended: oneshot::Receiver<String>,
}

impl RunnerLaunch {
    /// How the runner ended, once it has.
    pub async fn ended(&mut self) -> String {
        (&mut self.ended).await.unwrap_or_else(|_| "its launch was dropped".into())
    }
}

impl Drop for RunnerLaunch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The launch's events, read for the handshake: stdout a line at a time, stderr (the
/// runner's log) passed on to ours.
struct LaunchOutput {
    events: tonic::Streaming<sb::LaunchInteractiveResponse>,
    backend: Option<SandboxBackend>,
    pid: Option<u32>,
    stdout: Vec<u8>,
    /// The stream ended without the runner's exit: sandboxd died or restarted.
    lost: bool,
}

impl LaunchOutput {
    fn enveloped(&self) -> bool {
        self.backend == Some(SandboxBackend::Native)
    }

    /// The next line on stdout, which must be `expected`.
    async fn expect_line(&mut self, expected: &str) -> Result<(), String> {
        let line = self.next_line().await?;
        if line == expected {
            return Ok(());
        }
        Err(format!("said {:?} instead of {expected:?}", line.chars().take(80).collect::<String>()))
    }

    async fn next_line(&mut self) -> Result<String, String> {
        loop {
            if let Some(end) = self.stdout.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.stdout.drain(..=end).collect();
                return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            // A handshake line is a word: more than this is not one.
            if self.stdout.len() > 4096 {
                return Err("wrote a line over 4 KiB instead of its handshake".into());
            }
            match self.events.next().await {
                Some(Ok(sb::LaunchInteractiveResponse { event: Some(event) })) => match event.event {
                    Some(LaunchEvent::Envelope(backend)) => self.backend = SandboxBackend::try_from(backend).ok(),
                    Some(LaunchEvent::ProcessId(pid)) => self.pid = Some(pid),
                    Some(LaunchEvent::Stdout(bytes)) => self.stdout.extend_from_slice(&bytes),
                    Some(LaunchEvent::Stderr(bytes)) => log_output(&bytes),
                    Some(LaunchEvent::Exit(exit)) => {
                        let how = describe_exit(&exit, self.enveloped());
                        return Err(format!("exited before serving its socket ({how})"));
                    }
                    Some(LaunchEvent::Violation(_)) | None => {}
                },
                Some(Ok(_)) => {}
                Some(Err(status)) => {
                    self.lost = true;
                    return Err(format!("sandboxd ended its launch: {}", status.message()));
                }
                None => {
                    self.lost = true;
                    return Err("sandboxd ended its launch without an exit".into());
                }
            }
        }
    }

    /// Reads the rest of the launch in a task of its own.
    fn read_to_end(mut self) -> RunnerLaunch {
        let (tell, ended) = oneshot::channel();
        let enveloped = self.enveloped();
        let reader = tokio::spawn(async move {
            let how = loop {
                match self.events.next().await {
                    Some(Ok(sb::LaunchInteractiveResponse { event: Some(event) })) => match event.event {
                        // Whatever it prints later goes to the log, and never meets a full channel.
                        Some(LaunchEvent::Stdout(bytes) | LaunchEvent::Stderr(bytes)) => log_output(&bytes),
                        Some(LaunchEvent::Exit(exit)) => break describe_exit(&exit, enveloped),
                        _ => {}
                    },
                    Some(Ok(_)) => {}
                    Some(Err(status)) => break format!("sandboxd ended its launch: {}", status.message()),
                    None => break "sandboxd ended its launch without an exit (it restarted)".into(),
                }
            };
            let _ = tell.send(how);
        });
        RunnerLaunch { reader, ended }
    }
}

/// The runner's own log lines, as they were when it wrote to our stderr.
fn log_output(bytes: &[u8]) {
    let _ = std::io::stderr().lock().write_all(bytes);
}

impl RunManager {
    /// Launches the run's runner through sandboxd: inside its `runner` envelope where
    /// sandboxd has a native backend, else unwrapped (as the service user under root);
    /// then the handshake on its stdio, then its socket.
    pub(super) async fn start_runner(&self, run: &LiveRun, how: &RunnerStart) -> Result<Runner, RunError> {
        let mut attempt = 1;
        loop {
            match self.try_start_runner(run, how).await {
                Ok(runner) => return Ok(runner),
                Err(Attempt::Failed(e)) => return Err(e),
                Err(Attempt::Again(why)) if attempt >= START_ATTEMPTS => {
                    return Err(RunError::RunnerUnavailable(format!("{DID_NOT_START}: {why}")));
                }
                Err(Attempt::Again(why)) => {
                    tracing::warn!(run = %run.run_id, attempt, %why, "the run's runner did not start, not by its own doing; starting it again");
                    cc_proto::socket::remove_socket(&how.socket);
                    attempt += 1;
                }
            }
        }
    }

    /// One start: the launch, the handshake, the socket.
    async fn try_start_runner(&self, run: &LiveRun, how: &RunnerStart) -> Result<Runner, Attempt> {
        let launch = sb::LaunchRequest {
            run_id: run.run_id.as_str().to_owned(),
            kind: EnvelopeKind::Runner as i32,
            argv: vec![path_bytes(&self.env.runner_program)],
            ..Default::default()
        };
        let (events, input) = self.launch_interactive(run, launch, "runner").await.map_err(Attempt::Failed)?;
        let mut output = LaunchOutput { events, backend: None, pid: None, stdout: Vec::new(), lost: false };
        let secret = PeerSecret::generate().map_err(|e| Attempt::Failed(RunError::Internal(e.to_string())))?;
        let ready = self.env.restart.ready_timeout();
        let handshake = async {
            // The bootstrap (and its secret) is written only once the runner has said
            // it is non-dumpable.
            output.expect_line(HELLO_LINE).await?;
            let bootstrap = self.runner_bootstrap(run, how, &secret, output.enveloped());
            let bootstrap = Input::Stdin(bootstrap.to_json_line());
            for message in [bootstrap, Input::CloseStdin(true)] {
                // A runner that exits at once: the read below says so.
                let _ = input.send(sb::LaunchInteractiveRequest { input: Some(message) }).await;
            }
            output.expect_line(READY_LINE).await
        };
        let unavailable = |why: String| Attempt::Failed(RunError::RunnerUnavailable(format!("{DID_NOT_START}: {why}")));
        match tokio::time::timeout(ready, handshake).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) if output.lost => return Err(Attempt::Again(why)),
            Ok(Err(why)) => return Err(unavailable(why)),
            Err(_) => return Err(unavailable(format!("not serving after {ready:?}"))),
        }
        let (enveloped, pid) = (output.enveloped(), output.pid);
        let launch = output.read_to_end();
        let pid = pid.ok_or_else(|| unavailable("sandboxd did not say which process it started".into()))?;
        let connected = if enveloped {
            cc_proto::client::connect_to_descendant(&how.socket, pid).await
        } else {
            cc_proto::client::connect_checked(&how.socket, Some(pid)).await.map(|c| (c, pid))
        };
        match connected {
            Ok((channel, runner_pid)) => {
                let auth = PresentSecret::new(SUPERVISOR_PEER, &secret);
                let client = RunnerClient::new(InterceptedService::new(channel, auth))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                Ok(Runner { launch, pid: runner_pid, client, enveloped })
            }
            Err(e) => {
                drop(launch);
                cc_proto::socket::remove_socket(&how.socket);
                let why = format!("cannot reach the run's runner: {e}");
                match e {
                    cc_proto::client::ConnectError::WrongPeer { .. } => Err(Attempt::Again(why)),
                    _ => Err(Attempt::Failed(RunError::RunnerUnavailable(why))),
                }
            }
        }
    }

    /// What the runner is told on its stdin.
    fn runner_bootstrap(&self, run: &LiveRun, how: &RunnerStart, secret: &PeerSecret, enveloped: bool) -> Bootstrap {
        let id = run.run_id.as_str();
        let mut bootstrap = Bootstrap {
            name: "runner".into(),
            socket: how.socket.clone(),
            data_dir: self.env.data.root().to_owned(),
            log_format: self.env.log_format,
            peers: [(SUPERVISOR_PEER.to_owned(), secret.clone())].into(),
            // Its parent is our init in the envelope, sandboxd unwrapped; either dies
            // with us (bubblewrap's --die-with-parent, sandboxd's own death signal).
            supervisor_pid: 0,
            options: BTreeMap::from([
                ("roots".to_owned(), how.roots.clone()),
                ("run".to_owned(), id.to_owned()),
                ("home".to_owned(), how.home.clone()),
            ]),
            calls: Default::default(),
        };
        if let Ok(filter) = std::env::var("CC_LOG") {
            bootstrap.options.insert("log".to_owned(), filter);
        }
        // web_fetch's way out: the run's HTTP proxy socket, as the envelope binds it
        // or, unwrapped, where the gateway serves it. A run with its network off has none.
        if run.record.network {
            let proxy = if enveloped {
                super::egress::http_proxy_inside()
            } else {
                self.env.data.gateway_run_dir(id).join(super::egress::HTTP_PROXY_SOCKET)
            };
            bootstrap.options.insert("egress_proxy".to_owned(), proxy.to_string_lossy().into_owned());
        }
        bootstrap
    }

    /// Owns the runner until the run ends: a stop ends the run; an exit starts the
    /// runner again after the backoff, or fails the run once the budget is spent.
    pub(super) async fn watch(
        self: Arc<Self>,
        live: Arc<LiveRun>,
        mut runner: Runner,
        how: RunnerStart,
        slot: watch::Sender<RunnerSlot>,
        mut stop: oneshot::Receiver<StopRequest>,
    ) {
        let id = live.run_id.clone();
        let subject = format!("run:{id}");
        let mut backoff = Backoff::new(self.env.restart.clone());
        let mut since = Instant::now();
        loop {
            let mut exit = tokio::select! {
                exit = runner.launch.ended() => exit,
                request = &mut stop => {
                    // Dropped, its launch ends: sandboxd kills the envelope.
                    drop(runner);
                    return self.stopped(&id, request).await;
                }
            };
            let mut ran_for = since.elapsed();
            // Until a runner serves again, or the run ends.
            loop {
                let delay = match backoff.on_exit(ran_for) {
                    NextStart::After(delay) => delay,
                    NextStart::GiveUp => {
                        let budget = self.env.restart.budget;
                        let why = format!(
                            "its runner kept dying: it exited ({exit}) with its restart budget ({budget}) spent"
                        );
                        let _ = slot.send(RunnerSlot::Failed { why: why.clone(), ending: RunState::Failed });
                        self.finish(&id, RunState::Failed, &why).await;
                        return;
                    }
                };
                let _ = slot.send(RunnerSlot::Restarting);
                cc_proto::socket::remove_socket(&how.socket);
                let payload = json!({ "exit": exit, "restart_in_ms": delay.as_millis() as u64 });
                self.env.events.record("runner_exited", &subject, payload);
                let started = tokio::select! {
                    started = self.start_after(&live, &how, delay) => started,
                    request = &mut stop => return self.stopped(&id, request).await,
                };
                match started {
                    Ok(started) => {
                        runner = started;
                        since = Instant::now();
                        let (pid, envelope) = (runner.pid, runner.envelope_name());
                        let _ = slot.send(RunnerSlot::Ready { client: Box::new(runner.client.clone()), pid });
                        let payload = json!({ "runner_pid": pid, "runner_envelope": envelope, "after": exit });
                        self.env.events.record("runner_restarted", &subject, payload);
                        break;
                    }
                    Err(e) => {
                        exit = format!("did not start: {e}");
                        ran_for = Duration::ZERO;
                    }
                }
            }
        }
    }

    async fn start_after(&self, live: &LiveRun, how: &RunnerStart, delay: Duration) -> Result<Runner, RunError> {
        tokio::time::sleep(delay).await;
        self.start_runner(live, how).await
    }

    /// The run ends stopped, as `request` asked (or as the supervisor's end did).
    async fn stopped(&self, id: &super::RunId, request: Result<StopRequest, oneshot::error::RecvError>) {
        let (reason, done) = stop_reason(request);
        self.finish(id, RunState::Stopped, &reason).await;
        answer(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_killed_in_its_envelope_is_named_by_its_signal() {
        let exited = |code: i32| sb::Exit { code: Some(code), ..Default::default() };
        let signalled = |signal: i32| sb::Exit { signal: Some(signal), ..Default::default() };
        assert_eq!(describe_exit(&exited(137), true), "signal 9");
        assert_eq!(describe_exit(&exited(143), true), "signal 15");
        assert_eq!(describe_exit(&exited(137), false), "code 137", "unwrapped, a code is a code");
        assert_eq!(describe_exit(&exited(2), true), "code 2");
        assert_eq!(describe_exit(&signalled(9), false), "signal 9");
        assert_eq!(describe_exit(&sb::Exit::default(), true), "status unknown");
    }
}
