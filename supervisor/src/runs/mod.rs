//! Runs: one agent execution in a conversation (DESIGN.md §2, §10).
//!
//! Three types, one per responsibility, over one set of live runs:
//! - [`RunManager`] holds the live runs and what they share (this module), starts and
//!   finishes them ([`lifecycle`], with the runner's life in [`runner`] and the helpers'
//!   registrations in `credentials.rs` and `git_gateway.rs`), and launches every
//!   process of theirs through sandboxd (`launch.rs`);
//! - [`tools::ToolCalls`]: a run's tool calls, each judged by the gate first (the
//!   harness's, an agent's hook's, the product's tools, an ACP agent's terminals);
//! - [`prompt::Prompts`]: a run's prompts to its agent, Claude Code's and an ACP
//!   agent's.
//!
//! Starting a run, in order: the conversation's paths are resolved and the agent's
//! directories made; the run's policy is registered with sandboxd; the row is written
//! (`starting`) and `run_started` recorded; then, in the background, the run's runner is
//! launched by sandboxd (the helper handshake on the launch's stdio: HELLO, bootstrap
//! with its roots and a secret of its own, READY) and reached only at its pid, and the
//! run is `running`. A failure before the row undoes the steps before it; a runner that
//! does not start fails the run, unless sandboxd died under the start, taking the
//! runner's envelope: then it is started again on the sandboxd that replaces it.
//!
//! One task per run owns the runner's launch and waits on it: a runner that exits is
//! started again after the backoff, until the restart budget is spent and the run
//! fails; a stop request drops the launch. Either way [`RunManager::finish`]
//! unregisters the run from sandboxd (which kills every process of it), removes the
//! runner's socket and records `run_ended` with the reason.

pub mod acp;
mod acp_link;
mod acp_terminal;
pub mod agent_events;
pub mod claude_code;
mod credentials;
pub mod egress;
pub mod error;
pub mod forwards;
pub mod git_gateway;
mod gitconfig;
pub mod hook;
mod launch;
mod lifecycle;
pub mod models;
pub use cc_config::limits;
pub mod product_tools;
pub mod prompt;
mod runner;
pub mod service;
pub mod tools;
pub mod traffic;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cc_policy::Mode;
use cc_proto::client::PresentSecret;
use cc_proto::helper::unix_ms;
use cc_proto::logging::LogFormat;
use cc_proto::runner::v1::runner_client::RunnerClient;
use cc_proto::sandboxd::v1 as sb;
use serde_json::json;
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::channels::HelperChannels;
use crate::conversations::{Conversations, RunPaths};
use crate::convert::path_bytes;
use crate::events::EventLog;
use crate::gate::Gate;
use crate::helpers::HelperKind;
use crate::ids::{ConversationId, RunId};
use crate::paths::DataDir;
use crate::store::Store;
use cc_config::RunsConfig;
use cc_host::cgroup::{Enforcement, RunCgroup};
use cc_proto::common::v1::Adapter;
pub use cc_store::runs::{RunRecord, RunState};
pub use error::RunError;

pub type RunnerClientWithSecret = RunnerClient<InterceptedService<Channel, PresentSecret>>;

/// What a run start asks for, checked.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub conversation: ConversationId,
    pub agent: String,
    pub mode: Mode,
    pub adapter: Adapter,
    /// The command that starts the agent (adapter acp only).
    pub agent_command: String,
    pub network: bool,
    /// Overrides of the configured limits.
    pub limits: Option<cc_proto::supervisor::v1::RunLimits>,
    /// Its model token budget; 0: `[runs] model_budget_tokens`.
    pub model_budget_tokens: u64,
    /// Host loopback ports asked for (`--forward`), on top of its workspace's.
    pub forwards: Vec<u32>,
}

/// The run's runner as calls see it. It starts in the background once the run is
/// registered, so that a run's first bash call (all that `ccctl exec` makes) does not
/// wait for an envelope it does not use; file tools wait until it is ready.
#[derive(Clone)]
pub enum RunnerSlot {
    Starting,
    Ready {
        client: Box<RunnerClientWithSecret>,
        pid: u32,
    },
    /// It died and is being started again; the run is still running.
    Restarting,
    /// It will not serve: the run is ending in `ending`.
    Failed {
        why: String,
        ending: RunState,
    },
}

