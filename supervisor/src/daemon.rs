//! The supervisor's life, start to finish, in the order it happens. Each step either
//! succeeds or stops start-up with an error that says what to do; nothing after a
//! failed step runs.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cc_proto::auth::PeerGuard;
use cc_proto::helper::{MAX_MESSAGE_BYTES, unix_ms};
use cc_proto::logging::LogFormat;
use cc_proto::socket::{self, SocketError};
use cc_proto::supervisor::v1::conversations_server::ConversationsServer;
use cc_proto::supervisor::v1::gate_server::GateServer;
use cc_proto::supervisor::v1::repositories_server::RepositoriesServer;
use cc_proto::supervisor::v1::rigs_server::RigsServer;
use cc_proto::supervisor::v1::runs_server::RunsServer;
use cc_proto::supervisor::v1::sandbox_server::SandboxServer;
use cc_proto::supervisor::v1::system_server::SystemServer;
use cc_proto::supervisor::v1::terminals_server::TerminalsServer;
use cc_proto::supervisor::v1::workspaces_server::WorkspacesServer;
use serde_json::json;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::server::NamedService;
use tonic::service::InterceptorLayer;
use tonic::transport::Server;

use crate::api::SupervisorApi;
use crate::channels::HelperChannels;
use crate::conversations::Conversations;
use crate::events::EventLog;
use crate::gate::service::GateService;
use crate::gate::{Gate, GateError};
use crate::helpers::{HelperKind, HelperLaunch, HelperSet, SuperviseEnv};
use crate::lock::{DataDirLock, LockError};
use crate::paths::{DataDir, DataDirError};
use crate::reflection;
use crate::rigs::service::RigsService;
use crate::runs::service::RunsService;
use crate::runs::{RunEnv, RunManager};
use crate::sd_notify;
use crate::store::{Store, StoreError};
use crate::terminals::service::TerminalsService;
use cc_config::ConfigError;
use cc_host::cgroup::Enforcement;
use cc_host::probe::{self, Backend, SandboxChoice};

/// How long open client streams may delay shutdown.
const API_DRAIN: Duration = Duration::from_secs(1);
/// How long stopping every helper may take; with the drain, under the 5 s promise.
const HELPERS_STOP: Duration = Duration::from_millis(3_000);
/// How long stopping every run may take.
const RUNS_STOP: Duration = Duration::from_millis(500);

/// Removes the API socket however `run` ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        socket::remove_socket(&self.0);
    }
}

