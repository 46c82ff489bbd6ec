//! The gateway's two callees: the broker (tokens) and the supervisor (the gate, for
//! each pushed ref, new destination and agent tool call; the egress records). Every call has a deadline; a channel that failed is opened again on
//! the next call, so a restarted broker or supervisor is found again.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use cc_proto::broker::v1 as bk;
use cc_proto::broker::v1::broker_client::BrokerClient;
use cc_proto::client::{self, PresentSecret};
use cc_proto::secret::PeerSecret;
use cc_proto::supervisor::v1 as sv;
use cc_proto::supervisor::v1::gate_client::GateClient;
use cc_proto::supervisor::v1::runs_client::RunsClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// How long a token call may take (the provider's own calls are bounded at 30 s).
const BROKER_DEADLINE: Duration = Duration::from_secs(40);

/// How long the broker may take to swap a placeholder for a key (a file read).
const MODEL_KEY_DEADLINE: Duration = Duration::from_secs(5);

/// How long the supervisor may take to store a batch of egress records.
const RECORD_DEADLINE: Duration = Duration::from_secs(5);

/// A token and the lease it belongs to. Its `Debug` never shows the token.
pub struct Token {
    pub secret: String,
    pub lease_id: i64,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token {{ lease_id: {}, secret: [redacted] }}", self.lease_id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the {peer} cannot be reached: {why}")]
    Unreachable { peer: &'static str, why: String },
    #[error("the {peer} did not answer {what} within {after:?}")]
    Timeout { peer: &'static str, what: &'static str, after: Duration },
    #[error("the {peer} refused {what}: {message}")]
    Refused { peer: &'static str, what: &'static str, message: String, reason: Option<String> },
}

pub struct Peers {
    broker_socket: PathBuf,
    broker_secret: Option<PeerSecret>,
    supervisor_socket: PathBuf,
    gate_deadline: Duration,
    broker: Mutex<Option<Channel>>,
    supervisor: Mutex<Option<Channel>>,
}

impl Peers {
    pub fn new(
        broker_socket: PathBuf,
        broker_secret: Option<PeerSecret>,
        supervisor_socket: PathBuf,
        gate_deadline: Duration,
    ) -> Self {
        Self {
            broker_socket,
            broker_secret,
            supervisor_socket,
            gate_deadline,
            broker: Mutex::default(),
            supervisor: Mutex::default(),
        }
    }

    async fn channel(
        slot: &Mutex<Option<Channel>>,
        socket: &std::path::Path,
        peer: &'static str,
    ) -> Result<Channel, PeerError> {
        if let Some(channel) = slot.lock().ok().and_then(|c| c.clone()) {
            return Ok(channel);
        }
        let channel = client::connect(socket).await.map_err(|e| PeerError::Unreachable { peer, why: e.to_string() })?;
        if let Ok(mut cached) = slot.lock() {
            *cached = Some(channel.clone());
        }
        Ok(channel)
    }

