//! The client API (`cc.supervisor.v1.Supervisor`) on `$DATA/sock/api.sock`.

use std::sync::Arc;
use std::time::Duration;

use cc_proto::broker::v1::broker_client::BrokerClient;
use cc_proto::client::PresentSecret;
use cc_proto::common::v1::{Event, GetStatusRequest as HelperStatusRequest, HelperStatus};
use cc_proto::gateway::v1::gateway_client::GatewayClient;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::supervisor_server::Supervisor;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::channels::{HelperChannels, SandboxdClientWithSecret};
use crate::conversations::{ConversationError, Conversations, ProvisionEvent};
use crate::convert;
use crate::events::EventLog;
use crate::helpers::{Helper, HelperError, HelperSet, SUPERVISOR_PEER, Snapshot};
use crate::runs::RunManager;
use cc_sandboxd::probe::{Backend, ProbeResult};

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
}

impl SupervisorApi {
    pub fn new(
        started_unix_ms: i64,
        data_dir: String,
        probe: ProbeResult,
        channels: Arc<HelperChannels>,
        events: Arc<EventLog>,
        conversations: Arc<Conversations>,
        runs: Arc<RunManager>,
    ) -> Self {
        let helpers = channels.helpers().clone();
        Self { started_unix_ms, data_dir, probe, helpers, events, conversations, channels, runs }
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

    /// Asks the helper itself, over its socket and with its secret, who it is.
    async fn check_helper(&self, helper: &Helper, pid: u32) -> Result<HelperStatus, String> {
        let channel = self.channels.channel_to(helper, pid).await?;
        let auth = PresentSecret::new(SUPERVISOR_PEER, &helper.secret());
        let request = HelperStatusRequest {};
        let call = async {
            let svc = |c: Channel| InterceptedService::new(c, auth.clone());
            match helper.name() {
                "sandboxd" => SandboxdClient::new(svc(channel)).get_status(request).await,
                "broker" => BrokerClient::new(svc(channel)).get_status(request).await,
                "gateway" => GatewayClient::new(svc(channel)).get_status(request).await,
                other => Err(Status::internal(format!("no status client for helper {other}"))),
            }
        };
        match tokio::time::timeout(HELPER_CHECK_TIMEOUT, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(status.message().to_owned()),
            Err(_) => Err(format!("no answer within {HELPER_CHECK_TIMEOUT:?}")),
        }
    }
}

impl From<HelperError> for Status {
    fn from(e: HelperError) -> Status {
        match e {
            HelperError::Unknown(_) => Status::invalid_argument(e.to_string()),
            HelperError::StartFailed { .. } => Status::unavailable(e.to_string()),
            HelperError::ShuttingDown => Status::unavailable(e.to_string()),
        }
    }
}

fn helper_info(helper: &Helper, snapshot: Snapshot) -> pb::HelperInfo {
    pb::HelperInfo {
        name: helper.name().to_owned(),
        pid: snapshot.pid.unwrap_or(0),
        state: snapshot.state as i32,
        restarts: snapshot.restarts,
        last_exit: snapshot.last_exit.map(|e| pb::ExitStatus {
            code: e.code,
            signal: e.signal,
            time_unix_ms: e.time_unix_ms,
        }),
        socket: helper.socket().display().to_string(),
        serving: false,
        reported: None,
        problem: String::new(),
    }
}

#[tonic::async_trait]
impl Supervisor for SupervisorApi {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let checks = self.helpers.helpers().iter().map(|helper| async move {
            let mut info = helper_info(helper, helper.snapshot());
            if info.pid != 0 {
                match self.check_helper(helper, info.pid).await {
                    Ok(reported) => {
                        info.serving = reported.pid == info.pid;
                        if !info.serving {
                            info.problem = format!("socket answered as pid {}, expected {}", reported.pid, info.pid);
                        }
                        info.reported = Some(reported);
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
            backend: match self.probe.backend {
                Backend::Native => pb::SandboxBackend::Native,
                Backend::None => pb::SandboxBackend::None,
            } as i32,
            backend_line: self.probe.line(),
            helpers,
            started_unix_ms: self.started_unix_ms,
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

    type WatchEventsStream = ReceiverStream<Result<Event, Status>>;

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

    async fn create_workspace(
        &self,
        request: Request<pb::CreateWorkspaceRequest>,
    ) -> Result<Response<pb::Workspace>, Status> {
        let name = request.into_inner().name;
        let workspace = self.blocking(move |c| c.create_workspace(&name)).await?;
        Ok(Response::new(convert::workspace(workspace)))
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

    async fn add_repo(&self, request: Request<pb::AddRepoRequest>) -> Result<Response<pb::Repo>, Status> {
        let pb::AddRepoRequest { workspace, path, name } = request.into_inner();
        let path = convert::bytes_path(&path)?;
        let workspace = convert::workspace_or_default(&workspace).to_owned();
        let name = (!name.is_empty()).then_some(name);
        let repo = self.blocking(move |c| c.add_repo(&workspace, &path, name.as_deref())).await?;
        Ok(Response::new(convert::repo(repo)))
    }

    async fn list_repos(
        &self,
        request: Request<pb::ListReposRequest>,
    ) -> Result<Response<pb::ListReposResponse>, Status> {
        let workspace = convert::workspace_or_default(&request.into_inner().workspace).to_owned();
        let repos = self.blocking(move |c| c.repos(&workspace)).await?;
        Ok(Response::new(pb::ListReposResponse { repos: repos.into_iter().map(convert::repo).collect() }))
    }

    async fn remove_repo(
        &self,
        request: Request<pb::RemoveRepoRequest>,
    ) -> Result<Response<pb::RemoveRepoResponse>, Status> {
        let pb::RemoveRepoRequest { workspace, name } = request.into_inner();
        let workspace = convert::workspace_or_default(&workspace).to_owned();
        self.blocking(move |c| c.remove_repo(&workspace, &name)).await?;
        Ok(Response::new(pb::RemoveRepoResponse {}))
    }

    type NewConversationStream = ReceiverStream<Result<pb::ProvisionUpdate, Status>>;

    async fn new_conversation(
        &self,
        request: Request<pb::NewConversationRequest>,
    ) -> Result<Response<Self::NewConversationStream>, Status> {
        let pb::NewConversationRequest { workspace, repos, backend } = request.into_inner();
        let backend = convert::backend(backend)?;
        let workspace = convert::workspace_or_default(&workspace).to_owned();
        let (tx, rx) = mpsc::channel(64);
        let conversations = self.conversations.clone();
        // Provisioning runs to its end even if the client goes away: a conversation is
        // made whole or not at all, and `conversation list` shows it.
        tokio::task::spawn_blocking(move || {
            let send = |update: pb::provision_update::Update| {
                let _ = tx.blocking_send(Ok(pb::ProvisionUpdate { update: Some(update) }));
            };
            let progress = |event: ProvisionEvent| {
                use pb::provision_update::Update;
                send(match event {
                    ProvisionEvent::Planned { repo, files } => Update::Planned(pb::ProvisionPlanned { repo, files }),
                    ProvisionEvent::Progress { repo, files_done, files_total } => {
                        Update::Progress(pb::ProvisionProgress { repo, files_done, files_total })
                    }
                    ProvisionEvent::Warning(text) => Update::Warning(text),
                })
            };
            match conversations.create(&workspace, &repos, backend, &progress) {
                Ok(record) => send(pb::provision_update::Update::Done(convert::conversation(record))),
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
        let workspace = request.into_inner().workspace;
        let list = self.blocking(move |c| c.list((!workspace.is_empty()).then_some(workspace.as_str()))).await?;
        Ok(Response::new(pb::ListConversationsResponse {
            conversations: list.into_iter().map(convert::conversation).collect(),
        }))
    }

    async fn sandbox_probe(
        &self,
        _request: Request<pb::SandboxProbeRequest>,
    ) -> Result<Response<pb::SandboxProbeResponse>, Status> {
        let probe = self.channels.sandboxd().await?.get_probe(sb::GetProbeRequest {}).await?.into_inner();
        let backend = match sb::Backend::try_from(probe.backend) {
            Ok(sb::Backend::Native) => "native",
            _ => "none",
        };
        Ok(Response::new(pb::SandboxProbeResponse { backend: backend.to_owned(), detail: probe.detail }))
    }

    async fn sandbox_explain(
        &self,
        request: Request<pb::SandboxExplainRequest>,
    ) -> Result<Response<pb::SandboxExplainResponse>, Status> {
        let pb::SandboxExplainRequest { conversation, agent, kind, argv, run } = request.into_inner();
        let kind = match kind.as_str() {
            "" | "harness_bash" | "harness-bash" => sb::DispatchKind::HarnessBash,
            "overlay" => sb::DispatchKind::Overlay,
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown kind {other:?} (expected overlay or harness_bash)"
                )));
            }
        };
        let argv = if argv.is_empty() { vec![b"sh".to_vec()] } else { argv };
        let respond = |explained: sb::ExplainResponse| {
            let backend = if explained.backend == sb::Backend::Native as i32 { "native" } else { "none" };
            Response::new(pb::SandboxExplainResponse {
                backend: backend.to_owned(),
                argv: explained.argv,
                env: explained.env,
            })
        };
        let mut sandboxd = self.channels.sandboxd().await?;
        if !run.is_empty() {
            // The run's own registration, as its launches see it.
            let live = self.runs.require_live(&run)?;
            let request = sb::ExplainRequest { run_id: live.record.id.clone(), kind: kind as i32, argv };
            return Ok(respond(sandboxd.explain(request).await?.into_inner()));
        }
        let agent = if agent.is_empty() { "default".to_owned() } else { agent };
        let paths = self.blocking(move |c| c.run_paths(&conversation, &agent)).await?;
        let run_id = format!(
            "explain-{}",
            &cc_proto::secret::PeerSecret::generate().map_err(|e| Status::internal(e.to_string()))?.expose()[..12]
        );
        let policy = crate::runs::sandbox_policy(&run_id, &paths, None, self.runs.config());
        sandboxd.register_run(policy).await?;
        // Unregistered however this request ends, a client that goes away included.
        let cleanup = Unregister(Some((sandboxd.clone(), run_id.clone())));
        let explained = sandboxd.explain(sb::ExplainRequest { run_id, kind: kind as i32, argv }).await;
        drop(cleanup);
        Ok(respond(explained?.into_inner()))
    }

    async fn remove_conversation(
        &self,
        request: Request<pb::RemoveConversationRequest>,
    ) -> Result<Response<pb::Conversation>, Status> {
        let id = request.into_inner().id;
        // Its runs end first: nothing may work in copies that are being removed.
        self.runs.stop_conversation(&id, "its conversation was removed").await;
        let removed = self.blocking(move |c| c.remove(&id)).await?;
        Ok(Response::new(convert::conversation(removed)))
    }
}

/// Unregisters a throw-away run when dropped.
struct Unregister(Option<(SandboxdClientWithSecret, String)>);

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Some((mut client, run_id)) = self.0.take() {
            tokio::spawn(async move {
                let _ = client.unregister_run(sb::UnregisterRunRequest { run_id }).await;
            });
        }
    }
}
