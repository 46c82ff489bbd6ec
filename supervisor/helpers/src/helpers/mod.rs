//! Spawning and supervising the helper processes.
//!
//! One task per helper owns its child process and is the only code that starts or
//! stops it. The task waits on the child's exit (no polling), records what happened,
//! and starts it again after the backoff; requests (restart, stop) reach it over a
//! channel. Restarting one helper therefore never touches another.

mod process;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cc_proto::helper::unix_ms;
use cc_proto::logging::LogFormat;
use cc_proto::secret::PeerSecret;
use cc_proto::supervisor::v1::HelperState;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use process::{launch, stop_child};

use crate::backoff::{Backoff, NextStart};
use crate::events::EventLog;
use cc_config::RestartPolicy;

pub use cc_proto::helper::HelperKind;

/// How long a helper-protocol process may take to say READY, and the grace it gets
/// between SIGTERM and SIGKILL when it is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessTimeouts {
    pub ready: Duration,
    pub stop: Duration,
}

/// The name the supervisor uses as a peer on helper sockets.
pub const SUPERVISOR_PEER: &str = "supervisor";

/// How to start one helper.
#[derive(Debug, Clone)]
pub struct HelperLaunch {
    pub kind: HelperKind,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub socket: PathBuf,
    /// Passed in the bootstrap's `options`.
    pub options: std::collections::BTreeMap<String, String>,
    /// Peers besides the supervisor that may call it, each with its secret (the
    /// broker: the gateway). Made once per supervisor, so a restart of either side
    /// keeps them matched.
    pub peers: std::collections::BTreeMap<String, PeerSecret>,
    /// The secret it presents to each peer it calls (the gateway: the broker's).
    pub calls: std::collections::BTreeMap<String, PeerSecret>,
}

/// What the supervisor knows about a helper right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub pid: Option<u32>,
    pub state: HelperState,
    pub restarts: u32,
    pub last_exit: Option<ExitRecord>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub time_unix_ms: i64,
    /// Why the supervisor killed it, when it did.
    pub killed_because: Option<&'static str>,
}

impl ExitRecord {
    fn from_status(status: Option<std::process::ExitStatus>, killed_because: Option<&'static str>) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Self {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            time_unix_ms: unix_ms(SystemTime::now()),
            killed_because,
        }
    }
}

/// Why a helper that missed its health checks was killed, as `ccctl helpers` says it.
pub const UNRESPONSIVE: &str = "missed its health checks";

#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("unknown helper {0:?} (known: sandboxd, broker, gateway)")]
    Unknown(String),
    #[error("helper {name} did not come back: {reason}")]
    StartFailed { name: &'static str, reason: String },
    #[error("the supervisor is shutting down")]
    ShuttingDown,
}

enum Control {
    Restart(oneshot::Sender<Result<u32, String>>),
    Stop(oneshot::Sender<()>),
    /// Kill process `pid`, which stopped answering, and start it again as after an
    /// exit (with the backoff and the budget). Ignored when `pid` is no longer serving.
    KillUnresponsive {
        pid: u32,
    },
}

/// Shared by every helper's supervision task.
pub struct SuperviseEnv {
    pub events: Arc<EventLog>,
    pub policy: RestartPolicy,
    pub data_dir: PathBuf,
    pub log_format: LogFormat,
}

/// What a helper process must be told before it serves calls (containerd's model: the
/// supervisor is the source of truth, and a helper that starts again is told again).
/// Called with the new process's pid, it tells it over a channel to that pid.
pub type Reconcile = Arc<dyn Fn(u32) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// A helper's reconciliation, and the process that became ready before there was one
/// (helpers start before the run manager that sets it exists).
#[derive(Default)]
struct ReconcileSlot {
    reconcile: Option<Reconcile>,
    missed: Option<u32>,
}

pub struct Helper {
    launch: HelperLaunch,
    reconcile: Mutex<ReconcileSlot>,
    /// New for every process: a secret learned from one process dies with it.
    secret: Mutex<PeerSecret>,
    snapshot: Mutex<Snapshot>,
    /// The last answer to a status check, by any caller: see [`Helper::recent_answer`].
    last_answer: Mutex<Option<Answer>>,
    control: mpsc::Sender<Control>,
    changed: watch::Sender<u64>,
}

/// What a helper process said of itself when it was last asked, and when.
#[derive(Clone)]
pub struct Answer {
    pub pid: u32,
    pub at: Instant,
    pub at_unix_ms: i64,
    pub status: cc_proto::common::v1::HelperStatus,
}

