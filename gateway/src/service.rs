//! The helper process: health, status, and the supervisor's RPCs that open and close
//! each run's git front door.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cc_proto::auth::require_peer;
use cc_proto::gateway::v1 as pb;
use cc_proto::gateway::v1::gateway_server::{Gateway, GatewayServer};
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use cc_proto::paths::DataDir;
use tonic::{Request, Response, Status};

use crate::door::model::ModelRoute;
use crate::door::report::Reporter;
use crate::door::{DoorError, Doors, EgressConfig, Loopback, Repository, RunDoor, Shared, Upstream};
use crate::git::route::is_github_repository;
use crate::model::Api;
use crate::peers::Peers;

pub const SPEC: HelperSpec = HelperSpec { name: "gateway", capabilities: CapabilityPolicy::DropAll };

/// When the supervisor names no deadline for the gate's answers.
const DEFAULT_GATE_DEADLINE: Duration = Duration::from_secs(305);
/// How long a proxy's client may take to send its request, unless told
/// (`[egress] handshake_timeout_ms`).
const DEFAULT_HANDSHAKE: Duration = Duration::from_secs(10);

pub struct GatewayService {
    context: HelperContext,
    doors: Arc<Doors>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the data directory: {0}")]
    Data(String),
    #[error("github_url {0:?} is not an http(s) URL")]
    GitHubUrl(String),
    #[error("cannot build the HTTPS client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("cannot make {path}: {source}")]
    Dir { path: String, source: std::io::Error },
}

pub fn service(context: &HelperContext) -> Result<GatewayServer<GatewayService>, StartError> {
    let bootstrap = &context.bootstrap;
    let data = DataDir::locate(Some(&bootstrap.data_dir)).map_err(|e| StartError::Data(e.to_string()))?;
    let github = bootstrap.options.get("github_url").map_or("https://github.com", String::as_str);
    if !(github.starts_with("https://") || github.starts_with("http://")) {
        return Err(StartError::GitHubUrl(github.to_owned()));
    }
    let gate_deadline = bootstrap
        .options
        .get("gate_deadline_ms")
        .and_then(|ms| ms.parse().ok())
        .map_or(DEFAULT_GATE_DEADLINE, Duration::from_millis);
    let peers = Arc::new(Peers::new(
        data.helper_socket("broker"),
        bootstrap.calls.get("broker").cloned(),
        data.api_socket(),
        gate_deadline,
    ));
    raise_open_files();
    let runs_dir = data.root().join("gateway").join("runs");
    make_searchable(&runs_dir)?;
    let handshake = bootstrap
        .options
        .get("handshake_timeout_ms")
        .and_then(|ms| ms.parse().ok())
        .map_or(DEFAULT_HANDSHAKE, Duration::from_millis);
    let shared = Shared {
        reporter: Reporter::new(peers.clone()),
        peers,
        upstream: Upstream::new(github)?,
        handshake,
        providers: Default::default(),
    };
    let doors = Doors::new(runs_dir, shared);
    tracing::info!(github, "forwarding runs' git to");
    Ok(GatewayServer::new(GatewayService { context: context.clone(), doors: Arc::new(doors) })
        .max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// Each tunnel holds two descriptors and every run may hold 256 of them: take the
/// whole hard limit rather than the soft one a shell hands down (often 1024).
fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the open-file limit"),
            Err(e) => tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit"),
        },
        _ => {}
    }
}

/// `gateway/runs`: searchable (not listable) by the run's user, whose envelopes are
/// set up by bubblewrap running as it.
fn make_searchable(dir: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    let made = |source| StartError::Dir { path: dir.display().to_string(), source };
    std::fs::create_dir_all(dir).map_err(made)?;
    for d in [dir, dir.parent().unwrap_or(dir)] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711)).map_err(made)?;
    }
    Ok(())
}

fn only_the_supervisor<T>(request: &Request<T>) -> Result<(), Status> {
    require_peer(request, &["supervisor"])
}

