//! The client API (`cc.supervisor.v1.Supervisor`) on `$DATA/sock/api.sock`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_proto::broker::v1::broker_client::BrokerClient;
use cc_proto::client::{self, PresentSecret};
use cc_proto::common::v1::{Event, GetStatusRequest as HelperStatusRequest, HelperStatus};
use cc_proto::gateway::v1::gateway_client::GatewayClient;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::supervisor_server::Supervisor;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::events::EventLog;
use crate::helpers::{Helper, HelperError, HelperSet, SUPERVISOR_PEER, Snapshot};
use crate::probe::{Backend, ProbeResult};

/// How long a live status check may take per helper.
const HELPER_CHECK_TIMEOUT: Duration = Duration::from_millis(500);

pub struct SupervisorApi {
    started_unix_ms: i64,
    data_dir: String,
    probe: ProbeResult,
    helpers: Arc<HelperSet>,
    events: Arc<EventLog>,
    /// One channel per helper process (keyed by pid), so that a status check costs one
    /// round trip rather than a connection and an HTTP/2 handshake.
    channels: Mutex<HashMap<&'static str, (u32, Channel)>>,
}

impl SupervisorApi {
    pub fn new(
        started_unix_ms: i64,
        data_dir: String,
        probe: ProbeResult,
        helpers: Arc<HelperSet>,
        events: Arc<EventLog>,
    ) -> Self {
        Self { started_unix_ms, data_dir, probe, helpers, events, channels: Mutex::default() }
    }

    async fn channel_to(&self, helper: &Helper, pid: u32) -> Result<Channel, String> {
        if let Some((cached_pid, channel)) = self.channels.lock().ok().and_then(|c| c.get(helper.name()).cloned())
            && cached_pid == pid
        {
            return Ok(channel);
        }
        let channel = client::connect(helper.socket()).await.map_err(|e| e.to_string())?;
        if let Ok(mut cache) = self.channels.lock() {
            cache.insert(helper.name(), (pid, channel.clone()));
        }
        Ok(channel)
    }

    /// Asks the helper itself, over its socket and with its secret, who it is.
    async fn check_helper(&self, helper: &Helper, pid: u32) -> Result<HelperStatus, String> {
        let channel = self.channel_to(helper, pid).await?;
        let auth = PresentSecret::new(SUPERVISOR_PEER, helper.secret());
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
}
