//! Channels to the helpers, one per helper process (keyed by pid), so that a call costs
//! one round trip rather than a connection and an HTTP/2 handshake. A channel is only
//! ever opened to the pid we started (`SO_PEERCRED`), and presents that process's secret.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use cc_proto::broker::v1::broker_client::BrokerClient;
use cc_proto::client::{self, PresentSecret};
use cc_proto::common::v1::HelperStatus;
use cc_proto::gateway::v1::gateway_client::GatewayClient;
use cc_proto::reasons;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::helpers::{Helper, HelperKind, HelperSet, SUPERVISOR_PEER};

/// How long a call waits for a helper that is starting or restarting.
const HELPER_START_WAIT: Duration = Duration::from_secs(5);

pub type SandboxdClientWithSecret = SandboxdClient<InterceptedService<Channel, PresentSecret>>;
pub type BrokerClientWithSecret = BrokerClient<InterceptedService<Channel, PresentSecret>>;
pub type GatewayClientWithSecret = GatewayClient<InterceptedService<Channel, PresentSecret>>;

pub struct HelperChannels {
    helpers: Arc<HelperSet>,
    cache: Mutex<HashMap<HelperKind, (u32, Channel)>>,
    /// How long any one call to a helper may take.
    call_deadline: Duration,
}

impl HelperChannels {
    pub fn new(helpers: Arc<HelperSet>, call_deadline: Duration) -> Self {
        Self { helpers, cache: Mutex::default(), call_deadline }
    }

    /// Runs `call` to `helper` within the configured deadline; past it, the call is
    /// dropped (which cancels it) and fails with `HELPER_TIMEOUT` naming `helper` and
    /// `what`. A stopped helper, or one lost in a loop, hangs no caller.
    pub async fn within<T>(
        &self,
        helper: HelperKind,
        what: &str,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        within(helper.name(), what, self.call_deadline, call).await
    }

    /// Asks the helper process `pid` for its status over its socket, with its secret
    /// (without a deadline: callers choose theirs).
    pub async fn status_of(&self, helper: &Helper, pid: u32) -> Result<HelperStatus, Status> {
        let channel = self.channel_to(helper, pid).await.map_err(|e| Status::unavailable(e.to_string()))?;
        let auth = PresentSecret::new(SUPERVISOR_PEER, &helper.secret());
        let svc = |c: Channel| InterceptedService::new(c, auth.clone());
        let status = match helper.kind() {
            HelperKind::Sandboxd => {
                SandboxdClient::new(svc(channel)).get_status(sb::GetStatusRequest {}).await?.into_inner().status
            }
            HelperKind::Broker => {
                use cc_proto::broker::v1::GetStatusRequest;
                BrokerClient::new(svc(channel)).get_status(GetStatusRequest {}).await?.into_inner().status
            }
            HelperKind::Gateway => {
                use cc_proto::gateway::v1::GetStatusRequest;
                GatewayClient::new(svc(channel)).get_status(GetStatusRequest {}).await?.into_inner().status
            }
        };
        status.ok_or_else(|| Status::internal("the helper answered without its status"))
    }

    pub fn helpers(&self) -> &Arc<HelperSet> {
        &self.helpers
    }

