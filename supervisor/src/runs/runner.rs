//! A run's runner: started in its envelope, watched, and started again when it dies.
//!
//! A runner that dies (a bug, the OOM killer at the run's memory limit, a kill -9) is
//! started again in a new envelope, with the helpers' backoff and budget, and its run
//! stays running: the run's state is its conversation's work, which the runner only
//! serves, and a file tool call a moment later should not have to start a new run.
//! Only a spent budget (it dies again and again) fails the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cc_host::ServiceUser;
use cc_proto::bootstrap::Bootstrap;
use cc_proto::client::PresentSecret;
use cc_proto::common::v1::SandboxBackend;
use cc_proto::helper::MAX_MESSAGE_BYTES;
use cc_proto::runner::v1::runner_client::RunnerClient;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::secret::PeerSecret;
use serde_json::json;
use tokio::sync::{oneshot, watch};
use tonic::service::interceptor::InterceptedService;

use super::{
    LiveRun, RunError, RunManager, RunState, RunnerClientWithSecret, RunnerSlot, StopRequest, answer, stop_reason,
};
use crate::backoff::{Backoff, NextStart};
use crate::convert::path_bytes;
use crate::helpers::{GroupChild, HelperKind, ProcessStart, SUPERVISOR_PEER, start_process, stop_child};

/// What every start of a run's runner is told.
pub(super) struct RunnerStart {
    /// Its roots, as the runner's bootstrap takes them (JSON).
    pub roots: String,
    pub home: String,
    pub socket: PathBuf,
}

/// A started runner.
pub(super) struct Runner {
    /// What the run owns: bubblewrap, or the runner itself when unwrapped.
    pub child: GroupChild,
    /// The runner's own pid.
    pub pid: u32,
    pub client: RunnerClientWithSecret,
    /// In its envelope (bubblewrap's exit then carries our init's status).
    pub enveloped: bool,
}

impl Runner {
    pub fn envelope_name(&self) -> &'static str {
        if self.enveloped { "native" } else { "unwrapped" }
    }
}

/// The descriptors the runner's envelope binds (`--bind-fd`), each opened with no link
/// anywhere on its path: the run's directories are the agent's to write, and we may be
/// root. bubblewrap mounts exactly these or refuses to start.
async fn open_bound(paths: &[Vec<u8>]) -> Result<Vec<std::os::fd::OwnedFd>, RunError> {
    use std::os::unix::ffi::OsStrExt;
    let paths: Vec<PathBuf> = paths.iter().map(|p| Path::new(std::ffi::OsStr::from_bytes(p)).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        paths
            .iter()
            .map(|path| {
                cc_host::beneath::open_no_links(path).map_err(|e| {
                    RunError::Precondition(format!(
                        "cannot start the run's runner: {} cannot be opened without following a link ({e})",
                        path.display()
                    ))
                })
            })
            .collect()
    })
    .await
    .map_err(|e| RunError::Internal(e.to_string()))?
}

/// A pipe whose read end carries `options` (bubblewrap's, NUL-separated) to the
/// runner's envelope as [`cc_host::OPTIONS_FD`]; written in a task of its own, since
/// they may be more than a pipe holds.
fn options_pipe(options: Vec<u8>) -> Result<std::os::fd::OwnedFd, RunError> {
    use tokio::io::AsyncWriteExt;
    let cannot = |e: std::io::Error| RunError::Internal(format!("cannot pass the runner's envelope options: {e}"));
    let (read, write) = std::io::pipe().map_err(cannot)?;
    let mut write = tokio::net::unix::pipe::Sender::from_owned_fd(std::os::fd::OwnedFd::from(write)).map_err(cannot)?;
    tokio::spawn(async move {
        let _ = write.write_all(&options).await;
    });
    Ok(read.into())
}

/// How every message about a runner that failed to start begins.
pub(super) const DID_NOT_START: &str = "the run's runner did not start";

/// How the runner ended. `enveloped`: the process we waited for is the runner's
/// bubblewrap, which exits with our init's status, and our init reports a command a
/// signal ended as 128 + the signal, as a shell does.
pub(super) fn describe_exit(status: Option<std::process::ExitStatus>, enveloped: bool) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.signal().is_some() => format!("signal {}", s.signal().unwrap_or_default()),
        Some(s) => match s.code().unwrap_or_default() {
            code @ 129..=192 if enveloped => format!("signal {}", code - 128),
            code => format!("code {code}"),
        },
        None => "status unknown".into(),
    }
}

