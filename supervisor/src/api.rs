//! The client API's resource services on `$DATA/sock/api.sock`: `System`, `Workspaces`,
//! `Repositories`, `Conversations` and `Sandbox`, all served by [`SupervisorApi`]
//! (`Runs` and `Gate` have services of their own).

use std::sync::Arc;
use std::time::Duration;

use cc_proto::common::v1::{EnvelopeKind, SandboxBackend};
use cc_proto::reasons;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::conversations_server::Conversations as ConversationsRpc;
use cc_proto::supervisor::v1::repositories_server::Repositories;
use cc_proto::supervisor::v1::sandbox_server::Sandbox;
use cc_proto::supervisor::v1::system_server::System;
use cc_proto::supervisor::v1::workspaces_server::Workspaces;
use cc_proto::time::timestamp;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

use crate::channels::{HelperChannels, SandboxdClientWithSecret};
use crate::conversations::{ConversationError, Conversations, ProvisionEvent};
use crate::convert;
use crate::events::EventLog;
use crate::helpers::{Answer, Helper, HelperKind, HelperSet, Snapshot};
use crate::ids::{ConversationId, IdKind, RunId};
use crate::runs::RunManager;
use cc_host::probe::ProbeResult;

/// How long a live status check may take per helper.
const HELPER_CHECK_TIMEOUT: Duration = Duration::from_millis(500);

pub struct SupervisorApi {
    started_unix_ms: i64,
    data_dir: String,
    probe: ProbeResult,
    helpers: Arc<HelperSet>,
    events: Arc<EventLog>,
    conversations: Arc<Conversations>,
    channels: Arc<HelperChannels>,
    runs: Arc<RunManager>,
    reloader: Arc<crate::reload::Reloader>,
    answer_max_age: Duration,
}

/// What the client API serves from, as the daemon assembled it.
pub struct ApiParts {
    pub started_unix_ms: i64,
    pub data_dir: String,
    pub probe: ProbeResult,
    pub channels: Arc<HelperChannels>,
    pub events: Arc<EventLog>,
    pub conversations: Arc<Conversations>,
    pub runs: Arc<RunManager>,
    pub reloader: Arc<crate::reload::Reloader>,
    /// How old a helper's last answer to a health check may be and still be reported
    /// by `GetStatus` without asking again: one check interval and one check's deadline.
    pub answer_max_age: Duration,
}

impl SupervisorApi {
    pub fn new(parts: ApiParts) -> Self {
        let ApiParts {
            started_unix_ms,
            data_dir,
            probe,
            channels,
            events,
            conversations,
            runs,
            reloader,
            answer_max_age,
        } = parts;
        let helpers = channels.helpers().clone();
        Self {
            started_unix_ms,
            data_dir,
            probe,
            helpers,
            events,
            conversations,
            channels,
            runs,
            reloader,
            answer_max_age,
        }
    }

    /// Runs blocking registry or filesystem work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Conversations) -> Result<T, ConversationError> + Send + 'static,
    ) -> Result<T, Status> {
        let conversations = self.conversations.clone();
        match tokio::task::spawn_blocking(move || work(&conversations)).await {
            Ok(result) => result.map_err(Status::from),
            Err(e) => Err(Status::internal(format!("the request's worker failed: {e}"))),
        }
    }

    /// Process `pid`'s answer: the health checks' last one when it is recent, else a
    /// new one. Under a run that keeps both cores busy, a round trip to each helper is
    /// most of what a live `GetStatus` costs, and the health checks already make them.
    async fn check_helper(&self, helper: &Helper, pid: u32) -> Result<Answer, String> {
        if let Some(answer) = helper.recent_answer(pid, self.answer_max_age) {
            return Ok(answer);
        }
        match tokio::time::timeout(HELPER_CHECK_TIMEOUT, self.channels.status_of(helper, pid)).await {
            Ok(Ok(status)) => Ok(helper.remember_answer(pid, status)),
            Ok(Err(status)) => Err(status.message().to_owned()),
            Err(_) => Err(format!("no answer within {HELPER_CHECK_TIMEOUT:?}")),
        }
    }
}