#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    pub data_dir: Option<PathBuf>,
    /// Default: `$DATA/config.toml` when it exists.
    pub config: Option<PathBuf>,
    pub sandbox: SandboxChoice,
    pub log_format: LogFormat,
    /// Where the helper binaries are. Default: next to the running executable.
    pub helper_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("cannot generate helper secrets: {0}")]
    Secret(#[from] cc_proto::secret::SecretError),
    #[error("--sandbox native was asked for, but {0}")]
    NativeUnavailable(String),
    #[error("[sandbox] require = true, but {0}: no run may start unwrapped")]
    SandboxRequired(String),
    #[error("cannot tell where the helper binaries are ({0}): pass their directory")]
    HelperDir(std::io::Error),
    #[error("the client API failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("cannot set up the client API: {0}")]
    Api(String),
    #[error("cannot make the attachments directory: {0}")]
    Attachments(#[from] crate::conversations::ConversationError),
    #[error("{0}; fix its directory or set [audit] enabled = false")]
    Audit(#[from] cc_audit::AuditError),
}

/// Runs the supervisor until `shutdown` resolves, then stops everything it started.
pub async fn run(options: DaemonOptions, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    // 1. The data directory, and the lock that makes it ours alone. Nothing is read or
    //    written before the lock is held, so a second supervisor changes nothing.
    let data = DataDir::locate(options.data_dir.as_deref())?;
    data.prepare()?;
    let _lock = DataDirLock::acquire(&data.lock_file())?;

    // 2. Configuration: an invalid file stops start-up; it is never half-applied. The
    //    same source is read again on every reload.
    let config_source = crate::reload::ConfigSource { named: options.config.clone(), default_file: data.config_file() };
    let (_, config_base, config) = config_source.read()?;

    // The sandbox probe runs bubblewrap twice (~6 ms), meanwhile 3 and 4 go on; it
    // ends before 5b, so nothing it spawned is left in the cgroup the supervisor leaves.
    let (choice, bwrap) = (options.sandbox, config.sandbox.bwrap.clone());
    let probe = tokio::task::spawn_blocking(move || probe::probe(choice, bwrap.as_deref()));

    // 3. The gate's rules (below, once the event log exists): a rules file that does
    //    not load stops start-up, never a silent fall back to the defaults.

    // 4. State.
    let store = Arc::new(Store::open(&data.state_db())?);
    let mut events = EventLog::new(store.clone());
    if config.audit.enabled {
        let trail = cc_audit::AuditWriter::open(&data.audit_dir(), config.audit.max_file_bytes)?;
        events = events.with_audit(trail);
    }
    let events = Arc::new(events);
    let conversations = Arc::new(Conversations::new(data.clone(), store.clone(), events.clone()));
    for id in conversations.sweep_unfinished() {
        tracing::warn!(conversation = id, "removed a conversation whose provisioning never finished");
    }
    let gate = Arc::new(Gate::load(&config.gate, &config_base, events.clone())?);
    conversations.make_attachments_dir("default")?;

    // 5. The sandbox probe (started before 3, as it needs nothing of them), said on the
    //    startup line.
    let probe = probe.await.map_err(|e| StartError::NativeUnavailable(format!("the probe failed: {e}")))?;
    if options.sandbox == SandboxChoice::Native && probe.backend != Backend::Native {
        return Err(StartError::NativeUnavailable(probe.line()));
    }
    if config.sandbox.require && probe.backend != Backend::Native {
        return Err(StartError::SandboxRequired(probe.line()));
    }
    say(&probe.line());

    // 5b. Run limits: the cgroup each run gets, or why there is none, said on the
    //     startup line (never a silent fallback). Before the helpers start: under cgroup
    //     v2 the supervisor moves into a leaf of its cgroup first. Run cgroups that a
    //     killed supervisor left are swept, with whatever is still in them.
    let instance = instance_name(data.root());
    let (enforcement, swept) = tokio::task::spawn_blocking(move || {
        let enforcement = Enforcement::set_up(&instance);
        let swept = enforcement.sweep();
        (enforcement, swept)
    })
    .await
    .map_err(|e| StartError::Api(format!("cannot set up run limits: {e}")))?;
    if swept > 0 {
        tracing::warn!(swept, "removed run cgroups that a previous supervisor left");
    }
    say(&enforcement.line());
    let enforcement = Arc::new(enforcement);

    // 5c. The microVM backend: what this host has of what it needs, said on the startup
    //     line (sandboxd, which would launch the VMs, probes the same for itself). Its
    //     guest image is looked for beside the helpers. Asking QEMU takes ~20 ms, so it
    //     runs while the helpers start; after 5b, so that what it spawns is in the
    //     supervisor's own cgroup leaf.
    let helper_dir = match &options.helper_dir {
        Some(dir) => dir.clone(),
        None => default_helper_dir().map_err(StartError::HelperDir)?,
    };
    let microvm_image =
        config.sandbox.microvm_image.clone().unwrap_or_else(|| cc_host::microvm::default_image_dir(&helper_dir));
    let image = microvm_image.clone();
    let microvm_probe =
        tokio::task::spawn_blocking(move || cc_host::microvm::judge(&cc_host::microvm::gather(&image, true)));

    // 6. The client socket, before the helpers, so that clients can watch start-up.
    socket::prepare_private_dir(&data.sock_dir())?;
    let api_socket = data.api_socket();
    let listener = socket::bind_private(&api_socket)?;
    let _remove_api_socket = RemoveOnDrop(api_socket.clone());
    events.record(
        "supervisor_started",
        "supervisor",
        json!({ "pid": std::process::id(), "version": cc_proto::VERSION, "sandbox": probe.line() }),
    );

    // 7. The helpers, each supervised by its own task.
    // sandboxd probes for itself, with the same choice and bubblewrap.
    let mut sandboxd_options = std::collections::BTreeMap::new();
    sandboxd_options.insert("sandbox".to_owned(), options.sandbox.as_str().to_owned());
    sandboxd_options.insert("microvm_image".to_owned(), microvm_image.display().to_string());
    if let Some(bwrap) = &config.sandbox.bwrap {
        sandboxd_options.insert("bwrap".to_owned(), bwrap.display().to_string());
    }
    // The broker reads its [credentials] table itself (it validates it, and says why
    // it cannot start when the table is wrong).
    let mut broker_options = std::collections::BTreeMap::new();
    if let Some(credentials) = &config.credentials {
        broker_options.insert("credentials".to_owned(), credentials.to_toml());
    }
    // And the model providers' key files: the broker alone reads them.
    if !config.models.is_empty() {
        let key_files: std::collections::BTreeMap<&String, &std::path::PathBuf> =
            config.models.iter().map(|(name, provider)| (name, &provider.key_file)).collect();
        broker_options.insert("model_keys".to_owned(), serde_json::to_string(&key_files).unwrap_or_default());
    }
    // The gateway calls the broker (tokens) and the supervisor's Gate (each pushed ref,
    // which may wait for an approver): one secret for the broker's socket, made once so
    // that either side may restart.
    let gateway_secret = cc_proto::secret::PeerSecret::generate()?;
    let mut gateway_options = std::collections::BTreeMap::new();
    gateway_options.insert("github_url".to_owned(), config.gateway.github_url.trim_end_matches('/').to_owned());
    let gate_wait = config.gate.approval_timeout_ms.saturating_add(config.deadlines.helper_call_ms);
    gateway_options.insert("gate_deadline_ms".to_owned(), gate_wait.to_string());
    gateway_options.insert("handshake_timeout_ms".to_owned(), config.egress.handshake_timeout_ms.to_string());
    let launches = HelperKind::ALL
        .into_iter()
        .map(|kind| {
            let name = kind.name();
            let configured = config.helpers.get(name);
            HelperLaunch {
                kind,
                program: configured
                    .and_then(|c| c.program.clone())
                    .unwrap_or_else(|| helper_dir.join(format!("cc-{name}"))),
                args: configured.map(|c| c.args.clone()).unwrap_or_default(),
                socket: data.helper_socket(name),
                options: match kind {
                    HelperKind::Sandboxd => sandboxd_options.clone(),
                    HelperKind::Broker => broker_options.clone(),
                    HelperKind::Gateway => gateway_options.clone(),
                },
                peers: match kind {
                    HelperKind::Broker => [("gateway".to_owned(), gateway_secret.clone())].into(),
                    _ => Default::default(),
                },
                calls: match kind {
                    HelperKind::Gateway => [("broker".to_owned(), gateway_secret.clone())].into(),
                    _ => Default::default(),
                },
            }
        })
        .collect();
    let env = Arc::new(SuperviseEnv {
        events: events.clone(),
        policy: config.restart.clone(),
        data_dir: data.root().to_owned(),
        log_format: options.log_format,
    });
    let helpers = Arc::new(HelperSet::start(launches, env)?);
    // READY=1 once every helper serves at the same time, whatever the rest of start-up
    // still does: the API socket already listens (6), and a client that connects
    // before step 8 serves it waits in its backlog, not in error.
    let ready = {
        let helpers = helpers.clone();
        tokio::spawn(async move {
            helpers.wait_all_running().await;
            match sd_notify::notify("READY=1") {
                Ok(_) => tracing::info!("all helpers serving: ready"),
                Err(e) => tracing::warn!(error = %e, "cannot notify systemd"),
            }
        })
    };
    let microvm = microvm_probe.await.map_err(|e| StartError::Api(format!("the microvm probe failed: {e}")))?;
    say(&microvm.line);
    let channels = Arc::new(HelperChannels::new(helpers.clone(), config.deadlines.helper_call()));
    crate::health::watch(channels.clone(), config.deadlines.clone(), events.clone());
    let runs = RunManager::new(RunEnv {
        data: data.clone(),
        store,
        events: events.clone(),
        conversations: conversations.clone(),
        gate: gate.clone(),
        channels: channels.clone(),
        runner_program: config.runner.clone().unwrap_or_else(|| helper_dir.join("cc-runner")),
        config: std::sync::RwLock::new(Arc::new(config.runs.clone())),
        enforcement: enforcement.clone(),
        deadlines: config.deadlines.clone(),
        restart: config.restart.clone(),
        log_format: options.log_format,
        enveloped: probe.backend == Backend::Native,
        egress: std::sync::RwLock::new(Arc::new(config.egress.clone())),
        models: Arc::new(config.models.clone()),
    });

    let rigs = crate::rigs::RigManager::new(runs.clone(), events.clone(), microvm.clone());
    let terminals = crate::terminals::TerminalManager::new(
        config.terminals.clone(),
        runs.clone(),
        conversations.clone(),
        events.clone(),
        probe.backend == Backend::Native,
        microvm.clone(),
        rigs.clone(),
    );

    // 7b. Reloads (ccctl config reload, systemctl reload, SIGHUP): the same files,
    //     read again; live runs keep running.
    let reloader = Arc::new(crate::reload::Reloader::new(
        config_source,
        config.clone(),
        gate.clone(),
        runs.clone(),
        events.clone(),
    ));
    let hangups = reload_on_hangup(reloader.clone())?;

    // 8. Serve the client API: health, reflection, and one service per resource, every
    //    call authorized by the caller's uid.
    let conversations_for_gate = conversations.clone();
    let api = Arc::new(SupervisorApi::new(crate::api::ApiParts {
        started_unix_ms: unix_ms(SystemTime::now()),
        data_dir: data.root().display().to_string(),
        probe,
        channels,
        events: events.clone(),
        conversations,
        runs: runs.clone(),
        reloader,
        answer_max_age: config.deadlines.health_interval() + config.deadlines.health_timeout(),
    }));
    let max = MAX_MESSAGE_BYTES;
    let system = SystemServer::from_arc(api.clone()).max_decoding_message_size(max);
    let workspaces = WorkspacesServer::from_arc(api.clone()).max_decoding_message_size(max);
    let repositories = RepositoriesServer::from_arc(api.clone()).max_decoding_message_size(max);
    let conversations = ConversationsServer::from_arc(api.clone()).max_decoding_message_size(max);
    let sandbox = SandboxServer::from_arc(api).max_decoding_message_size(max);
    let runs_service = RunsServer::new(RunsService::new(runs.clone())).max_decoding_message_size(max);
    let terminals_service =
        TerminalsServer::new(TerminalsService::new(terminals.clone())).max_decoding_message_size(max);
    let rigs_service = RigsServer::new(RigsService::new(rigs.clone())).max_decoding_message_size(max);
    let network: crate::gate::service::NetworkLists = {
        let (runs, conversations) = (runs.clone(), conversations_for_gate);
        Arc::new(move |workspace: &str| {
            let egress = runs.egress();
            let entries = conversations
                .workspaces()
                .ok()
                .and_then(|all| all.into_iter().find(|w| w.name == workspace))
                .map(|w| w.egress)
                .unwrap_or_default();
            let ws = crate::runs::egress::WorkspaceEntries { name: workspace, entries: &entries };
            (crate::runs::egress::allowlist(&egress, &ws), crate::runs::egress::always_denied(&egress))
        })
    };
    let gate_service = GateServer::new(GateService::new(gate, network)).max_decoding_message_size(max);
    let (health_reporter, health) = tonic_health::server::health_reporter();
    // Every service reports SERVING by its own name, and "" for the server as a whole.
    health_reporter.set_serving::<SystemServer<SupervisorApi>>().await;
    health_reporter.set_serving::<WorkspacesServer<SupervisorApi>>().await;
    health_reporter.set_serving::<RepositoriesServer<SupervisorApi>>().await;
    health_reporter.set_serving::<ConversationsServer<SupervisorApi>>().await;
    health_reporter.set_serving::<SandboxServer<SupervisorApi>>().await;
    health_reporter.set_serving::<RunsServer<RunsService>>().await;
    health_reporter.set_serving::<GateServer<GateService>>().await;
    health_reporter.set_serving::<TerminalsServer<TerminalsService>>().await;
    health_reporter.set_serving::<RigsServer<RigsService>>().await;
    // What reflection lists: exactly what this socket serves.
    let served = [
        SystemServer::<SupervisorApi>::NAME,
        WorkspacesServer::<SupervisorApi>::NAME,
        RepositoriesServer::<SupervisorApi>::NAME,
        ConversationsServer::<SupervisorApi>::NAME,
        SandboxServer::<SupervisorApi>::NAME,
        RunsServer::<RunsService>::NAME,
        GateServer::<GateService>::NAME,
        TerminalsServer::<TerminalsService>::NAME,
        RigsServer::<RigsService>::NAME,
        "grpc.health.v1.Health",
    ];
    let (reflection_v1, reflection_v1alpha) =
        reflection::services(&[cc_proto::FILE_DESCRIPTOR_SET, tonic_health::pb::FILE_DESCRIPTOR_SET], &served)
            .map_err(|e| StartError::Api(e.to_string()))?;
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(
        Server::builder()
            .layer(InterceptorLayer::new(PeerGuard::owner_or_root()))
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(system)
            .add_service(workspaces)
            .add_service(repositories)
            .add_service(conversations)
            .add_service(sandbox)
            .add_service(gate_service)
            .add_service(runs_service)
            .add_service(terminals_service)
            .add_service(rigs_service)
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = api_stopped.await;
            }),
    );
    say(&format!("serving {}", api_socket.display()));

    // 9. Run until asked to stop (or the API fails).
    let served = tokio::select! {
        _ = shutdown => None,
        result = &mut server => Some(result),
    };

    // 10. Stop: the API first (no new requests), then the helpers, last started first.
    ready.abort();
    hangups.abort();
    let _ = stop_api.send(());
    if served.is_none() && tokio::time::timeout(API_DRAIN, &mut server).await.is_err() {
        server.abort();
    }
    // Runs before helpers: a run's end unregisters it from sandboxd.
    terminals.hang_up_all();
    runs.stop_all(RUNS_STOP).await;
    helpers.stop_all(HELPERS_STOP).await;
    enforcement.tear_down();
    events.record("supervisor_stopped", "supervisor", json!({ "pid": std::process::id() }));
    match served {
        Some(Ok(Err(e))) => Err(e.into()),
        _ => Ok(()),
    }
}

