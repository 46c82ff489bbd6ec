//! Why a run cannot start, be found, or carry out a call: typed here, turned into a
//! `tonic::Status` only at the service's edge ([`super::service`]), with the
//! `google.rpc.ErrorInfo` reason a client tells the refusal apart by.

use cc_proto::reasons;
use tonic::{Code, Status};

use super::RunState;
use crate::conversations::ConversationError;
use crate::ids::RunId;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no run {:?}", .0.shown())]
    NotFound(RunId),
    #[error("run {} is {} ({reason}); start a new one with `ccctl run start`", run_id.shown(), state.as_str())]
    Ended { run_id: RunId, state: RunState, reason: String },
    #[error("run {} is already stopping", .0.shown())]
    AlreadyStopping(RunId),
    #[error("{0}")]
    BadRequest(String),
    #[error("run {} is already working on a prompt; wait for its answer", .0.shown())]
    AgentBusy(RunId),
    #[error("a {} run has no agent to prompt; call its tools (`ccctl tool`) instead", .0.name())]
    NoAgent(cc_proto::common::v1::Adapter),
    /// The run's ACP agent ended or broke the protocol during a prompt.
    #[error("{0}")]
    AgentFailed(String),
    /// The gate denied the call, by a rule, a default, the command policy or the mode.
    /// `for_agent` is what an agent is told ([`cc_policy::denial`]).
    #[error("denied: {reason}")]
    GateDenied { reason: String, effect: String, origin: String, decided_by: String, for_agent: String },
    /// The gate asked, and no approver answered.
    #[error("denied: {reason}")]
    NoApprover { reason: String, for_agent: String },
    #[error("{0}")]
    Conversation(#[from] ConversationError),
    /// A helper's (sandboxd's or the runner's) own refusal, passed on as it came: it
    /// carries its reason already (`LINK_IN_ROOT`, `CONFINEMENT_REFUSED`, …).
    #[error("{}", .0.message())]
    Helper(Status),
    /// The run's runner did not start, or does not answer.
    #[error("{0}")]
    RunnerUnavailable(String),
    /// A helper died or restarted while the call was in flight; what ran may have
    /// been killed with it.
    #[error("{helper} restarted; the command was killed ({detail}): its output and exit are lost; run it again")]
    HelperGone { helper: &'static str, detail: String },
    /// sandboxd does not know a run the supervisor has live: it restarted since.
    #[error("sandboxd has lost run {}'s registration (it restarted since the run started); start a new run", .0.shown())]
    Unregistered(RunId),
    #[error("{0}")]
    Precondition(String),
    #[error("{0}")]
    Internal(String),
}

impl From<Status> for RunError {
    fn from(status: Status) -> Self {
        RunError::Helper(status)
    }
}

impl From<crate::store::StoreError> for RunError {
    fn from(e: crate::store::StoreError) -> Self {
        RunError::Internal(format!("the run store: {e}"))
    }
}

impl From<crate::ids::MintError> for RunError {
    fn from(e: crate::ids::MintError) -> Self {
        RunError::Internal(e.to_string())
    }
}

impl From<RunError> for Status {
    fn from(e: RunError) -> Status {
        let message = e.to_string();
        match e {
            RunError::NotFound(run_id) => {
                reasons::refusal(Code::NotFound, message, reasons::RUN_NOT_FOUND, &[("run_id", run_id.shown())])
            }
            RunError::Ended { run_id, state, .. } => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::RUN_ENDED,
                &[("run_id", run_id.shown()), ("state", state.as_str().to_owned())],
            ),
            RunError::AlreadyStopping(_) | RunError::Precondition(_) => Status::failed_precondition(message),
            RunError::AgentBusy(run_id) => {
                reasons::refusal(Code::FailedPrecondition, message, reasons::AGENT_BUSY, &[("run_id", run_id.shown())])
            }
            RunError::NoAgent(adapter) => reasons::refusal(
                Code::FailedPrecondition,
                message,
                reasons::NO_AGENT,
                &[("adapter", adapter.name().to_owned())],
            ),
            RunError::AgentFailed(_) => reasons::refusal(Code::Unavailable, message, reasons::AGENT_FAILED, &[]),
            RunError::BadRequest(_) => Status::invalid_argument(message),
            RunError::GateDenied { effect, origin, decided_by, .. } => reasons::refusal(
                Code::PermissionDenied,
                message,
                reasons::GATE_DENIED,
                &[("effect", effect), ("source", origin), ("decided_by", decided_by)],
            ),
            RunError::NoApprover { .. } => reasons::refusal(Code::PermissionDenied, message, reasons::NO_APPROVER, &[]),
            RunError::Conversation(e) => Status::from(e),
            RunError::Helper(status) => status,
            RunError::RunnerUnavailable(_) => reasons::helper_unavailable(message, "runner"),
            RunError::HelperGone { helper, .. } => reasons::helper_restarting(message, helper),
            RunError::Unregistered(_) => reasons::helper_unavailable(message, "sandboxd"),
            RunError::Internal(_) => Status::internal(message),
        }
    }
}