impl RunManager {
    /// Starts the run's runner: inside its `runner` envelope where sandboxd has a
    /// native backend, else directly (as the service user under root).
    pub(super) async fn start_runner(&self, run: &LiveRun, how: &RunnerStart) -> Result<Runner, RunError> {
        let id = run.run_id.as_str();
        let RunnerStart { roots, home, socket } = how;
        let mut sandboxd = self.env.channels.sandboxd().await?;
        let request = sb::GetRunnerEnvelopeRequest {
            run_id: id.to_owned(),
            runner_program: path_bytes(&self.env.runner_program),
        };
        let asked = sandboxd.get_runner_envelope(request);
        let envelope = self.env.channels.within(HelperKind::Sandboxd, "GetRunnerEnvelope", asked).await?;
        let envelope = envelope.into_inner().envelope.unwrap_or_default();
        let enveloped = envelope.backend == SandboxBackend::Native as i32 && !envelope.argv.is_empty();
        let bound = open_bound(&envelope.bound).await?;
        let mut descriptors: Vec<_> = bound.into_iter().zip(cc_host::FIRST_BOUND_FD..).collect();
        if enveloped {
            descriptors.push((options_pipe(envelope.options)?, cc_host::OPTIONS_FD));
        }
        let (program, args) =
            if enveloped {
                let argv: Vec<String> =
                    envelope.argv.into_iter().map(String::from_utf8).collect::<Result<_, _>>().map_err(|_| {
                        RunError::Precondition("the runner's envelope has a path that is not UTF-8".into())
                    })?;
                let (program, args) =
                    argv.split_first().ok_or_else(|| RunError::Internal("an empty runner envelope".into()))?;
                (std::path::PathBuf::from(program), args.to_vec())
            } else {
                (self.env.runner_program.clone(), vec![])
            };
        let secret = PeerSecret::generate().map_err(|e| RunError::Internal(e.to_string()))?;
        let socket = socket.clone();
        let mut bootstrap = Bootstrap {
            name: "runner".into(),
            socket: socket.clone(),
            data_dir: self.env.data.root().to_owned(),
            log_format: self.env.log_format,
            peers: [(SUPERVISOR_PEER.to_owned(), secret.clone())].into(),
            // In the envelope the runner's parent is our init, and the envelope dies
            // with us (bubblewrap's --die-with-parent).
            supervisor_pid: if enveloped { 0 } else { std::process::id() },
            options: BTreeMap::from([
                ("roots".to_owned(), roots.clone()),
                ("run".to_owned(), id.to_owned()),
                ("home".to_owned(), home.clone()),
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
        // As root, the runner runs as the service user too: it holds no capability, so
        // it could not open the run's directories as root anyway.
        let user = ServiceUser::when_root();
        // The runner joins the run's cgroup before it execs, as every launch does.
        let cgroup = match run.cgroup() {
            Some(cgroup) => cgroup
                .open_procs()
                .map_err(|e| RunError::Internal(format!("cannot open the run's cgroup to join it: {e}")))?,
            None => vec![],
        };
        let start = ProcessStart { user, descriptors, cgroup };
        let mut child =
            start_process(&program, &args, &bootstrap, self.env.timeouts, "runner", start).await.map_err(|f| {
                // Its exit says more than "exited": a code, or the signal that ended it.
                let exit = if f.status.is_some() {
                    format!(" ({})", describe_exit(f.status, enveloped))
                } else {
                    String::new()
                };
                RunError::RunnerUnavailable(format!("{DID_NOT_START}: {}{exit}", f.message))
            })?;
        let child_pid = child.id().unwrap_or(0);
        let connected = if enveloped {
            cc_proto::client::connect_to_descendant(&socket, child_pid).await
        } else {
            cc_proto::client::connect_checked(&socket, Some(child_pid)).await.map(|c| (c, child_pid))
        };
        match connected {
            Ok((channel, runner_pid)) => {
                let auth = PresentSecret::new(SUPERVISOR_PEER, &secret);
                let client = RunnerClient::new(InterceptedService::new(channel, auth))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                Ok(Runner { child, pid: runner_pid, client, enveloped })
            }
            Err(e) => {
                stop_child(&mut child, self.env.timeouts.stop).await;
                cc_proto::socket::remove_socket(&socket);
                Err(RunError::RunnerUnavailable(format!("cannot reach the run's runner: {e}")))
            }
        }
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
            let status = tokio::select! {
                status = runner.child.wait() => status.ok(),
                request = &mut stop => {
                    stop_child(&mut runner.child, self.env.timeouts.stop).await;
                    return self.stopped(&id, request).await;
                }
            };
            let mut exit = describe_exit(status, runner.enveloped);
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
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_runner_killed_in_its_envelope_is_named_by_its_signal() {
        let exited = |code: i32| Some(std::process::ExitStatus::from_raw(code << 8));
        let signalled = |signal: i32| Some(std::process::ExitStatus::from_raw(signal));
        assert_eq!(describe_exit(exited(137), true), "signal 9");
        assert_eq!(describe_exit(exited(143), true), "signal 15");
        assert_eq!(describe_exit(exited(137), false), "code 137", "unwrapped, a code is a code");
        assert_eq!(describe_exit(exited(2), true), "code 2");
        assert_eq!(describe_exit(signalled(9), false), "signal 9");
        assert_eq!(describe_exit(None, true), "status unknown");
    }
}