/// SIGHUP reloads, as `ccctl config reload` does; a refusal is logged with its reason
/// (no one is there to answer), and the configuration in force stays.
fn reload_on_hangup(reloader: Arc<crate::reload::Reloader>) -> Result<tokio::task::JoinHandle<()>, StartError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups =
        signal(SignalKind::hangup()).map_err(|e| StartError::Api(format!("cannot listen for SIGHUP: {e}")))?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let reloader = reloader.clone();
            match tokio::task::spawn_blocking(move || reloader.reload()).await {
                Ok(Ok(done)) => {
                    tracing::info!(applied = ?done.applied, restart_required = ?done.restart_required, live_runs = done.live_runs, elapsed_ms = done.elapsed_ms, "configuration reloaded (SIGHUP)")
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "configuration not reloaded (SIGHUP): the old one stays in force")
                }
                Err(e) => tracing::warn!(error = %e, "the reload failed"),
            }
        }
    }))
}

/// Names this data dir among the supervisors of one host, for its cgroup v1 directory:
/// the same on every start, so that a start finds what the last one left.
fn instance_name(data: &Path) -> String {
    use std::hash::Hasher;
    use std::os::unix::ffi::OsStrExt;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(data.as_os_str().as_bytes());
    format!("{:016x}", hasher.finish())
}

fn default_helper_dir() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe.parent().unwrap_or(Path::new("/")).to_owned())
}

/// One line on stdout, prefixed; a closed stdout is not a reason to fail.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "cc-supervisor: {line}");
    let _ = out.flush();
}
