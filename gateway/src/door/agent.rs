//! The run's agent socket (`agent.sock`): `cc.agent.v1.AgentGate`, asked by what runs
//! beside the agent in its envelope (cc-hook before each tool call). The run is the
//! socket's: a caller can only ask about the run whose envelope it is in.
//!
//! Every failure to reach the gate is a DENY with its reason, never an error the
//! caller might read as "no answer, go ahead": an unreachable gate is a deny (DESIGN.md
//! §2, rule 5).

use std::sync::Arc;

use cc_proto::agent::v1 as pb;
use cc_proto::agent::v1::agent_gate_server::{AgentGate, AgentGateServer};
use cc_proto::agent::v1::tool_use::Input;
use cc_proto::common::v1::Decision;
use cc_proto::supervisor::v1 as sv;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixStream;
use tonic::{Request, Response, Status};

use super::{RunDoor, Shared};

/// The longest command line a Bash call may ask about.
pub const MAX_TOOL_INPUT_BYTES: usize = 1 << 20;
/// The longest path a file tool may name.
pub const MAX_TOOL_PATH_BYTES: usize = 4096;
/// A request is the command and a few short fields.
const MAX_REQUEST_BYTES: usize = MAX_TOOL_INPUT_BYTES + 64 * 1024;
/// Questions one connection may have in flight: each may wait for an approver.
const MAX_STREAMS_PER_CONNECTION: u32 = 4;
const MAX_TOOL_NAME: usize = 256;
const MAX_CWD: usize = 4096;

struct AgentService {
    door: Arc<RunDoor>,
    shared: Arc<Shared>,
}

fn deny(reason: impl Into<String>) -> pb::DecideToolUseResponse {
    pb::DecideToolUseResponse { decision: Decision::Deny as i32, reason: reason.into() }
}

/// What is wrong with a question before anyone is asked it.
fn malformed(tool_use: &pb::ToolUse) -> Option<String> {
    if tool_use.tool_name.is_empty() {
        return Some("the tool call names no tool".into());
    }
    if tool_use.tool_name.len() > MAX_TOOL_NAME || tool_use.tool_name.chars().any(char::is_control) {
        return Some("the tool's name is over 256 bytes or holds control characters".into());
    }
    match &tool_use.input {
        Some(Input::Command(command)) if command.len() > MAX_TOOL_INPUT_BYTES => {
            return Some(format!("the tool's command is over {MAX_TOOL_INPUT_BYTES} bytes"));
        }
        Some(Input::Path(path)) if path.len() > MAX_TOOL_PATH_BYTES => {
            return Some(format!("the tool's path is over {MAX_TOOL_PATH_BYTES} bytes"));
        }
        _ => {}
    }
    if tool_use.cwd.len() > MAX_CWD || tool_use.permission_mode.len() > MAX_TOOL_NAME {
        return Some("the working directory or permission mode is too long".into());
    }
    None
}

#[tonic::async_trait]
impl AgentGate for AgentService {
    async fn decide_tool_use(
        &self,
        request: Request<pb::DecideToolUseRequest>,
    ) -> Result<Response<pb::DecideToolUseResponse>, Status> {
        let Some(tool_use) = request.into_inner().tool_use else {
            return Ok(Response::new(deny("the request holds no tool call")));
        };
        if let Some(why) = malformed(&tool_use) {
            return Ok(Response::new(deny(why)));
        }
        let run = &self.door.run_id;
        let tool = tool_use.tool_name.clone();
        let asked = sv::DecideToolUseRequest { run_id: run.clone(), tool_use: Some(tool_use) };
        let answer = match self.shared.peers.decide_tool_use(asked).await {
            Ok(r) if r.decision == Decision::Allow as i32 => {
                pb::DecideToolUseResponse { decision: r.decision, reason: r.reason }
            }
            Ok(r) => deny(r.reason),
            Err(e) => deny(format!("Control Center could not ask the gate ({e}); denied")),
        };
        tracing::info!(
            run,
            tool,
            allowed = answer.decision == Decision::Allow as i32,
            "an agent's tool call was decided"
        );
        Ok(Response::new(answer))
    }

    async fn get_model_placeholder(
        &self,
        _: Request<pb::GetModelPlaceholderRequest>,
    ) -> Result<Response<pb::GetModelPlaceholderResponse>, Status> {
        // Only a placeholder: what holds it can reach the provider through this run's
        // model door and nowhere else, so any process of the run may have it.
        if self.door.models.is_empty() {
            return Err(cc_proto::reasons::refusal(
                tonic::Code::FailedPrecondition,
                "this run has no model provider ([models.NAME] in config.toml)".to_owned(),
                cc_proto::reasons::NO_CREDENTIAL,
                &[("run_id", self.door.run_id.clone())],
            ));
        }
        match self.shared.peers.model_placeholder(&self.door.run_id).await {
            Ok(placeholder) => Ok(Response::new(pb::GetModelPlaceholderResponse { placeholder })),
            Err(e) => Err(Status::failed_precondition(format!("no model placeholder for this run: {e}"))),
        }
    }

    async fn call_product_tool(
        &self,
        request: Request<pb::CallProductToolRequest>,
    ) -> Result<Response<pb::CallProductToolResponse>, Status> {
        let failed = |message: String| pb::ProductToolResult { ok: false, message, ..Default::default() };
        let Some(call) = request.into_inner().call else {
            return Ok(Response::new(pb::CallProductToolResponse {
                result: Some(failed("the request holds no call".into())),
            }));
        };
        let asked = sv::CallProductToolRequest { run_id: self.door.run_id.clone(), call: Some(call) };
        let result = match self.shared.peers.call_product_tool(asked).await {
            Ok(r) => r.result.unwrap_or_else(|| failed("the supervisor gave no result".into())),
            Err(e) => failed(format!("Control Center could not carry out the call ({e}); nothing was written")),
        };
        Ok(Response::new(pb::CallProductToolResponse { result: Some(result) }))
    }
}

/// Serves one connection: HTTP/2, gRPC, this run's questions only.
pub async fn serve(stream: UnixStream, door: Arc<RunDoor>, shared: Arc<Shared>) {
    let service = AgentGateServer::new(AgentService { door, shared })
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .max_encoding_message_size(64 * 1024);
    let service = hyper_util::service::TowerToHyperService::new(service);
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if let Err(e) = http2.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(error = %e, "an agent socket connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, input: Option<Input>) -> pb::ToolUse {
        pb::ToolUse { tool_name: name.into(), input, ..Default::default() }
    }

    #[test]
    fn malformed_questions_are_refused_before_anyone_is_asked() {
        assert!(malformed(&call("Bash", Some(Input::Command("ls".into())))).is_none());
        assert!(malformed(&call("", None)).unwrap().contains("names no tool"));
        assert!(malformed(&call("Ba\nsh", None)).unwrap().contains("control"));
        assert!(malformed(&call(&"x".repeat(257), None)).unwrap().contains("256"));
        let long = Some(Input::Command("x".repeat(MAX_TOOL_INPUT_BYTES + 1)));
        assert!(malformed(&call("Bash", long)).unwrap().contains("command"));
        let long = Some(Input::Path("x".repeat(MAX_TOOL_PATH_BYTES + 1)));
        assert!(malformed(&call("Write", long)).unwrap().contains("path"));
        let mut long_cwd = call("Bash", None);
        long_cwd.cwd = "/".repeat(MAX_CWD + 1);
        assert!(malformed(&long_cwd).is_some());
    }
}
