//! A run's life: its start (paths, sockets, cgroup, registration with the helpers, the
//! runner in the background) and its end (stop, finish, and every run at shutdown).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_host::ServiceUser;
use cc_proto::common::v1::Adapter;
use cc_proto::sandboxd::v1 as sb;
use serde_json::json;
use tokio::sync::oneshot;

use super::{
    HostReach, LiveRun, OwnedCgroup, RunError, RunManager, RunRecord, RunState, RunnerSlot, StartRequest, StopRequest,
    acp, answer, claude_code, credentials, egress, envelope_limits, git_gateway, limits, models, now, prompt, runner,
    runner_socket, sandbox_policy, stop_reason,
};
use crate::conversations::RunPaths;
use crate::helpers::HelperKind;
use crate::ids::{ConversationId, RunId};
use crate::paths::DataDir;

impl RunManager {
    pub async fn start(self: &Arc<Self>, request: StartRequest) -> Result<Arc<LiveRun>, RunError> {
        if request.adapter == Adapter::Acp {
            acp::agent_argv(&request.agent_command).map_err(RunError::BadRequest)?;
        } else if !request.agent_command.is_empty() {
            return Err(RunError::BadRequest(format!(
                "--agent-command is for the acp adapter; adapter {} starts its own",
                request.adapter.name()
            )));
        }
        // The network rule is read once, here: a run never changes it. Without an
        // envelope the run's proxies listen on loopback ports behind a credential.
        // An agent on the host (no envelope, or claude-code-nosandbox) reaches its model
        // door on a loopback port of its own, where its placeholder is the credential.
        let ports_error =
            |e: std::io::Error| RunError::Internal(format!("cannot find loopback ports for the run: {e}"));
        let with_models = !self.env.models.is_empty();
        let (loopback, model_loopback_port) = if self.env.enveloped {
            let on_host = with_models && request.adapter == Adapter::ClaudeCodeNosandbox;
            (None, if on_host { egress::loopback_port().map_err(ports_error)? } else { 0 })
        } else {
            let (proxies, model_port) = egress::loopback_proxies(with_models).map_err(ports_error)?;
            (Some(proxies), model_port)
        };
        let limits = limits::RunLimits::from_config(&self.config().limits)
            .overridden(request.limits.as_ref())
            .map_err(|e| RunError::BadRequest(format!("run limits: {e}")))?;
        let run_id = RunId::mint()?;
        let id = run_id.as_str().to_owned();
        let (conversation, agent) = (request.conversation.clone(), request.agent.clone());
        let conversations = self.env.conversations.clone();
        let (paths, record, github_repositories, workspace_egress) = tokio::task::spawn_blocking(move || {
            let record = conversations.conversation(&conversation)?;
            let workspace = conversations.workspaces()?.into_iter().find(|w| w.name == record.workspace);
            let (linked, egress) = workspace.map(|w| (w.linked, w.egress)).unwrap_or_default();
            let github = credentials::github_repositories(&record, &linked);
            Ok::<_, crate::conversations::ConversationError>((
                conversations.run_paths(&conversation, &agent)?,
                record,
                github,
                egress,
            ))
        })
        .await
        .map_err(|e| RunError::Internal(e.to_string()))??;
        let roots = runner_roots(&paths)?;
        let forwards = self.decide_forwards(&request.forwards, &record.workspace, request.mode, self.env.enveloped)?;
        // The run's model providers, as its door will serve them; and where that door
        // is from inside (the envelope's bridge, or without one a host loopback port).
        let models = models::gateway_models(&self.env.models, self.env.data.root()).map_err(RunError::Precondition)?;
        let model_port = if model_loopback_port == 0 { models::MODEL_PORT } else { model_loopback_port };
        let model_budget_tokens = match request.model_budget_tokens {
            0 => self.config().model_budget_tokens,
            asked => asked,
        };
        if request.adapter.is_claude_code() {
            // The agent's settings (its hooks) and MCP config, before anything of the
            // run can start: read-only in its overlay envelope. Without one (on purpose,
            // or on a host with no backend) the CLI finds our helpers where they are
            // installed, and they reach the agent socket itself.
            let helpers = self.agent_helpers(&id, request.adapter == Adapter::ClaudeCodeNosandbox);
            let timing = claude_code::HookTiming::for_approvals(self.gate().approvals.timeout().as_millis() as u64);
            let config = self.config();
            let claude = &config.claude_code;
            // The CLI reaches its provider through the door, or (none configured) not at
            // all: its prompts then fail at once, naming the missing table.
            let door = self.env.models.contains_key(&claude.model).then(|| models::door_url(model_port, &claude.model));
            let env = claude_code::environment(door.as_deref());
            let key = match &door {
                None => claude_code::KeyHelper::None,
                Some(_) => match self.model_placeholder(&id).await {
                    Ok(placeholder) => claude_code::KeyHelper::Placeholder(placeholder),
                    Err(e) => {
                        tracing::warn!(run = %id, error = %e, "cannot have the run's model placeholder now; its CLI will ask");
                        claude_code::KeyHelper::AskHook
                    }
                },
            };
            let settings = claude_code::settings(timing, &env, &key, &helpers);
            let mcp = claude_code::mcp_config(&helpers);
            prompt::write_agent_config(&paths.agent_config, &settings, &mcp).map_err(|e| {
                RunError::Internal(format!(
                    "cannot write the agent's settings in {}: {e}",
                    paths.agent_config.display()
                ))
            })?;
        }
        let socket = runner_socket(&self.env.data, &record.id, &run_id);
        // Made here, before the envelope that binds it: the runner listens in it.
        let socket_dir = socket.parent().map(Path::to_owned).unwrap_or_default();
        make_socket_dir(&socket_dir)
            .map_err(|e| RunError::Internal(format!("cannot make {}: {e}", socket_dir.display())))?;
        // Who the run's envelopes run as: the service user as root, else us.
        let run_user = ServiceUser::when_root()
            .map_or_else(|| (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw()), |u| (u.uid, u.gid));
        if let Some(user) = ServiceUser::when_root() {
            let (data, conversation, agent) = (self.env.data.clone(), record.id.clone(), request.agent.clone());
            tokio::task::spawn_blocking(move || hand_to_service_user(&data, &conversation, &agent, user))
                .await
                .map_err(|e| RunError::Internal(e.to_string()))?
                .map_err(|e| {
                    RunError::Internal(format!("cannot hand the run's directories to the service user: {e}"))
                })?;
        }

        // The run's cgroup, before anything of the run can start: owned from here, so
        // that a start that fails below removes it.
        let enforcement = self.env.enforcement.clone();
        let (cgroup_id, cgroup_limits) = (id.clone(), limits.cgroup());
        let cgroup = tokio::task::spawn_blocking(move || enforcement.create_run(&cgroup_id, &cgroup_limits))
            .await
            .map_err(|e| RunError::Internal(e.to_string()))?
            .map_err(|e| RunError::Internal(e.to_string()))?;
        let envelope_limits = envelope_limits(&limits, cgroup.as_ref());
        let cgroup = OwnedCgroup(Mutex::new(cgroup));

        // The run's git front door: its directory now (sandboxd binds it), its socket
        // when the gateway is told the run below; and the git config pointing there.
        let gateway_dir = self.env.data.gateway_run_dir(&id);
        let gateway_socket = gateway_dir.join(git_gateway::GIT_SOCKET);
        let (data_root, gateway_run) = (self.env.data.root().to_owned(), id.clone());
        tokio::task::spawn_blocking(move || git_gateway::make_gateway_dir(&data_root, &gateway_run))
            .await
            .map_err(|e| RunError::Internal(e.to_string()))?
            .map_err(|e| RunError::Internal(format!("cannot set up the run's git gateway: {e}")))?;

        let channels = self.env.channels.clone();
        let mut sandboxd = channels.sandboxd().await?;
        let policy = sandbox_policy(
            &id,
            &paths,
            Some(&socket_dir),
            Some(&gateway_socket),
            &self.config(),
            envelope_limits,
            HostReach { loopback: loopback.as_ref().map(|l| (l, model_loopback_port)), forwards: &forwards },
        );
        let register = sandboxd.register_run(sb::RegisterRunRequest { policy: Some(policy.clone()) });
        channels.within(HelperKind::Sandboxd, "RegisterRun", register).await?;
        // runner_roots has checked that the run's paths are UTF-8.
        let home = paths.agent_work.to_string_lossy().into_owned();
        let run = RunRecord {
            id: id.clone(),
            conversation: record.id.clone(),
            workspace: record.workspace.clone(),
            agent: request.agent.clone(),
            mode: request.mode,
            adapter: request.adapter,
            network: request.network,
            state: RunState::Starting,
            work_dir: paths.work_dir.clone(),
            started_unix_ms: now(),
            ended_unix_ms: None,
            end_reason: None,
        };
        if let Err(e) = self.env.store.insert_run(&run) {
            let unregister = sandboxd.unregister_run(sb::UnregisterRunRequest { run_id: id.clone() });
            let _ = channels.within(HelperKind::Sandboxd, "UnregisterRun", unregister).await;
            return Err(RunError::Internal(format!("cannot record the run: {e}")));
        }
        let (stop_tx, stop_rx) = oneshot::channel();
        let (slot_tx, slot_rx) = tokio::sync::watch::channel(RunnerSlot::Starting);
        let live = Arc::new(LiveRun {
            record: run,
            run_id: run_id.clone(),
            policy,
            runner: slot_rx,
            repo: record.repos.first().map(|r| r.name.clone()),
            github_repositories,
            egress: cc_proto::gateway::v1::EgressPolicy {
                loopback,
                ..egress::gateway_policy(
                    request.network,
                    &self.egress(),
                    &egress::WorkspaceEntries { name: &record.workspace, entries: &workspace_egress },
                )
            },
            uid: run_user.0,
            gid: run_user.1,
            git_dirs: record.repos.iter().map(|r| r.path.clone()).collect(),
            gateway_bridged: Default::default(),
            stop: Mutex::new(Some(stop_tx)),
            limits,
            cgroup,
            agent: Default::default(),
            agent_command: request.agent_command.clone(),
            acp: Mutex::default(),
            models,
            model_budget_tokens,
            model_loopback_port,
            forwards: forwards.clone(),
            model_refusal: Mutex::default(),
        });
        self.lock().insert(run_id.clone(), live.clone());
        // Before the runner exists, so nothing of the run runs without its credential
        // or its git front door.
        self.register_credentials(&live).await;
        let gateway = self.register_gateway(&live).await;
        self.env.events.record(
            "run_started",
            &format!("run:{id}"),
            json!({
                "conversation": record.id,
                "agent": request.agent,
                "mode": request.mode.as_str(),
                "adapter": request.adapter.name(),
                "agent_command": request.agent_command,
                "envelope": if request.adapter == Adapter::ClaudeCodeNosandbox {
                    "none: the agent runs on the host, unconfined, with the host's environment"
                } else if self.env.enveloped { "native" } else { "none" },
                "network": request.network,
                "forwards": forwards,
                "limits": self.env.enforcement.describe(),
            }),
        );
        let this = self.clone();
        let live_for_runner = live.clone();
        let mut stop_rx = stop_rx;
        let how = runner::RunnerStart { roots, home, socket };
        tokio::spawn(async move {
            let started = tokio::select! {
                started = this.start_runner(&live_for_runner, &how) => started,
                // Stopped while its runner starts: dropping the start kills the process
                // (kill_on_drop), and the run ends now rather than once the runner is up.
                request = &mut stop_rx => {
                    let ending = RunState::Stopped;
                    let _ = slot_tx.send(RunnerSlot::Failed { why: "the run was stopped".into(), ending });
                    let (reason, done) = stop_reason(request);
                    this.finish(&run_id, RunState::Stopped, &reason).await;
                    answer(done);
                    return;
                }
            };
            match started {
                Ok(runner) => {
                    // Starting → Running: the row first, so that nothing reads Running
                    // from the slot that the row would deny after a crash.
                    if let Err(e) = this.env.store.set_run_state(&id, RunState::Running) {
                        tracing::error!(run = %id, error = %e, "cannot record that the run is running");
                    }
                    let (pid, envelope) = (runner.pid, runner.envelope_name());
                    let _ = slot_tx.send(RunnerSlot::Ready { client: Box::new(runner.client.clone()), pid });
                    let payload = json!({ "runner_pid": pid, "runner_envelope": envelope });
                    this.env.events.record("runner_ready", &format!("run:{id}"), payload);
                    this.watch(live_for_runner, runner, how, slot_tx, stop_rx).await;
                }
                Err(error) => {
                    let why = error.to_string();
                    let _ = slot_tx.send(RunnerSlot::Failed { why: why.clone(), ending: RunState::Failed });
                    let reason = why.strip_prefix(runner::DID_NOT_START).map_or_else(
                        || format!("its runner did not start: {why}"),
                        |rest| format!("its runner did not start{rest}"),
                    );
                    this.finish(&run_id, RunState::Failed, &reason).await;
                }
            }
        });
        // Its loopback proxy port taken: its variables point at another process. Now
        // that the runner task listens for it, the run is stopped, and the caller told.
        if let Err(status) = gateway {
            let _ = self.stop(&live.run_id, git_gateway::PORT_TAKEN_REASON).await;
            return Err(RunError::Helper(status));
        }
        Ok(live)
    }