fn helper_info(helper: &Helper, snapshot: Snapshot) -> pb::Helper {
    pb::Helper {
        name: helper.name().to_owned(),
        pid: snapshot.pid.unwrap_or(0),
        state: snapshot.state as i32,
        restarts: snapshot.restarts,
        last_exit: snapshot.last_exit.map(|e| pb::ExitStatus {
            code: e.code,
            signal: e.signal,
            exit_time: Some(timestamp(e.time_unix_ms)),
            killed_because: e.killed_because.unwrap_or_default().to_owned(),
        }),
        socket: helper.socket().display().to_string(),
        serving: false,
        reported: None,
        problem: String::new(),
        check_time: None,
    }
}

#[tonic::async_trait]
impl System for SupervisorApi {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let checks = self.helpers.helpers().iter().map(|helper| async move {
            let mut info = helper_info(helper, helper.snapshot());
            if info.pid != 0 {
                match self.check_helper(helper, info.pid).await {
                    Ok(answer) => {
                        let reported = answer.status;
                        info.serving = reported.pid == info.pid;
                        if !info.serving {
                            info.problem = format!("socket answered as pid {}, expected {}", reported.pid, info.pid);
                        }
                        info.reported = Some(reported);
                        info.check_time = Some(timestamp(answer.at_unix_ms));
                    }
                    Err(problem) => info.problem = problem,
                }
            }
            info
        });
        let helpers = futures::future::join_all(checks).await;
        Ok(Response::new(pb::GetStatusResponse {
            version: cc_proto::VERSION.to_owned(),
            pid: std::process::id(),
            data_dir: self.data_dir.clone(),
            backend: SandboxBackend::from(self.probe.backend) as i32,
            backend_line: self.probe.line(),
            helpers,
            start_time: Some(timestamp(self.started_unix_ms)),
            limits_line: self.runs.enforcement().line(),
        }))
    }

    async fn list_helpers(
        &self,
        _request: Request<pb::ListHelpersRequest>,
    ) -> Result<Response<pb::ListHelpersResponse>, Status> {
        let helpers = self.helpers.helpers().iter().map(|h| helper_info(h, h.snapshot())).collect();
        Ok(Response::new(pb::ListHelpersResponse { helpers }))
    }

    async fn restart_helper(
        &self,
        request: Request<pb::RestartHelperRequest>,
    ) -> Result<Response<pb::RestartHelperResponse>, Status> {
        let name = request.into_inner().name;
        let helper = self.helpers.get(&name)?;
        let previous_pid = helper.snapshot().pid.unwrap_or(0);
        self.helpers.restart(&name).await?;
        Ok(Response::new(pb::RestartHelperResponse {
            helper: Some(helper_info(helper, helper.snapshot())),
            previous_pid,
        }))
    }

    type WatchEventsStream = ReceiverStream<Result<pb::WatchEventsResponse, Status>>;

    async fn reload_config(
        &self,
        _request: Request<pb::ReloadConfigRequest>,
    ) -> Result<Response<pb::ReloadConfigResponse>, Status> {
        let reloader = self.reloader.clone();
        let reloaded = tokio::task::spawn_blocking(move || reloader.reload())
            .await
            .map_err(|e| Status::internal(format!("the reload failed: {e}")))?;
        let done = reloaded.map_err(|e| {
            let file = e.file().display().to_string();
            reasons::refusal(Code::FailedPrecondition, e.to_string(), reasons::CONFIG_INVALID, &[("file", file)])
        })?;
        let shown = |p: &std::path::Path| p.display().to_string();
        Ok(Response::new(pb::ReloadConfigResponse {
            config_file: done.config_file.as_deref().map(shown).unwrap_or_default(),
            rules_files: done.rules_files.iter().map(|p| shown(p)).collect(),
            applied: done.applied.iter().map(|s| (*s).to_owned()).collect(),
            restart_required: done.restart_required.iter().map(|s| (*s).to_owned()).collect(),
            fixed_for_live_runs: crate::reload::FIXED_FOR_LIVE_RUNS.iter().map(|s| (*s).to_owned()).collect(),
            live_runs: u32::try_from(done.live_runs).unwrap_or(u32::MAX),
            elapsed_ms: done.elapsed_ms,
        }))
    }

    async fn watch_events(
        &self,
        request: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let pb::WatchEventsRequest { since, follow } = request.into_inner();
        let (tx, rx) = mpsc::channel(256);
        let events = self.events.clone();
        tokio::spawn(async move { events.stream(since, follow, tx).await });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl Workspaces for SupervisorApi {
    async fn create_workspace(
        &self,
        request: Request<pb::CreateWorkspaceRequest>,
    ) -> Result<Response<pb::CreateWorkspaceResponse>, Status> {
        let name = request.into_inner().workspace_id;
        let workspace = self.blocking(move |c| c.create_workspace(&name)).await?;
        Ok(Response::new(pb::CreateWorkspaceResponse { workspace: Some(convert::workspace(workspace)) }))
    }

    async fn list_workspaces(
        &self,
        _request: Request<pb::ListWorkspacesRequest>,
    ) -> Result<Response<pb::ListWorkspacesResponse>, Status> {
        let workspaces = self.blocking(|c| c.workspaces()).await?;
        Ok(Response::new(pb::ListWorkspacesResponse {
            workspaces: workspaces.into_iter().map(convert::workspace).collect(),
        }))
    }

    async fn link_git_hub_repository(
        &self,
        request: Request<pb::LinkGitHubRepositoryRequest>,
    ) -> Result<Response<pb::LinkGitHubRepositoryResponse>, Status> {
        let r = request.into_inner();
        let workspace = convert::workspace_or_default(&r.workspace_id).to_owned();
        let linked = self.blocking(move |c| c.link_github_repository(&workspace, &r.github_repository)).await?;
        Ok(Response::new(pb::LinkGitHubRepositoryResponse { workspace: Some(convert::workspace(linked)) }))
    }

    async fn unlink_git_hub_repository(
        &self,
        request: Request<pb::UnlinkGitHubRepositoryRequest>,
    ) -> Result<Response<pb::UnlinkGitHubRepositoryResponse>, Status> {
        let r = request.into_inner();
        let workspace = convert::workspace_or_default(&r.workspace_id).to_owned();
        let unlinked = self.blocking(move |c| c.unlink_github_repository(&workspace, &r.github_repository)).await?;
        Ok(Response::new(pb::UnlinkGitHubRepositoryResponse { workspace: Some(convert::workspace(unlinked)) }))
    }

    async fn add_egress_entry(
        &self,
        request: Request<pb::AddEgressEntryRequest>,
    ) -> Result<Response<pb::AddEgressEntryResponse>, Status> {
        let r = request.into_inner();
        let workspace = convert::workspace_or_default(&r.workspace_id).to_owned();
        let added = self.blocking(move |c| c.add_egress_entry(&workspace, &r.entry)).await?;
        Ok(Response::new(pb::AddEgressEntryResponse { workspace: Some(convert::workspace(added)) }))
    }

    async fn remove_egress_entry(
        &self,
        request: Request<pb::RemoveEgressEntryRequest>,
    ) -> Result<Response<pb::RemoveEgressEntryResponse>, Status> {
        let r = request.into_inner();
        let workspace = convert::workspace_or_default(&r.workspace_id).to_owned();
        let removed = self.blocking(move |c| c.remove_egress_entry(&workspace, &r.entry)).await?;
        Ok(Response::new(pb::RemoveEgressEntryResponse { workspace: Some(convert::workspace(removed)) }))
    }
}

#[tonic::async_trait]
impl Repositories for SupervisorApi {
    async fn create_repository(
        &self,
        request: Request<pb::CreateRepositoryRequest>,
    ) -> Result<Response<pb::CreateRepositoryResponse>, Status> {
        let pb::CreateRepositoryRequest { workspace_id, path, name } = request.into_inner();
        let path = convert::bytes_path(&path)?;
        let workspace = convert::workspace_or_default(&workspace_id).to_owned();
        let name = (!name.is_empty()).then_some(name);
        let repo = self.blocking(move |c| c.add_repo(&workspace, &path, name.as_deref())).await?;
        Ok(Response::new(pb::CreateRepositoryResponse { repository: Some(convert::repository(repo)) }))
    }

    async fn list_repositories(
        &self,
        request: Request<pb::ListRepositoriesRequest>,
    ) -> Result<Response<pb::ListRepositoriesResponse>, Status> {
        let workspace = convert::workspace_or_default(&request.into_inner().workspace_id).to_owned();
        let repos = self.blocking(move |c| c.repos(&workspace)).await?;
        Ok(Response::new(pb::ListRepositoriesResponse {
            repositories: repos.into_iter().map(convert::repository).collect(),
        }))
    }

    async fn delete_repository(
        &self,
        request: Request<pb::DeleteRepositoryRequest>,
    ) -> Result<Response<pb::DeleteRepositoryResponse>, Status> {
        let pb::DeleteRepositoryRequest { workspace_id, name } = request.into_inner();
        let workspace = convert::workspace_or_default(&workspace_id).to_owned();
        self.blocking(move |c| c.remove_repo(&workspace, &name)).await?;
        Ok(Response::new(pb::DeleteRepositoryResponse {}))
    }
}

#[tonic::async_trait]
impl ConversationsRpc for SupervisorApi {
    type CreateConversationStream = ReceiverStream<Result<pb::CreateConversationResponse, Status>>;

    async fn create_conversation(
        &self,
        request: Request<pb::CreateConversationRequest>,
    ) -> Result<Response<Self::CreateConversationStream>, Status> {
        let pb::CreateConversationRequest { workspace_id, repository_names, backend } = request.into_inner();
        let backend = convert::backend(backend)?;
        let workspace = convert::workspace_or_default(&workspace_id).to_owned();
        let (tx, rx) = mpsc::channel(64);
        let conversations = self.conversations.clone();
        // Provisioning runs to its end even if the client goes away: a conversation is
        // made whole or not at all, and `conversation list` shows it.
        tokio::task::spawn_blocking(move || {
            use pb::create_conversation_response::Update;
            let send = |update: Update| {
                let _ = tx.blocking_send(Ok(pb::CreateConversationResponse { update: Some(update) }));
            };
            let progress = |event: ProvisionEvent| {
                send(match event {
                    ProvisionEvent::Planned { repo, files } => {
                        Update::Planned(pb::ProvisionPlanned { repository_name: repo, files })
                    }
                    ProvisionEvent::Progress { repo, files_done, files_total } => {
                        Update::Progress(pb::ProvisionProgress { repository_name: repo, files_done, files_total })
                    }
                    ProvisionEvent::Warning(text) => Update::Warning(text),
                })
            };
            match conversations.create(&workspace, &repository_names, backend, &progress) {
                Ok(record) => send(Update::Conversation(convert::conversation(record))),
                Err(e) => {
                    let _ = tx.blocking_send(Err(Status::from(e)));
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        let workspace = request.into_inner().workspace_id;
        let list = self.blocking(move |c| c.list((!workspace.is_empty()).then_some(workspace.as_str()))).await?;
        Ok(Response::new(pb::ListConversationsResponse {
            conversations: list.into_iter().map(convert::conversation).collect(),
        }))
    }

    async fn delete_conversation(
        &self,
        request: Request<pb::DeleteConversationRequest>,
    ) -> Result<Response<pb::DeleteConversationResponse>, Status> {
        let id = ConversationId::from_wire(request.into_inner().conversation_id);
        // Its runs end first: nothing may work in copies that are being removed.
        self.runs.stop_conversation(&id, "its conversation was removed").await;
        let removed = self.blocking(move |c| c.remove(&id)).await?;
        Ok(Response::new(pb::DeleteConversationResponse { conversation: Some(convert::conversation(removed)) }))
    }
}

impl SupervisorApi {
    /// What sandboxd's probe found when it started.
    async fn sandbox_probe(&self) -> Result<sb::GetProbeResponse, Status> {
        let mut sandboxd = self.channels.sandboxd().await?;
        let asked = sandboxd.get_probe(sb::GetProbeRequest {});
        Ok(self.channels.within(HelperKind::Sandboxd, "GetProbe", asked).await?.into_inner())
    }
}

#[tonic::async_trait]
impl Sandbox for SupervisorApi {
    async fn get_probe(
        &self,
        _request: Request<pb::GetProbeRequest>,
    ) -> Result<Response<pb::GetProbeResponse>, Status> {
        let probe = self.sandbox_probe().await?;
        let limits = self.runs.enforcement().describe();
        Ok(Response::new(pb::GetProbeResponse {
            backend: probe.backend,
            detail: probe.detail,
            limits,
            microvm: probe.microvm,
        }))
    }

    async fn list_adapters(
        &self,
        _request: Request<pb::ListAdaptersRequest>,
    ) -> Result<Response<pb::ListAdaptersResponse>, Status> {
        let probe = self.sandbox_probe().await?;
        let native = probe.backend == cc_proto::common::v1::SandboxBackend::Native as i32;
        let coverage = |c| match c {
            crate::adapters::Coverage::Yes => pb::Coverage::Yes,
            crate::adapters::Coverage::Partial => pb::Coverage::Partial,
            crate::adapters::Coverage::No => pb::Coverage::No,
        } as i32;
        let adapters = crate::adapters::matrix(native)
            .into_iter()
            .map(|column| pb::AdapterLayers {
                adapter: column.adapter as i32,
                description: column.description.into(),
                layers: column
                    .cells
                    .into_iter()
                    .map(|c| pb::LayerCoverage {
                        layer: c.layer.into(),
                        coverage: coverage(c.coverage),
                        detail: c.detail.into(),
                        proof: c.proof.into(),
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(pb::ListAdaptersResponse { backend: probe.backend, detail: probe.detail, adapters }))
    }

    async fn explain_envelope(
        &self,
        request: Request<pb::ExplainEnvelopeRequest>,
    ) -> Result<Response<pb::ExplainEnvelopeResponse>, Status> {
        let pb::ExplainEnvelopeRequest { conversation_id, agent, kind, argv, run_id } = request.into_inner();
        let kind = match EnvelopeKind::try_from(kind) {
            Ok(EnvelopeKind::Unspecified | EnvelopeKind::HarnessBash) => EnvelopeKind::HarnessBash,
            Ok(EnvelopeKind::Overlay) => EnvelopeKind::Overlay,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "unknown envelope kind {kind} (expected overlay or harness_bash)"
                )));
            }
        };
        let argv = if argv.is_empty() { vec![b"sh".to_vec()] } else { argv };
        let respond = |explained: sb::ExplainEnvelopeResponse| {
            let envelope = explained.envelope.unwrap_or_default();
            Response::new(pb::ExplainEnvelopeResponse {
                backend: envelope.backend,
                argv: envelope.argv,
                env: envelope.env,
            })
        };
        let mut sandboxd = self.channels.sandboxd().await?;
        if !run_id.is_empty() {
            // The run's own registration, as its launches see it.
            let live = self.runs.require_live(&RunId::from_wire(run_id))?;
            let request = sb::ExplainEnvelopeRequest { run_id: live.run_id.to_string(), kind: kind as i32, argv };
            let explained =
                self.channels.within(HelperKind::Sandboxd, "ExplainEnvelope", sandboxd.explain_envelope(request));
            return Ok(respond(explained.await?.into_inner()));
        }
        let agent = if agent.is_empty() { "default".to_owned() } else { agent };
        let conversation = ConversationId::from_wire(conversation_id);
        let paths = self.blocking(move |c| c.run_paths(&conversation, &agent)).await?;
        let run_id = crate::ids::mint(IdKind::Explanation).map_err(|e| Status::internal(e.to_string()))?;
        let config = self.runs.config();
        let limits = crate::runs::limits::RunLimits::from_config(&config.limits);
        let limits = crate::runs::envelope_limits(&limits, None);
        let policy = crate::runs::sandbox_policy(&run_id, &paths, None, None, &config, limits, Default::default());
        let register = sandboxd.register_run(sb::RegisterRunRequest { policy: Some(policy) });
        self.channels.within(HelperKind::Sandboxd, "RegisterRun", register).await?;
        // Unregistered however this request ends, a client that goes away included.
        let cleanup = Unregister(Some((sandboxd.clone(), run_id.clone(), self.channels.clone())));
        let request = sb::ExplainEnvelopeRequest { run_id, kind: kind as i32, argv };
        let explained =
            self.channels.within(HelperKind::Sandboxd, "ExplainEnvelope", sandboxd.explain_envelope(request)).await;
        drop(cleanup);
        Ok(respond(explained?.into_inner()))
    }
}

/// Unregisters a throw-away run when dropped.
struct Unregister(Option<(SandboxdClientWithSecret, String, Arc<HelperChannels>)>);

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Some((mut client, run_id, channels)) = self.0.take() {
            tokio::spawn(async move {
                let unregister = client.unregister_run(sb::UnregisterRunRequest { run_id });
                let _ = channels.within(HelperKind::Sandboxd, "UnregisterRun", unregister).await;
            });
        }
    }
}