/// A live run: its row as it was at start, and its runner slot, which says where in
/// its state machine it is now.
/// What the manager does when a helper process starts.
type Reconciling = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

pub struct LiveRun {
    pub record: RunRecord,
    pub run_id: RunId,
    /// What the run is registered with in sandboxd: registered again whenever sandboxd
    /// has restarted, since sandboxd keeps policies in memory only.
    policy: sb::RunPolicy,
    runner: tokio::sync::watch::Receiver<RunnerSlot>,
    /// The conversation's first repository, the scope the gate sees.
    pub repo: Option<String>,
    /// The GitHub repositories its read credential covers and its git reaches through
    /// the gateway (its checkouts' origins on GitHub and the workspace's linked ones).
    pub github_repositories: Vec<git_gateway::GitHubRepo>,
    /// Its network, as the gateway's proxies hold it to (read once, at its start).
    pub egress: cc_proto::gateway::v1::EgressPolicy,
    /// Who its envelopes run as: the gateway lets only this user in.
    pub uid: u32,
    pub gid: u32,
    /// Its checkouts, where the gateway looks to tell a fast-forward from a force push.
    pub git_dirs: Vec<PathBuf>,
    /// Whether its envelopes reach the gateway (the bridge is in its policy).
    gateway_bridged: std::sync::atomic::AtomicBool,
    stop: Mutex<Option<oneshot::Sender<StopRequest>>>,
    pub limits: limits::RunLimits,
    /// Its cgroup, while it has one (never without cgroup support); removed at its end.
    cgroup: OwnedCgroup,
    /// Its agent's session (adapter claude-code), locked while a prompt runs.
    agent: prompt::AgentSession,
    /// The command that starts its ACP agent (adapter acp), and the agent while it lives.
    pub agent_command: String,
    acp: Mutex<Option<acp_link::AcpLink>>,
    /// The providers its model door serves, as its start found them.
    pub models: Vec<cc_proto::gateway::v1::ModelProvider>,
    /// Its model token budget; 0: none.
    pub model_budget_tokens: u64,
    /// Its model door's port on the host's loopback, for an agent on the host; 0: none.
    pub model_loopback_port: u16,
    /// Host loopback ports bridged into its envelopes at the same port.
    pub forwards: Vec<u16>,
    /// Set once it may make no more model requests: the door is told again with it
    /// after a gateway restart.
    model_refusal: Mutex<Option<String>>,
}

/// A run's cgroup, removed (with whatever is left in it) when the run ends, or when
/// its start fails after it was made.
struct OwnedCgroup(Mutex<Option<RunCgroup>>);

impl OwnedCgroup {
    fn get(&self) -> Option<RunCgroup> {
        self.0.lock().ok().and_then(|c| c.clone())
    }

    async fn remove(&self) {
        if let Some(cgroup) = self.0.lock().ok().and_then(|mut c| c.take()) {
            let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
        }
    }
}

impl Drop for OwnedCgroup {
    fn drop(&mut self) {
        if let Some(cgroup) = self.0.get_mut().ok().and_then(Option::take) {
            // Off the async threads when there are some: removal waits for killed
            // processes to go. Without a runtime (its end), here and now.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || cgroup.remove())),
                Err(_) => cgroup.remove(),
            }
        }
    }
}