impl Helper {
    pub fn kind(&self) -> HelperKind {
        self.launch.kind
    }
    pub fn name(&self) -> &'static str {
        self.launch.kind.name()
    }
    pub fn socket(&self) -> &std::path::Path {
        &self.launch.socket
    }
    /// The secret the supervisor presents on the current process's socket.
    pub fn secret(&self) -> PeerSecret {
        self.secret.lock().map(|s| s.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.lock().map(|s| s.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Keeps what process `pid` answered to a status check just now, and returns it.
    pub fn remember_answer(&self, pid: u32, status: cc_proto::common::v1::HelperStatus) -> Answer {
        let answer = Answer { pid, at: Instant::now(), at_unix_ms: unix_ms(SystemTime::now()), status };
        match self.last_answer.lock() {
            Ok(mut last) => *last = Some(answer.clone()),
            Err(p) => *p.into_inner() = Some(answer.clone()),
        }
        answer
    }

    /// Process `pid`'s last answer, if it came within `max_age`. What a helper says of
    /// itself (version, pid, hardening, start) is fixed for its process's life, so a
    /// recent answer is as good as a new one, and costs no round trip to a helper that
    /// a busy run may be keeping slow.
    pub fn recent_answer(&self, pid: u32, max_age: Duration) -> Option<Answer> {
        let last = self.last_answer.lock().map(|a| a.clone()).unwrap_or_else(|p| p.into_inner().clone())?;
        (last.pid == pid && last.at.elapsed() < max_age).then_some(last)
    }

    /// Resolves at the helper's next change of state (any helper's, in fact: they share
    /// one signal); callers look at [`Helper::snapshot`] again.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The pid of the process serving now, or of the one serving next when the helper
    /// is starting or waiting out its backoff, waited for at most `limit`; `None` when
    /// it failed, stopped, or did not come up in time.
    pub async fn serving_pid(&self, limit: Duration) -> Option<u32> {
        self.serving_pid_except(None, limit).await
    }

    /// Like [`Helper::serving_pid`], but a process `not` (one that a call found gone)
    /// does not count: waits for the one that replaces it.
    pub async fn serving_pid_except(&self, not: Option<u32>, limit: Duration) -> Option<u32> {
        if let Some(pid) = self.snapshot().pid.filter(|p| Some(*p) != not) {
            return Some(pid);
        }
        // Subscribed before the loop's first look, so that no change is missed.
        let mut changed = self.changed.subscribe();
        let serving = async {
            loop {
                let now = self.snapshot();
                match (now.pid.filter(|p| Some(*p) != not), now.state) {
                    (Some(pid), _) => return Some(pid),
                    (None, HelperState::Failed | HelperState::Stopped) => return None,
                    _ => {}
                }
                changed.changed().await.ok()?;
            }
        };
        tokio::time::timeout(limit, serving).await.ok().flatten()
    }

    fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        match self.snapshot.lock() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
        self.changed.send_modify(|generation| *generation += 1);
    }

    fn subject(&self) -> String {
        format!("helper:{}", self.name())
    }

    /// Sets what each new process of this helper is told before it counts as serving. A
    /// process that became ready before this is told now (the broker's first process
    /// must still revoke what a crashed supervisor's runs held).
    pub fn set_reconcile(&self, reconcile: Reconcile) {
        let missed = match self.reconcile.lock() {
            Ok(mut slot) => {
                slot.reconcile = Some(reconcile.clone());
                slot.missed.take()
            }
            Err(_) => None,
        };
        if let Some(pid) = missed {
            tokio::spawn(reconcile(pid));
        }
    }

    /// The reconciliation for process `pid`, which is ready; with none set yet, `pid`
    /// is remembered for [`Helper::set_reconcile`]. One lock, so no process is missed.
    fn reconcile_for(&self, pid: u32) -> Option<Reconcile> {
        let mut slot = self.reconcile.lock().ok()?;
        if slot.reconcile.is_none() {
            slot.missed = Some(pid);
        }
        slot.reconcile.clone()
    }
}

/// Every helper, each with its supervision task.
pub struct HelperSet {
    helpers: Vec<Arc<Helper>>,
    changed: watch::Receiver<u64>,
}

impl HelperSet {
    /// Starts supervising every helper in `launches`, in order. Returns at once; use
    /// [`HelperSet::wait_all_running`] to wait for them.
    pub fn start(launches: Vec<HelperLaunch>, env: Arc<SuperviseEnv>) -> Result<Self, cc_proto::secret::SecretError> {
        let (changed_tx, changed) = watch::channel(0u64);
        let mut helpers = Vec::with_capacity(launches.len());
        for launch in launches {
            let (control, control_rx) = mpsc::channel(8);
            let helper = Arc::new(Helper {
                launch,
                reconcile: Mutex::default(),
                secret: Mutex::new(PeerSecret::generate()?),
                snapshot: Mutex::new(Snapshot {
                    pid: None,
                    state: HelperState::Starting,
                    restarts: 0,
                    last_exit: None,
                }),
                last_answer: Mutex::new(None),
                control,
                changed: changed_tx.clone(),
            });
            tokio::spawn(supervise(helper.clone(), env.clone(), control_rx));
            helpers.push(helper);
        }
        Ok(Self { helpers, changed })
    }

    pub fn helpers(&self) -> &[Arc<Helper>] {
        &self.helpers
    }

    /// The helper named `name` (a client's word for it).
    pub fn get(&self, name: &str) -> Result<&Arc<Helper>, HelperError> {
        let kind = HelperKind::from_name(name).ok_or_else(|| HelperError::Unknown(name.chars().take(64).collect()))?;
        Ok(self.of(kind))
    }

    /// The helper of `kind`: every kind is started, so it is always there.
    pub fn of(&self, kind: HelperKind) -> &Arc<Helper> {
        self.helpers.iter().find(|h| h.kind() == kind).expect("every helper kind is started")
    }

    /// Resolves once every helper is running at the same time.
    pub async fn wait_all_running(&self) {
        let mut changed = self.changed.clone();
        loop {
            if self.helpers.iter().all(|h| h.snapshot().state == HelperState::Running) {
                return;
            }
            if changed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Stops `name` and starts it again at once, whatever its state (a failed helper
    /// gets a fresh budget). Returns the new pid.
    pub async fn restart(&self, name: &str) -> Result<u32, HelperError> {
        let helper = self.get(name)?;
        let (reply, answer) = oneshot::channel();
        helper.control.send(Control::Restart(reply)).await.map_err(|_| HelperError::ShuttingDown)?;
        match answer.await {
            Ok(Ok(pid)) => Ok(pid),
            Ok(Err(reason)) => Err(HelperError::StartFailed { name: helper.name(), reason }),
            Err(_) => Err(HelperError::ShuttingDown),
        }
    }

    /// Kills the helper of `kind` if its process is still `pid`: it missed its health
    /// checks. It is restarted as after an exit.
    pub async fn kill_unresponsive(&self, kind: HelperKind, pid: u32) {
        let _ = self.of(kind).control.send(Control::KillUnresponsive { pid }).await;
    }

    /// Stops every helper, last started first, all within `within`. A helper still
    /// running at the deadline is killed when its supervision task is dropped.
    pub async fn stop_all(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        for helper in self.helpers.iter().rev() {
            let (reply, done) = oneshot::channel();
            let stop = async {
                if helper.control.send(Control::Stop(reply)).await.is_ok() {
                    let _ = done.await;
                }
            };
            if tokio::time::timeout_at(deadline, stop).await.is_err() {
                tracing::warn!(helper = helper.name(), "not stopped within the shutdown deadline");
            }
        }
    }
}

/// Why a helper is being started.
#[derive(Clone, Copy)]
enum StartReason {
    First,
    AfterExit,
    Requested,
}

/// What interrupted a running helper.
enum Woke {
    Exited(Option<std::process::ExitStatus>),
    Unresponsive,
    Control(Option<Control>),
}

/// The next restart or stop request; kill requests are for a process that is no
/// longer serving, and are dropped.
async fn next_request(control: &mut mpsc::Receiver<Control>) -> Option<Control> {
    loop {
        match control.recv().await {
            Some(Control::KillUnresponsive { .. }) => continue,
            other => return other,
        }
    }
}

async fn supervise(helper: Arc<Helper>, env: Arc<SuperviseEnv>, mut control: mpsc::Receiver<Control>) {
    let mut backoff = Backoff::new(env.policy.clone());
    let mut reason = StartReason::First;
    let mut waiting_restart: Option<oneshot::Sender<Result<u32, String>>> = None;
    let mut previous_pid: Option<u32> = None;
    let subject = helper.subject();
    loop {
        helper.update(|s| {
            s.state = HelperState::Starting;
            s.pid = None;
        });
        let mut serving_since = None;
        let (pid, status, error, killed_because) = match launch(&helper, &env).await {
            Ok(mut child) => {
                let started = *serving_since.insert(Instant::now());
                let pid = child.id().unwrap_or(0);
                // Told what it must know (sandboxd: every live run) before it counts as
                // serving: until then, calls that need it wait for it.
                if let Some(reconcile) = helper.reconcile_for(pid) {
                    let _ = tokio::time::timeout(env.policy.ready_timeout(), reconcile(pid)).await;
                }
                let restarts = helper.snapshot().restarts + u32::from(!matches!(reason, StartReason::First));
                helper.update(|s| {
                    s.state = HelperState::Running;
                    s.pid = Some(pid);
                    s.restarts = restarts;
                });
                match reason {
                    StartReason::First => env.events.record("helper_started", &subject, json!({ "pid": pid })),
                    StartReason::AfterExit | StartReason::Requested => env.events.record(
                        "helper_restarted",
                        &subject,
                        json!({
                            "pid": pid,
                            "previous_pid": previous_pid,
                            "reason": if matches!(reason, StartReason::Requested) { "requested" } else { "exited" },
                            "restarts": restarts,
                        }),
                    ),
                }
                if let Some(reply) = waiting_restart.take() {
                    let _ = reply.send(Ok(pid));
                }
                let woke = loop {
                    tokio::select! {
                        status = child.wait() => break Woke::Exited(status.ok()),
                        request = control.recv() => match request {
                            Some(Control::KillUnresponsive { pid: target }) if target == pid => break Woke::Unresponsive,
                            Some(Control::KillUnresponsive { .. }) => continue,
                            request => break Woke::Control(request),
                        },
                    }
                };
                match woke {
                    Woke::Control(request) => {
                        let status = stop_child(&mut child, env.policy.stop_timeout()).await;
                        record_exit(&helper, &env, pid, status, started.elapsed(), None, None);
                        previous_pid = Some(pid);
                        match take_request(&helper, request) {
                            Some(reply) => {
                                waiting_restart = Some(reply);
                                backoff.reset();
                                reason = StartReason::Requested;
                                continue;
                            }
                            None => return,
                        }
                    }
                    Woke::Exited(status) => (Some(pid), status, None, None),
                    // A stopped process would not see SIGTERM: it is killed outright.
                    Woke::Unresponsive => {
                        child.signal_group(nix::sys::signal::Signal::SIGKILL);
                        let status = child.wait().await.ok();
                        (Some(pid), status, None, Some(UNRESPONSIVE))
                    }
                }
            }
            Err(failure) => {
                if let Some(reply) = waiting_restart.take() {
                    let _ = reply.send(Err(failure.message.clone()));
                }
                (failure.pid, failure.status, Some(failure.message), None)
            }
        };
        let ran_for = serving_since.map_or(Duration::ZERO, |t| t.elapsed());
        record_exit(&helper, &env, pid.unwrap_or(0), status, ran_for, error, killed_because);
        previous_pid = pid;

        let request = match backoff.on_exit(ran_for) {
            NextStart::After(delay) => {
                helper.update(|s| s.state = HelperState::Backoff);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {
                        reason = StartReason::AfterExit;
                        continue;
                    }
                    request = next_request(&mut control) => request,
                }
            }
            NextStart::GiveUp => {
                helper.update(|s| s.state = HelperState::Failed);
                let restarts = helper.snapshot().restarts;
                env.events.record(
                    "helper_failed",
                    &subject,
                    json!({ "restarts": restarts, "reason": "exited too often in a row; restart it with `ccctl helpers restart`" }),
                );
                next_request(&mut control).await
            }
        };
        match take_request(&helper, request) {
            Some(reply) => {
                waiting_restart = Some(reply);
                backoff.reset();
                reason = StartReason::Requested;
            }
            None => return,
        }
    }
}

/// A request that arrived while the helper was not running (or was just stopped for it):
/// a restart hands back its reply channel; a stop (or the supervisor going away) marks
/// the helper stopped and answers, and the caller's task ends.
fn take_request(helper: &Helper, request: Option<Control>) -> Option<oneshot::Sender<Result<u32, String>>> {
    match request {
        Some(Control::Restart(reply)) => Some(reply),
        Some(Control::Stop(reply)) => {
            helper.update(|s| s.state = HelperState::Stopped);
            let _ = reply.send(());
            None
        }
        // Never passed here (see next_request); a stop is the safe reading.
        Some(Control::KillUnresponsive { .. }) | None => {
            helper.update(|s| s.state = HelperState::Stopped);
            None
        }
    }
}

fn record_exit(
    helper: &Helper,
    env: &SuperviseEnv,
    pid: u32,
    status: Option<std::process::ExitStatus>,
    ran_for: Duration,
    error: Option<String>,
    killed_because: Option<&'static str>,
) {
    let exit = ExitRecord::from_status(status, killed_because);
    // A helper that died cannot remove its socket; a stale one would only mislead.
    cc_proto::socket::remove_socket(&helper.launch.socket);
    helper.update(|s| {
        s.pid = None;
        s.last_exit = Some(exit);
    });
    let mut payload = json!({
        "pid": pid,
        "code": exit.code,
        "signal": exit.signal,
        "ran_ms": ran_for.as_millis() as u64,
    });
    if let Some(error) = error {
        payload["error"] = error.into();
    }
    if let Some(why) = killed_because {
        payload["killed_because"] = why.into();
    }
    env.events.record("helper_exited", &helper.subject(), payload);
}

/// At the RPC edge: which refusal a client can tell apart.
impl From<HelperError> for tonic::Status {
    fn from(e: HelperError) -> tonic::Status {
        let message = e.to_string();
        match e {
            HelperError::Unknown(name) => cc_proto::reasons::refusal(
                tonic::Code::InvalidArgument,
                message,
                cc_proto::reasons::HELPER_NOT_FOUND,
                &[("name", name)],
            ),
            HelperError::StartFailed { name, .. } => cc_proto::reasons::helper_unavailable(message, name),
            HelperError::ShuttingDown => tonic::Status::unavailable(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper(state: HelperState) -> (Arc<Helper>, mpsc::Receiver<Control>) {
        let (control, control_rx) = mpsc::channel(1);
        let (changed, _) = watch::channel(0u64);
        let launch = HelperLaunch {
            kind: HelperKind::Sandboxd,
            program: PathBuf::from("cc-sandboxd"),
            args: vec![],
            socket: PathBuf::from("sandboxd.sock"),
            options: Default::default(),
            peers: Default::default(),
            calls: Default::default(),
        };
        let snapshot = Snapshot { pid: None, state, restarts: 0, last_exit: None };
        let secret = Mutex::new(PeerSecret::generate().unwrap());
        let reconcile = Mutex::default();
        (
            Arc::new(Helper {
                launch,
                reconcile,
                secret,
                snapshot: Mutex::new(snapshot),
                last_answer: Mutex::new(None),
                control,
                changed,
            }),
            control_rx,
        )
    }

    #[test]
    fn a_remembered_answer_stands_only_for_its_own_process_and_only_while_recent() {
        let (helper, _control) = helper(HelperState::Running);
        assert!(helper.recent_answer(10, Duration::from_secs(60)).is_none(), "nothing asked yet");
        let status = cc_proto::common::v1::HelperStatus { pid: 10, ..Default::default() };
        helper.remember_answer(10, status);
        assert_eq!(helper.recent_answer(10, Duration::from_secs(60)).map(|a| a.status.pid), Some(10));
        assert!(helper.recent_answer(11, Duration::from_secs(60)).is_none(), "a new process must answer itself");
        assert!(helper.recent_answer(10, Duration::ZERO).is_none(), "an old answer is asked again");
    }

    #[tokio::test]
    async fn a_call_waits_for_a_starting_helper_and_not_for_a_failed_one() {
        let (starting, _control) = helper(HelperState::Starting);
        let waiter = tokio::spawn({
            let starting = starting.clone();
            async move { starting.serving_pid(Duration::from_secs(10)).await }
        });
        starting.update(|s| {
            s.state = HelperState::Running;
            s.pid = Some(42);
        });
        assert_eq!(waiter.await.unwrap(), Some(42), "served as soon as it serves");

        let (failed, _control) = helper(HelperState::Failed);
        let started = Instant::now();
        assert_eq!(failed.serving_pid(Duration::from_secs(10)).await, None);
        assert!(started.elapsed() < Duration::from_secs(5), "a failed helper is not waited for");

        let (never, _control) = helper(HelperState::Backoff);
        assert_eq!(never.serving_pid(Duration::from_millis(20)).await, None, "the wait has a deadline");
    }

    #[tokio::test]
    async fn a_process_ready_before_its_reconciliation_is_set_is_told_when_it_is() {
        let (helper, _control) = helper(HelperState::Starting);
        assert!(helper.reconcile_for(42).is_none(), "nothing set yet: the pid is remembered");
        let (told, mut heard) = mpsc::channel(1);
        let reconcile: Reconcile = Arc::new(move |pid| {
            let told = told.clone();
            Box::pin(async move {
                let _ = told.send(pid).await;
            })
        });
        helper.set_reconcile(reconcile);
        assert_eq!(heard.recv().await, Some(42), "the process that was missed is told");
        assert!(helper.reconcile_for(43).is_some(), "a later process gets it before it serves");
    }
}