/// A run id is ours: `r` and hex digits. Anything else would name another directory.
fn check_run_id(run: &str) -> Result<(), Status> {
    if run.is_empty() || run.len() > 64 || !run.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Status::invalid_argument(format!(
            "{:?} is not a run id",
            run.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn run_door(r: pb::RegisterRunRequest) -> Result<RunDoor, Status> {
    check_run_id(&r.run_id)?;
    let mut repositories = Vec::with_capacity(r.repositories.len());
    for repo in r.repositories {
        let name = repo.name.to_ascii_lowercase();
        let valid = name.split_once('/').is_some_and(|(owner, n)| is_github_repository(owner, n));
        if !valid {
            return Err(Status::invalid_argument(format!("{:?} is not a GitHub repository (OWNER/NAME)", repo.name)));
        }
        let gate_name = if repo.gate_name.is_empty() { name.clone() } else { repo.gate_name };
        let default_branch = (!repo.default_branch.is_empty()).then_some(repo.default_branch);
        repositories.push(Repository { name, gate_name, default_branch });
    }
    let git_dirs: Vec<PathBuf> =
        r.git_dirs.iter().map(|d| PathBuf::from(std::ffi::OsStr::from_bytes(d))).filter(|d| d.is_absolute()).collect();
    let models = model_routes(r.models)?;
    let egress = r.egress.unwrap_or_default();
    let pairs = |list: Vec<pb::EgressEntry>| list.into_iter().map(|e| (e.entry, e.source)).collect();
    let egress = EgressConfig {
        network: egress.network,
        allow: pairs(egress.allow),
        deny: pairs(egress.deny),
        resolve: egress.resolve.into_iter().map(|o| (o.host, o.addresses)).collect(),
        loopback: match egress.loopback {
            Some(l) => Some(
                Loopback::new(l.http_port, l.socks_port, l.username, l.password).map_err(Status::invalid_argument)?,
            ),
            None => None,
        },
    };
    Ok(RunDoor {
        run_id: r.run_id,
        workspace: r.workspace_id,
        mode: r.mode,
        uid: r.uid,
        repositories,
        git_dirs,
        egress,
        models,
        model_budget_tokens: r.model_budget_tokens,
        forwards: r
            .forwards
            .iter()
            .map(|p| match u16::try_from(*p) {
                Ok(port) if port > 0 => Ok(port),
                _ => Err(Status::invalid_argument(format!("{p} is not a port to forward"))),
            })
            .collect::<Result<_, _>>()?,
        model_loopback_port: match r.model_loopback_port {
            0 => None,
            port => Some(u16::try_from(port).map_err(|_| Status::invalid_argument(format!("{port} is not a port")))?),
        },
    })
}

/// The run's model providers, checked: a name the door routes by, an http(s) base URL.
fn model_routes(models: Vec<pb::ModelProvider>) -> Result<Vec<ModelRoute>, Status> {
    let mut routes: Vec<ModelRoute> = Vec::with_capacity(models.len());
    for m in models {
        let name_ok = !m.name.is_empty()
            && m.name.len() <= 64
            && m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok || routes.iter().any(|r| r.name == m.name) {
            return Err(Status::invalid_argument(format!("{:?} is not a model provider's name, or is twice", m.name)));
        }
        let api = match pb::ModelApi::try_from(m.api) {
            Ok(pb::ModelApi::Anthropic) => Api::Anthropic,
            Ok(pb::ModelApi::Openai) => Api::Openai,
            _ => return Err(Status::invalid_argument(format!("model provider {} names no API", m.name))),
        };
        let base_url = m.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) || base_url.contains(['?', '#']) {
            return Err(Status::invalid_argument(format!("model provider {}'s base URL is not http(s)", m.name)));
        }
        routes.push(ModelRoute { name: m.name, api, base_url, ca_pem: m.ca_pem });
    }
    Ok(routes)
}

#[tonic::async_trait]
impl Gateway for GatewayService {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        Ok(Response::new(pb::GetStatusResponse { status: Some(self.context.status()) }))
    }

    async fn register_run(
        &self,
        request: Request<pb::RegisterRunRequest>,
    ) -> Result<Response<pb::RegisterRunResponse>, Status> {
        only_the_supervisor(&request)?;
        let request = request.into_inner();
        let (used, refusal) = (request.model_tokens_used, request.model_refusal.clone());
        let door = run_door(request)?;
        let refusal = (!refusal.is_empty()).then_some(refusal);
        let sockets = self.doors.open(door, used, refusal).map_err(|e| match e {
            DoorError::Egress(_) => Status::invalid_argument(e.to_string()),
            DoorError::PortTaken { port, .. } => cc_proto::reasons::refusal(
                tonic::Code::FailedPrecondition,
                e.to_string(),
                cc_proto::reasons::PORT_TAKEN,
                &[("port", port.to_string())],
            ),
            e => Status::internal(e.to_string()),
        })?;
        let bytes = |p: &std::path::Path| p.as_os_str().as_bytes().to_vec();
        Ok(Response::new(pb::RegisterRunResponse {
            socket: bytes(&sockets.git),
            http_proxy_socket: bytes(&sockets.http_proxy),
            socks_socket: bytes(&sockets.socks),
            agent_socket: bytes(&sockets.agent),
            model_socket: bytes(&sockets.model),
        }))
    }

    async fn end_run(&self, request: Request<pb::EndRunRequest>) -> Result<Response<pb::EndRunResponse>, Status> {
        only_the_supervisor(&request)?;
        let run = request.into_inner().run_id;
        check_run_id(&run)?;
        self.doors.close(&run);
        Ok(Response::new(pb::EndRunResponse {}))
    }
}