    /// Ends a run: its row first, then it leaves the live map, so that no one ever reads
    /// a row that says live for a run that is gone from the map; then sandboxd kills what
    /// is left of it, and `run_ended` is recorded.
    pub(super) async fn finish(&self, run_id: &RunId, state: RunState, reason: &str) {
        let id = run_id.as_str();
        if let Err(e) = self.env.store.end_run(id, state, now(), reason) {
            tracing::error!(run = id, error = %e, "cannot record the end of a run");
        }
        let live = self.lock().remove(run_id);
        // sandboxd kills whatever of the run still runs (bash calls and their children).
        let channels = &self.env.channels;
        let killed = match channels.sandboxd().await {
            Ok(mut sandboxd) => {
                let unregister = sandboxd.unregister_run(sb::UnregisterRunRequest { run_id: id.to_owned() });
                channels
                    .within(HelperKind::Sandboxd, "UnregisterRun", unregister)
                    .await
                    .map_or(0, |r| r.into_inner().killed)
            }
            Err(_) => 0,
        };
        // Nothing of the run runs any more: its door closes and its credentials go.
        self.end_gateway(id).await;
        self.end_credentials(id).await;
        self.env.gate.forget_run(id);
        if let Some(live) = &live {
            // Whatever of the run sandboxd did not know (the runner's own children).
            live.cgroup.remove().await;
            cc_proto::socket::remove_socket(&runner_socket(&self.env.data, &live.record.conversation, run_id));
        }
        self.env.events.end_run(id);
        self.env.events.record(
            "run_ended",
            &format!("run:{id}"),
            json!({
                "state": state.as_str(),
                "reason": reason,
                "conversation": live.as_ref().map(|l| l.record.conversation.clone()),
                "processes_killed": killed,
            }),
        );
    }