    /// Runs a call within `deadline`; a failed transport drops the cached channel.
    async fn within<T>(
        &self,
        slot: &Mutex<Option<Channel>>,
        peer: &'static str,
        what: &'static str,
        deadline: Duration,
        call: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, PeerError> {
        let outcome = tokio::time::timeout(deadline, call).await;
        let forget = || {
            if let Ok(mut cached) = slot.lock() {
                *cached = None;
            }
        };
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(status)) => {
                if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) {
                    forget();
                }
                let reason = cc_proto::reasons::reason_of(&status).map(|(reason, _)| reason);
                Err(PeerError::Refused { peer, what, message: status.message().to_owned(), reason })
            }
            Err(_) => {
                forget();
                Err(PeerError::Timeout { peer, what, after: deadline })
            }
        }
    }

    async fn broker(&self) -> Result<BrokerClient<InterceptedService<Channel, PresentSecret>>, PeerError> {
        let secret = self
            .broker_secret
            .as_ref()
            .ok_or(PeerError::Unreachable { peer: "broker", why: "the gateway was given no broker secret".into() })?;
        let channel = Self::channel(&self.broker, &self.broker_socket, "broker").await?;
        Ok(BrokerClient::new(InterceptedService::new(channel, PresentSecret::new("gateway", secret))))
    }

    /// The run's read token.
    pub async fn read_token(&self, run: &str) -> Result<Token, PeerError> {
        let mut broker = self.broker().await?;
        let call = broker.get_read_token(bk::GetReadTokenRequest { run_id: run.to_owned() });
        let r = self.within(&self.broker, "broker", "GetReadToken", BROKER_DEADLINE, call).await?.into_inner();
        Ok(Token { secret: r.token, lease_id: r.lease_id })
    }

    /// A token for one push to `repository`.
    pub async fn write_token(&self, run: &str, repository: &str) -> Result<Token, PeerError> {
        let mut broker = self.broker().await?;
        let call = broker.issue_write_token(bk::IssueWriteTokenRequest {
            run_id: run.to_owned(),
            repository: repository.to_owned(),
            access: bk::WriteAccess::Unspecified as i32,
        });
        let r = self.within(&self.broker, "broker", "IssueWriteToken", BROKER_DEADLINE, call).await?.into_inner();
        Ok(Token { secret: r.token, lease_id: r.lease_id })
    }

    /// The run's model placeholder, for its agent.
    pub async fn model_placeholder(&self, run: &str) -> Result<String, PeerError> {
        let mut broker = self.broker().await?;
        let call = broker.get_model_placeholder(bk::GetModelPlaceholderRequest { run_id: run.to_owned() });
        Ok(self
            .within(&self.broker, "broker", "GetModelPlaceholder", BROKER_DEADLINE, call)
            .await?
            .into_inner()
            .placeholder)
    }

    /// The provider's real key, for a request that presented `placeholder` on the run's
    /// model door. Never logged, never in an answer to the run.
    pub async fn exchange_model_placeholder(
        &self,
        run: &str,
        provider: &str,
        placeholder: &str,
    ) -> Result<String, PeerError> {
        let mut broker = self.broker().await?;
        let call = broker.exchange_model_placeholder(bk::ExchangeModelPlaceholderRequest {
            run_id: run.to_owned(),
            provider: provider.to_owned(),
            placeholder: placeholder.to_owned(),
        });
        let answer = self.within(&self.broker, "broker", "ExchangeModelPlaceholder", MODEL_KEY_DEADLINE, call).await?;
        Ok(answer.into_inner().api_key)
    }

    /// One model request's record; the answer is the run's refusal, if it may make no
    /// more.
    pub async fn record_model_usage(&self, request: sv::RecordModelUsageRequest) -> Result<String, PeerError> {
        let channel = Self::channel(&self.supervisor, &self.supervisor_socket, "supervisor").await?;
        let mut runs = RunsClient::new(channel);
        let call = runs.record_model_usage(request);
        Ok(self
            .within(&self.supervisor, "supervisor", "RecordModelUsage", RECORD_DEADLINE, call)
            .await?
            .into_inner()
            .refusal)
    }

    /// Revokes a write token once its push is done. A failure is the broker's to retry
    /// (it records failed revokes), and the run's end revokes it at the latest.
    pub async fn revoke_write_token(&self, run: &str, token: Token) {
        let revoke = async {
            let mut broker = self.broker().await?;
            let call = broker
                .revoke_write_token(bk::RevokeWriteTokenRequest { run_id: run.to_owned(), lease_id: token.lease_id });
            self.within(&self.broker, "broker", "RevokeWriteToken", BROKER_DEADLINE, call).await
        };
        if let Err(e) = revoke.await {
            tracing::warn!(run, lease = token.lease_id, error = %e, "a push's write token was not revoked now; the run's end revokes it");
        }
    }

    /// The gate's decision on one action; an ask waits for an approver, so the
    /// deadline is the approval timeout plus a call's.
    pub async fn decide(&self, action: sv::Action) -> Result<sv::DecideActionResponse, PeerError> {
        let channel = Self::channel(&self.supervisor, &self.supervisor_socket, "supervisor").await?;
        let mut gate = GateClient::new(channel);
        let call = gate.decide_action(sv::DecideActionRequest { action: Some(action) });
        Ok(self.within(&self.supervisor, "supervisor", "DecideAction", self.gate_deadline, call).await?.into_inner())
    }

    /// The gate's decision on one of an agent's own tool calls, asked through its run's
    /// agent socket; an ask waits for an approver, as [`Self::decide`].
    pub async fn decide_tool_use(
        &self,
        request: sv::DecideToolUseRequest,
    ) -> Result<sv::DecideToolUseResponse, PeerError> {
        let channel = Self::channel(&self.supervisor, &self.supervisor_socket, "supervisor").await?;
        let mut runs = RunsClient::new(channel);
        let call = runs.decide_tool_use(request);
        Ok(self.within(&self.supervisor, "supervisor", "DecideToolUse", self.gate_deadline, call).await?.into_inner())
    }

    /// One of the product's tools for a run's agent: the supervisor asks the gate and
    /// makes the write; an ask waits for an approver, as [`Self::decide`].
    pub async fn call_product_tool(
        &self,
        request: sv::CallProductToolRequest,
    ) -> Result<sv::CallProductToolResponse, PeerError> {
        let channel = Self::channel(&self.supervisor, &self.supervisor_socket, "supervisor").await?;
        let mut runs = RunsClient::new(channel);
        let call = runs.call_product_tool(request);
        Ok(self.within(&self.supervisor, "supervisor", "CallProductTool", self.gate_deadline, call).await?.into_inner())
    }

    /// Hands what the run's proxies saw to the supervisor ([`crate::door::report`]).
    pub async fn record_egress(&self, records: Vec<sv::EgressRecord>) -> Result<(), PeerError> {
        let channel = Self::channel(&self.supervisor, &self.supervisor_socket, "supervisor").await?;
        let mut runs = RunsClient::new(channel);
        let call = runs.record_egress(sv::RecordEgressRequest { records });
        self.within(&self.supervisor, "supervisor", "RecordEgress", RECORD_DEADLINE, call).await?;
        Ok(())
    }
}