    pub async fn channel_to(&self, helper: &Helper, pid: u32) -> Result<Channel, client::ConnectError> {
        if let Some((cached_pid, channel)) = self.cache.lock().ok().and_then(|c| c.get(&helper.kind()).cloned())
            && cached_pid == pid
        {
            return Ok(channel);
        }
        let channel = client::connect_checked(helper.socket(), Some(pid)).await?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(helper.kind(), (pid, channel.clone()));
        }
        Ok(channel)
    }

    /// A client of sandboxd, over the cached channel to its current process.
    pub async fn sandboxd(&self) -> Result<SandboxdClientWithSecret, Status> {
        Ok(self.sandboxd_except(None).await?.0)
    }

    /// The pid of `kind`'s serving process, waiting for a (re)starting one as long as
    /// a helper may take to start (as sandboxd's callers do).
    async fn serving(&self, kind: HelperKind) -> Result<u32, Status> {
        let helper = self.helpers.of(kind);
        helper
            .serving_pid_except(None, HELPER_START_WAIT)
            .await
            .ok_or_else(|| reasons::helper_unavailable(format!("the {} is not serving", kind.name()), kind.name()))
    }

    /// A channel to `kind`'s process `pid`, whatever its state (its reconciliation),
    /// and the secret to present on it.
    async fn authenticated(
        &self,
        kind: HelperKind,
        pid: u32,
    ) -> Result<InterceptedService<Channel, PresentSecret>, Status> {
        let helper = self.helpers.of(kind);
        let channel =
            self.channel_to(helper, pid).await.map_err(|e| reasons::helper_unavailable(e.to_string(), kind.name()))?;
        Ok(InterceptedService::new(channel, PresentSecret::new(SUPERVISOR_PEER, &helper.secret())))
    }

    /// A client of the broker, waiting for a (re)starting one.
    pub async fn broker(&self) -> Result<BrokerClientWithSecret, Status> {
        self.broker_at(self.serving(HelperKind::Broker).await?).await
    }

    /// A client of the broker process `pid`, whatever its state: the supervisor's own
    /// reconciliation of a broker that is not yet serving calls.
    pub async fn broker_at(&self, pid: u32) -> Result<BrokerClientWithSecret, Status> {
        Ok(BrokerClient::new(self.authenticated(HelperKind::Broker, pid).await?))
    }

    /// A client of the gateway, waiting for a (re)starting one.
    pub async fn gateway(&self) -> Result<GatewayClientWithSecret, Status> {
        self.gateway_at(self.serving(HelperKind::Gateway).await?).await
    }

    /// A client of the gateway process `pid`, whatever its state (its reconciliation).
    pub async fn gateway_at(&self, pid: u32) -> Result<GatewayClientWithSecret, Status> {
        Ok(GatewayClient::new(self.authenticated(HelperKind::Gateway, pid).await?))
    }

    /// A client of the sandboxd process `pid`, whatever its state: the supervisor's
    /// own reconciliation of a process that is not yet serving calls.
    pub async fn sandboxd_at(&self, pid: u32) -> Result<SandboxdClientWithSecret, Status> {
        Ok(SandboxdClient::new(self.authenticated(HelperKind::Sandboxd, pid).await?))
    }

    /// A client of sandboxd and the pid it talks to; with `not`, of the process that
    /// replaces that one (a call found it gone).
    pub async fn sandboxd_except(&self, not: Option<u32>) -> Result<(SandboxdClientWithSecret, u32), Status> {
        let helper = self.helpers.of(HelperKind::Sandboxd);
        let unavailable = |message: String| reasons::helper_unavailable(message, "sandboxd");
        // A sandboxd that is starting (the supervisor's first moments) or restarting is
        // waited for, as long as a helper may take to start.
        let Some(pid) = helper.serving_pid_except(not, HELPER_START_WAIT).await else {
            use cc_proto::supervisor::v1::HelperState;
            return Err(match helper.snapshot().state {
                HelperState::Starting | HelperState::Backoff => reasons::helper_restarting(
                    format!("sandboxd is restarting and did not serve within {HELPER_START_WAIT:?}; retry"),
                    "sandboxd",
                ),
                _ => unavailable("sandboxd is not running; see ccctl helpers".into()),
            });
        };
        let channel = self.channel_to(helper, pid).await.map_err(|e| unavailable(e.to_string()))?;
        let auth = PresentSecret::new(SUPERVISOR_PEER, &helper.secret());
        Ok((SandboxdClient::new(InterceptedService::new(channel, auth)), pid))
    }
}

/// Runs `call` within `deadline`, or fails with `HELPER_TIMEOUT` naming `helper` (a
/// helper's name, or "runner") and `what` it was asked. A call that failed in the
/// transport (the process went away or shut down under it: "h2 protocol error",
/// "operation was canceled", words that name nobody) fails with `HELPER_RESTARTING`
/// naming `helper`; answers of the helper's own pass unchanged.
pub async fn within<T>(
    helper: &str,
    what: &str,
    deadline: Duration,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(deadline, call).await {
        Ok(Err(status)) if is_transport_failure(&status) => Err(reasons::helper_restarting(
            format!("{helper} went away during {what} ({}); retry", status.message()),
            helper,
        )),
        Ok(result) => result,
        Err(_) => Err(reasons::helper_timeout(helper, what, deadline)),
    }
}

/// A call that failed in the transport rather than with an answer of the helper's:
/// the helpers' own refusals carry a reason, or a code these are not.
pub fn is_transport_failure(status: &Status) -> bool {
    reasons::reason_of(status).is_none()
        && matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}