    /// Stops a live run and waits until it has ended.
    pub async fn stop(&self, id: &RunId, reason: &str) -> Result<(), RunError> {
        let live = self.require_live(id)?;
        let sender = live.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(sender) = sender else {
            return Err(RunError::AlreadyStopping(id.clone()));
        };
        let (done, finished) = oneshot::channel();
        if sender.send(StopRequest { reason: reason.to_owned(), done }).is_ok() {
            let _ = finished.await;
        }
        Ok(())
    }

    /// Stops every live run of a conversation (before it is removed).
    pub async fn stop_conversation(&self, conversation: &ConversationId, reason: &str) {
        let ids: Vec<RunId> =
            self.lock().values().filter(|r| &r.record.conversation == conversation).map(|r| r.run_id.clone()).collect();
        for id in ids {
            let _ = self.stop(&id, reason).await;
        }
    }

    /// Stops every live run (supervisor shutdown), all at once and within `within`.
    /// A run that has not stopped by then has its row ended all the same: a clean stop
    /// never leaves a row saying `running` (its processes die with the supervisor).
    pub async fn stop_all(&self, within: Duration) {
        const REASON: &str = "the supervisor shut down";
        let ids: Vec<RunId> = self.lock().keys().cloned().collect();
        let all = futures::future::join_all(ids.iter().map(|id| self.stop(id, REASON)));
        if tokio::time::timeout(within, all).await.is_ok() {
            return;
        }
        let left: Vec<RunId> = self.lock().keys().cloned().collect();
        tracing::warn!(runs = left.len(), "runs not stopped within the shutdown deadline: their rows are ended now");
        for id in left {
            let reason = format!("{REASON} before the run had stopped");
            if self.env.store.end_run(id.as_str(), RunState::Stopped, now(), &reason).is_ok() {
                self.env.events.end_run(id.as_str());
                let payload = json!({ "state": "stopped", "reason": reason });
                self.env.events.record("run_ended", &format!("run:{}", id.as_str()), payload);
            }
        }
    }
}