impl LiveRun {
    /// Whether the run's envelopes reach the gateway.
    pub fn gateway_bridged(&self) -> bool {
        self.gateway_bridged.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_gateway_bridged(&self, bridged: bool) {
        self.gateway_bridged.store(bridged, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records that the run may make no more model requests; true the first time.
    fn set_model_refusal(&self, why: &str) -> bool {
        let mut refusal = self.model_refusal.lock().unwrap_or_else(|p| p.into_inner());
        let first = refusal.is_none();
        *refusal = Some(why.to_owned());
        first
    }

    fn model_refusal(&self) -> Option<String> {
        self.model_refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The run's cgroup, if it has one.
    pub fn cgroup(&self) -> Option<RunCgroup> {
        self.cgroup.get()
    }

    /// The run's limit counters now, to tell at a launch's end which limit it reached.
    pub fn watch_limits(&self) -> LimitWatch {
        let cgroup = self.cgroup();
        let before = cgroup.as_ref().map(RunCgroup::counters);
        LimitWatch { cgroup, before, limits: self.limits }
    }

    /// The runner's own pid, 0 while it starts or restarts.
    pub fn runner_pid(&self) -> u32 {
        match &*self.runner.borrow() {
            RunnerSlot::Ready { pid, .. } => *pid,
            _ => 0,
        }
    }

    /// Waits, at most `limit`, until the runner `pid` is no longer the one calls go
    /// to: it died, and the run's task has begun starting the next one, which a call
    /// made after this waits for.
    pub async fn runner_replaced(&self, pid: u32, limit: Duration) {
        let mut slot = self.runner.clone();
        let replaced = slot.wait_for(|s| !matches!(s, RunnerSlot::Ready { pid: p, .. } if *p == pid));
        let _ = tokio::time::timeout(limit, replaced).await;
    }

    /// Where the run is in its state machine: Starting until its runner serves, then
    /// Running (while its runner restarts too); its row says how it ended once it has.
    pub fn state(&self) -> RunState {
        match &*self.runner.borrow() {
            RunnerSlot::Starting => RunState::Starting,
            RunnerSlot::Ready { .. } | RunnerSlot::Restarting => RunState::Running,
            RunnerSlot::Failed { ending, .. } => *ending,
        }
    }

    /// The row with the live state.
    pub fn current(&self) -> RunRecord {
        RunRecord { state: self.state(), ..self.record.clone() }
    }

    /// The runner's client, once it is ready, waited for at most `limit` (a start is
    /// bounded by the ready timeout; a restart by its backoff too).
    pub async fn ready_runner(&self, limit: Duration) -> Result<RunnerClientWithSecret, RunError> {
        let mut slot = self.runner.clone();
        let waiting = slot.wait_for(|s| !matches!(s, RunnerSlot::Starting | RunnerSlot::Restarting));
        let Ok(ready) = tokio::time::timeout(limit, waiting).await else {
            return Err(RunError::RunnerUnavailable(format!(
                "the run's runner is restarting and did not serve within {} s; retry",
                limit.as_secs()
            )));
        };
        match ready.map(|s| s.clone()) {
            Ok(RunnerSlot::Ready { client, .. }) => Ok(*client),
            Ok(RunnerSlot::Failed { why, .. }) if why.starts_with(runner::DID_NOT_START) => {
                Err(RunError::RunnerUnavailable(why))
            }
            Ok(RunnerSlot::Failed { why, .. }) => {
                Err(RunError::RunnerUnavailable(format!("the run's runner is gone: {why}")))
            }
            _ => Err(RunError::RunnerUnavailable(runner::DID_NOT_START.into())),
        }
    }
}

/// A run's limit counters when a launch began ([`LiveRun::watch_limits`]).
pub struct LimitWatch {
    cgroup: Option<RunCgroup>,
    before: Option<cc_host::cgroup::Counters>,
    limits: limits::RunLimits,
}

impl LimitWatch {
    /// Each limit the run reached since, by name, with the message for the caller.
    pub fn reached(&self) -> Vec<(&'static str, String)> {
        match (&self.cgroup, self.before) {
            (Some(cgroup), Some(before)) => limits::reached(before, cgroup.counters(), &self.limits),
            _ => Vec::new(),
        }
    }
}

struct StopRequest {
    reason: String,
    done: oneshot::Sender<()>,
}

/// What [`RunManager`] needs from the rest of the supervisor.
pub struct RunEnv {
    pub data: DataDir,
    pub store: Arc<Store>,
    pub events: Arc<EventLog>,
    pub conversations: Arc<Conversations>,
    pub gate: Arc<Gate>,
    pub channels: Arc<HelperChannels>,
    pub runner_program: PathBuf,
    /// `[runs]`: replaced whole by a configuration reload.
    pub config: std::sync::RwLock<Arc<RunsConfig>>,
    /// How run limits are enforced on this host.
    pub enforcement: Arc<Enforcement>,
    pub deadlines: cc_config::Deadlines,
    /// A dead runner is started again with this backoff and budget, as helpers are;
    /// its handshake has the helpers' ready timeout. It is stopped by dropping its launch.
    pub restart: cc_config::RestartPolicy,
    pub log_format: LogFormat,
    /// Runs' commands run in envelopes, whose only way out is their bridges.
    pub enveloped: bool,
    /// The configuration's part of runs' network allowlists (`[egress]`): replaced
    /// whole by a reload; a live run keeps the allowlist it started with.
    pub egress: std::sync::RwLock<Arc<cc_config::EgressConfig>>,
    /// `[models]`, as the broker was given its key files at start: a reload that
    /// changes it takes effect at the next start.
    pub models: Arc<cc_config::ModelsConfig>,
}

pub struct RunManager {
    env: RunEnv,
    live: Mutex<HashMap<RunId, Arc<LiveRun>>>,
    /// `egress_denied` events recorded per run, against [`traffic::DENIAL_EVENTS`].
    denial_events: Mutex<HashMap<String, u32>>,
}

fn now() -> i64 {
    unix_ms(SystemTime::now())
}

/// What of the host a run's envelopes reach besides their bridges to the gateway.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostReach<'a> {
    /// For a run without an envelope: its proxies' loopback ports and credential, and
    /// its model door's port.
    pub loopback: Option<(&'a cc_proto::gateway::v1::LoopbackProxies, u16)>,
    /// Host loopback ports bridged in at the same port.
    pub forwards: &'a [u16],
}

/// The policy sandboxd builds every envelope of the run from.
/// `runner_socket_dir`: where the run's runner listens (it must exist), for the
/// runner's envelope; `None` when no runner is started (explain). `git_gateway`: the
/// run's gateway socket, bridged with the run's git config pointing at it (its
/// directory must exist; the socket may come later). `config.path`: what sandboxd adds
/// to PATH after the system's program directories. `reach`: for a run without an
/// envelope, the ports and credential its proxy variables name instead of the bridges;
/// and the host loopback ports bridged in.
pub fn sandbox_policy(
    run_id: &str,
    paths: &RunPaths,
    runner_socket_dir: Option<&Path>,
    git_gateway: Option<&Path>,
    config: &RunsConfig,
    limits: sb::EnvelopeLimits,
    reach: HostReach<'_>,
) -> sb::RunPolicy {
    let HostReach { loopback, forwards } = reach;
    let mut env = std::collections::HashMap::new();
    if !config.path.is_empty() {
        let joined: Vec<String> = config.path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        env.insert("PATH".to_owned(), joined.join(":"));
    }
    let mut bridges = vec![];
    if let Some(socket) = git_gateway {
        env.insert("GIT_CONFIG_GLOBAL".to_owned(), git_gateway::gitconfig_inside());
        bridges.push(sb::Bridge { port: git_gateway::GIT_GATEWAY_PORT.into(), socket: path_bytes(socket) });
        // The egress proxies beside it: the run's only way out (on loopback ports
        // instead when there is no envelope); and the agent socket its hook asks.
        if let Some(dir) = socket.parent() {
            match loopback {
                Some((proxies, model_port)) => egress::loopback_proxy_env(&mut env, proxies, model_port),
                None => egress::proxy_env(&mut env),
            }
            for (port, name) in [
                (egress::HTTP_PROXY_PORT, egress::HTTP_PROXY_SOCKET),
                (egress::SOCKS_PORT, egress::SOCKS_SOCKET),
                (hook::AGENT_PORT, hook::AGENT_SOCKET),
                (models::MODEL_PORT, models::MODEL_SOCKET),
            ] {
                bridges.push(sb::Bridge { port: port.into(), socket: path_bytes(&dir.join(name)) });
            }
            // Each host forward at its own port, beside them.
            for port in forwards {
                let socket = dir.join(format!("forward-{port}.sock"));
                bridges.push(sb::Bridge { port: (*port).into(), socket: path_bytes(&socket) });
            }
        }
    }
    sb::RunPolicy {
        run_id: run_id.to_owned(),
        agent_work: path_bytes(&paths.agent_work),
        agent_config: path_bytes(&paths.agent_config),
        repos: path_bytes(&paths.repos),
        attachments: paths.attachments.as_deref().map(path_bytes).unwrap_or_default(),
        work_dir: path_bytes(&paths.work_dir),
        write_deny: paths.write_deny.iter().map(|p| path_bytes(p)).collect(),
        env,
        bridges,
        runner_socket_dir: runner_socket_dir.map(path_bytes).unwrap_or_default(),
        shared_git: paths
            .shared_git
            .iter()
            .map(|(common, worktree)| sb::SharedGitDir {
                common_dir: path_bytes(common),
                worktree_dir: path_bytes(worktree),
            })
            .collect(),
        limits: Some(limits),
    }
}

/// What sandboxd applies to each envelope of a run with `limits` and `cgroup`.
pub fn envelope_limits(limits: &limits::RunLimits, cgroup: Option<&RunCgroup>) -> sb::EnvelopeLimits {
    sb::EnvelopeLimits {
        cgroup_procs: cgroup.map(|c| c.procs_files().iter().map(|p| path_bytes(p)).collect()).unwrap_or_default(),
        tmp_size_bytes: limits.tmp_size_bytes,
        open_files_max: limits.open_files_max,
    }
}

/// The runner's socket, in a directory of the conversation that the runner makes its
/// own (as root, the runner is the service user and cannot enter `$DATA/sock`).
fn runner_socket(data: &DataDir, conversation: &ConversationId, run: &RunId) -> PathBuf {
    data.conversation_dir(conversation).join("sock").join(format!("{run}.sock"))
}

/// Why a run stops, and whom to tell once it has: a stop request, or the manager
/// gone (shutdown without a stop), when the runner goes too.
fn stop_reason(request: Result<StopRequest, oneshot::error::RecvError>) -> (String, Option<oneshot::Sender<()>>) {
    match request {
        Ok(StopRequest { reason, done }) => (reason, Some(done)),
        Err(_) => ("the supervisor shut down".to_owned(), None),
    }
}

fn answer(done: Option<oneshot::Sender<()>>) {
    if let Some(done) = done {
        let _ = done.send(());
    }
}

impl RunManager {
    /// Runs the store says are live were live under a supervisor that is gone: their
    /// runners died with it (PDEATHSIG). They are marked failed before anything serves.
    pub fn new(env: RunEnv) -> Arc<Self> {
        if let Ok(runs) = env.store.runs(None) {
            for run in runs.into_iter().filter(|r| r.state.may_become(RunState::Failed)) {
                // Its runner died with that supervisor, killed: its socket is left.
                cc_proto::socket::remove_socket(&runner_socket(
                    &env.data,
                    &run.conversation,
                    &RunId::from_wire(run.id.as_str()),
                ));
                // And its gateway directory (socket and git config).
                let _ = cc_worktree::remove_tree(&env.data.gateway_run_dir(&run.id));
                let reason = "the supervisor stopped while the run was live";
                if env.store.end_run(&run.id, RunState::Failed, now(), reason).is_ok() {
                    env.events.record(
                        "run_ended",
                        &format!("run:{}", run.id),
                        json!({ "state": "failed", "reason": reason }),
                    );
                }
            }
        }
        let manager = Arc::new(Self { env, live: Mutex::default(), denial_events: Mutex::default() });
        // Every new sandboxd process gets every live run before it serves calls
        // (DESIGN §2 rule 1). A call that still finds its run missing registers it and
        // retries (`runs::tools`).
        manager.reconcile(HelperKind::Sandboxd, |manager, pid| {
            Box::pin(async move { manager.register_all_with(pid).await })
        });
        // Every new broker process is told the live runs: it revokes the credentials of
        // every other run (one that ended while it was down, or before a crash), and
        // each live run is registered with it again.
        manager.reconcile(HelperKind::Broker, |manager, pid| Box::pin(async move { manager.sync_broker(pid).await }));
        // Every new gateway process is told every live run, and serves its socket again.
        manager.reconcile(HelperKind::Gateway, |manager, pid| Box::pin(async move { manager.sync_gateway(pid).await }));
        manager
    }

    /// Has `then` run for every new process of `helper`, with the manager (while it lives).
    fn reconcile(self: &Arc<Self>, helper: HelperKind, then: fn(Arc<Self>, u32) -> Reconciling) {
        let weak = Arc::downgrade(self);
        let reconcile: crate::helpers::Reconcile = Arc::new(move |pid| {
            let weak = weak.clone();
            Box::pin(async move {
                if let Some(manager) = weak.upgrade() {
                    then(manager, pid).await;
                }
            })
        });
        self.env.channels.helpers().of(helper).set_reconcile(reconcile);
    }

    /// Registers every live run with the new sandboxd process `pid`, which keeps run
    /// policies in memory only; `runs_reregistered` says how many it took.
    async fn register_all_with(&self, pid: u32) {
        let runs: Vec<Arc<LiveRun>> = self.lock().values().cloned().collect();
        if runs.is_empty() {
            return;
        }
        let channels = &self.env.channels;
        let mut registered = 0u32;
        for run in &runs {
            let told = async {
                let mut sandboxd = channels.sandboxd_at(pid).await?;
                let register = sandboxd.register_run(sb::RegisterRunRequest { policy: Some(run.policy.clone()) });
                channels.within(HelperKind::Sandboxd, "RegisterRun", register).await
            };
            match told.await {
                Ok(_) => registered += 1,
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e.message(), "cannot register the run with sandboxd again")
                }
            }
        }
        let payload = json!({ "pid": pid, "runs": runs.len(), "registered": registered });
        self.env.events.record("runs_reregistered", "helper:sandboxd", payload);
    }

    /// Registers a live run with sandboxd again (sandboxd restarted and lost it).
    pub async fn reregister(&self, run: &LiveRun) -> Result<(), RunError> {
        let channels = &self.env.channels;
        let mut sandboxd = channels.sandboxd().await?;
        let register = sandboxd.register_run(sb::RegisterRunRequest { policy: Some(run.policy.clone()) });
        channels.within(HelperKind::Sandboxd, "RegisterRun", register).await?;
        Ok(())
    }

    /// Where an agent finds cc-hook and cc-mcp: inside its envelope at their fixed
    /// paths, or, on the host (`on_host`, or no backend here), where they are installed,
    /// reaching the run's agent socket itself.
    fn agent_helpers(&self, run_id: &str, on_host: bool) -> claude_code::Helpers {
        if on_host || !self.env.enveloped {
            let agent_socket = self.env.data.gateway_run_dir(run_id).join(hook::AGENT_SOCKET);
            let installed = |name| self.env.runner_program.with_file_name(name);
            claude_code::Helpers::on_host(&installed("cc-hook"), &installed("cc-mcp"), &agent_socket)
        } else {
            claude_code::Helpers::enveloped()
        }
    }

    /// `[runs]` as in force now (a reload replaces it for the next calls).
    pub fn config(&self) -> Arc<RunsConfig> {
        self.env.config.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// `[egress]` as in force now: what new runs' allowlists are made of.
    pub fn egress(&self) -> Arc<cc_config::EgressConfig> {
        self.env.egress.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Puts a reloaded `[runs]` and `[egress]` in force.
    pub fn replace_settings(&self, runs: RunsConfig, egress: cc_config::EgressConfig) {
        *self.env.config.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(runs);
        *self.env.egress.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(egress);
    }

    /// How many runs are live.
    pub fn live_count(&self) -> usize {
        self.lock().len()
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.env.gate
    }

    pub fn events(&self) -> &Arc<EventLog> {
        &self.env.events
    }

    pub fn enforcement(&self) -> &Enforcement {
        &self.env.enforcement
    }

    pub fn deadlines(&self) -> &cc_config::Deadlines {
        &self.env.deadlines
    }

    pub fn channels(&self) -> &Arc<HelperChannels> {
        &self.env.channels
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Arc<LiveRun>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn live_run(&self, id: &RunId) -> Option<Arc<LiveRun>> {
        self.lock().get(id).cloned()
    }

    /// A live run, or why the id names none.
    pub fn require_live(&self, id: &RunId) -> Result<Arc<LiveRun>, RunError> {
        if let Some(run) = self.live_run(id) {
            return Ok(run);
        }
        match self.env.store.run(id.as_str())? {
            Some(r) => Err(RunError::Ended {
                run_id: id.clone(),
                state: r.state,
                reason: r.end_reason.unwrap_or_else(|| "no reason recorded".into()),
            }),
            None => Err(RunError::NotFound(id.clone())),
        }
    }

    /// The run's row, with its live state when it is live.
    pub fn record(&self, id: &RunId) -> Result<RunRecord, RunError> {
        if let Some(live) = self.live_run(id) {
            return Ok(live.current());
        }
        self.env.store.run(id.as_str())?.ok_or_else(|| RunError::NotFound(id.clone()))
    }

    pub fn records(&self, conversation: Option<&str>) -> Result<Vec<RunRecord>, RunError> {
        let mut runs = self.env.store.runs(conversation)?;
        let live = self.lock();
        for run in &mut runs {
            if let Some(l) = live.get(&RunId::from_wire(run.id.as_str())) {
                *run = l.current();
            }
        }
        Ok(runs)
    }
}