/// The runner's roots, the working directory first: the agent may write its working
/// directory, the conversation's copies and its own work dir, and read attachments.
fn runner_roots(paths: &RunPaths) -> Result<String, RunError> {
    let mut roots: Vec<(&Path, bool)> = vec![(&paths.work_dir, true), (&paths.repos, true), (&paths.agent_work, true)];
    if let Some(attachments) = &paths.attachments {
        roots.push((attachments, false));
    }
    let mut seen = std::collections::HashSet::new();
    roots.retain(|(p, _)| seen.insert(p.to_path_buf()));
    let roots: Vec<(String, bool)> =
        roots.into_iter().map(|(p, w)| p.to_str().map(|s| (s.to_owned(), w))).collect::<Option<_>>().ok_or_else(
            || RunError::Precondition("a run path is not UTF-8; the runner is told its roots in JSON".into()),
        )?;
    serde_json::to_string(&roots).map_err(|e| RunError::Internal(e.to_string()))
}

/// As root, every launch runs as the unprivileged service user (sandboxd takes the
/// owner of the working directory): the directories above the conversation become
/// traversable (0711: nobody can list or read them), and the conversation's own
/// directories, which we made, become that user's. The copies are the service user's
/// since they were provisioned, so nothing here walks what an agent writes: every
/// change is made through a handle opened without following a link (issue 16). The
/// rest of the data directory (state.db, sockets, config) stays root's alone.
fn hand_to_service_user(
    data: &DataDir,
    conversation: &ConversationId,
    agent: &str,
    user: ServiceUser,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;
    let ServiceUser { uid, gid } = user;
    for ancestor in data.root().ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor)?.mode();
        if mode & 0o001 == 0 {
            return Err(std::io::Error::other(format!(
                "{} is not searchable by others, so the service user (uid {uid}) cannot reach the data directory; \
                 `chmod o+x` it or choose a data directory under searchable paths (e.g. /var/lib/control-center)",
                ancestor.display()
            )));
        }
    }
    for dir in [data.root().to_owned(), data.conversations_dir(), data.root().join("workspaces")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
    }
    let _ = std::fs::set_permissions(data.state_db(), std::fs::Permissions::from_mode(0o600));
    let top =
        cc_host::beneath::open_dir_no_links(&data.conversation_dir(conversation)).map_err(std::io::Error::from)?;
    let give = |dir: &std::os::fd::OwnedFd| std::os::unix::fs::fchown(dir, Some(uid), Some(gid));
    give(&top)?;
    // Each below the last, by one name, never through a link.
    for names in [&["repos"][..], &["sock"], &["agents", agent, "work"], &["agents", agent, "config"]] {
        let mut dir = top.try_clone()?;
        for name in names {
            dir = cc_host::beneath::child_dir(&dir, std::ffi::OsStr::new(name)).map_err(std::io::Error::from)?;
            give(&dir)?;
        }
    }
    // A copy provisioned before copies were given to the service user: handed over
    // once, by handle (worktree::give_tree); later runs find it theirs.
    let repos = cc_host::beneath::child_dir(&top, std::ffi::OsStr::new("repos")).map_err(std::io::Error::from)?;
    for name in cc_host::beneath::names(&repos).map_err(std::io::Error::from)? {
        let st = nix::sys::stat::fstatat(&repos, name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if st.st_uid != uid {
            cc_worktree::give_tree(&repos, &name, user, 0)?;
        }
    }
    Ok(())
}

/// The runner's socket directory, 0700: made if missing; if there, it must be a real
/// directory of ours or (under root, from an earlier run) the service user's.
fn make_socket_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new().mode(0o700).create(dir),
        Err(e) => Err(e),
        Ok(meta) => {
            let ours = meta.uid() == nix::unistd::geteuid().as_raw();
            let service = ServiceUser::when_root().is_some_and(|user| meta.uid() == user.uid);
            if meta.is_dir() && (ours || service) && meta.mode() & 0o077 == 0 {
                Ok(())
            } else {
                Err(std::io::Error::other("not a private directory of ours or the service user's: refusing to use it"))
            }
        }
    }
}
