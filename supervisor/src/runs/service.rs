//! `cc.supervisor.v1.Runs` on the client API socket: the RPC edge of [`RunManager`],
//! where its [`RunError`](super::RunError)s become statuses.

use std::sync::Arc;

use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::runs_server::Runs;
use cc_proto::time::{optional_timestamp, timestamp};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::traffic::MAX_RECORDS;
use super::{RunManager, RunRecord, RunState, StartRequest};
use crate::convert::path_bytes;
use crate::gate::wire;
use crate::ids::{ConversationId, RunId};
use crate::names;

pub struct RunsService {
    manager: Arc<RunManager>,
}

impl RunsService {
    pub fn new(manager: Arc<RunManager>) -> Self {
        Self { manager }
    }

    fn to_proto(&self, r: RunRecord) -> pb::Run {
        let live = self.manager.live_run(&RunId::from_wire(r.id.as_str()));
        let runner_pid = live.as_ref().map_or(0, |l| l.runner_pid());
        let git_gateway_bridged = live.as_ref().is_some_and(|l| l.gateway_bridged());
        let agent_command = live.as_ref().map(|l| l.agent_command.clone()).unwrap_or_default();
        let forwards = live.as_ref().map(|l| l.forwards.iter().map(|p| u32::from(*p)).collect()).unwrap_or_default();
        let resources = live.map(|l| {
            let usage = l.cgroup().map(|c| c.usage()).unwrap_or_default();
            pb::RunResources {
                enforcement: self.manager.enforcement().describe(),
                limits: Some(l.limits.to_proto()),
                memory_bytes: usage.memory_bytes,
                pids: usage.pids,
                cpu_usec: usage.cpu_usec,
            }
        });
        let tools = cc_policy::tools::registry(r.mode, r.network).iter().map(|t| t.name.to_owned()).collect();
        pb::Run {
            state: run_state(r.state) as i32,
            mode: wire::mode(r.mode) as i32,
            work_dir: path_bytes(&r.work_dir),
            run_id: r.id,
            conversation_id: r.conversation.into_string(),
            agent: r.agent,
            adapter: r.adapter as i32,
            network: r.network,
            runner_pid,
            start_time: Some(timestamp(r.started_unix_ms)),
            end_time: optional_timestamp(r.ended_unix_ms),
            end_reason: r.end_reason.unwrap_or_default(),
            tools,
            workspace_id: r.workspace,
            resources,
            git_gateway_bridged,
            git_gateway_port: if git_gateway_bridged { crate::runs::git_gateway::GIT_GATEWAY_PORT.into() } else { 0 },
            // GetRun's alone: a list of runs stays small whatever they reached.
            egress_traffic: vec![],
            agent_command,
            model_usage: vec![],
            model_budget_tokens: 0,
            forwards,
        }
    }
}

fn run_state(state: RunState) -> pb::RunState {
    match state {
        RunState::Starting => pb::RunState::Starting,
        RunState::Running => pb::RunState::Running,
        RunState::Stopped => pb::RunState::Stopped,
        RunState::Failed => pb::RunState::Failed,
    }
}

fn or_default(value: String, default: &str) -> String {
    if value.is_empty() { default.to_owned() } else { value }
}

#[tonic::async_trait]
impl Runs for RunsService {
    async fn start_run(&self, request: Request<pb::StartRunRequest>) -> Result<Response<pb::StartRunResponse>, Status> {
        let r = request.into_inner();
        let agent = or_default(r.agent, "default");
        names::check("agent", &agent).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let request = StartRequest {
            conversation: ConversationId::from_wire(r.conversation_id),
            agent,
            mode: wire::mode_from(r.mode)?,
            adapter: wire::adapter_from(r.adapter)?,
            agent_command: r.agent_command,
            network: r.network,
            limits: r.limits,
            model_budget_tokens: r.model_budget_tokens,
            forwards: r.forwards,
        };
        let live = self.manager.start(request).await?;
        Ok(Response::new(pb::StartRunResponse { run: Some(self.to_proto(live.current())) }))
    }

    async fn list_runs(&self, request: Request<pb::ListRunsRequest>) -> Result<Response<pb::ListRunsResponse>, Status> {
        let conversation = request.into_inner().conversation_id;
        let filter = (!conversation.is_empty()).then_some(conversation.as_str());
        let runs = self.manager.records(filter)?.into_iter().map(|r| self.to_proto(r)).collect();
        Ok(Response::new(pb::ListRunsResponse { runs }))
    }

    async fn get_run(&self, request: Request<pb::GetRunRequest>) -> Result<Response<pb::GetRunResponse>, Status> {
        let record = self.manager.record(&RunId::from_wire(request.into_inner().run_id))?;
        let mut run = self.to_proto(record);
        let manager = self.manager.clone();
        let id = run.run_id.clone();
        let traffic = tokio::task::spawn_blocking(move || manager.egress_traffic(&id))
            .await
            .map_err(|e| Status::internal(format!("reading the run's egress failed: {e}")))?;
        match traffic {
            Ok(traffic) => run.egress_traffic = traffic.iter().map(|t| t.to_proto()).collect(),
            Err(e) => tracing::warn!(run = %run.run_id, error = %e, "cannot read the run's egress traffic"),
        }
        let (manager, id) = (self.manager.clone(), run.run_id.clone());
        let usage = tokio::task::spawn_blocking(move || manager.model_usage(&id))
            .await
            .map_err(|e| Status::internal(format!("reading the run's model usage failed: {e}")))?;
        run.model_usage = usage;
        if let Some(live) = self.manager.live_run(&RunId::from_wire(run.run_id.as_str())) {
            run.model_budget_tokens = live.model_budget_tokens;
        }
        Ok(Response::new(pb::GetRunResponse { run: Some(run) }))
    }

    async fn stop_run(&self, request: Request<pb::StopRunRequest>) -> Result<Response<pb::StopRunResponse>, Status> {
        let id = RunId::from_wire(request.into_inner().run_id);
        self.manager.stop(&id, "stopped on request").await?;
        Ok(Response::new(pb::StopRunResponse { run: Some(self.to_proto(self.manager.record(&id)?)) }))
    }

    async fn list_run_credentials(
        &self,
        request: Request<pb::ListRunCredentialsRequest>,
    ) -> Result<Response<pb::ListRunCredentialsResponse>, Status> {
        let id = RunId::from_wire(request.into_inner().run_id);
        Ok(Response::new(pb::ListRunCredentialsResponse { leases: self.manager.credentials(&id).await? }))
    }

    type CallToolStream = ReceiverStream<Result<pb::CallToolResponse, Status>>;

    async fn call_tool(&self, request: Request<pb::CallToolRequest>) -> Result<Response<Self::CallToolStream>, Status> {
        let r = request.into_inner();
        if r.tool.is_none() {
            return Err(Status::invalid_argument("the request has no call"));
        }
        Ok(Response::new(self.manager.tools().call_tool(&RunId::from_wire(r.run_id), r.tool).await?))
    }

    async fn record_egress(
        &self,
        request: Request<pb::RecordEgressRequest>,
    ) -> Result<Response<pb::RecordEgressResponse>, Status> {
        let records = request.into_inner().records;
        if records.len() > MAX_RECORDS {
            return Err(Status::invalid_argument(format!(
                "{} egress records in one request; send at most {MAX_RECORDS}",
                records.len()
            )));
        }
        let manager = self.manager.clone();
        let recorded = tokio::task::spawn_blocking(move || manager.record_egress(records))
            .await
            .map_err(|e| Status::internal(format!("recording egress failed: {e}")))?
            .map_err(|e| Status::internal(format!("cannot record egress: {e}")))?;
        Ok(Response::new(pb::RecordEgressResponse { recorded }))
    }

    async fn record_model_usage(
        &self,
        request: Request<pb::RecordModelUsageRequest>,
    ) -> Result<Response<pb::RecordModelUsageResponse>, Status> {
        let refusal = self.manager.record_model_usage(request.into_inner()).await?;
        Ok(Response::new(pb::RecordModelUsageResponse { refusal }))
    }

    async fn decide_tool_use(
        &self,
        request: Request<pb::DecideToolUseRequest>,
    ) -> Result<Response<pb::DecideToolUseResponse>, Status> {
        let r = request.into_inner();
        let tool_use = r.tool_use.ok_or_else(|| Status::invalid_argument("the request holds no tool call"))?;
        let (decision, reason) = self.manager.tools().decide_tool_use(&RunId::from_wire(r.run_id), &tool_use).await?;
        Ok(Response::new(pb::DecideToolUseResponse { decision: decision as i32, reason }))
    }

    type PromptRunStream = tokio_stream::wrappers::ReceiverStream<Result<pb::PromptRunResponse, Status>>;

    async fn prompt_run(
        &self,
        request: Request<pb::PromptRunRequest>,
    ) -> Result<Response<Self::PromptRunStream>, Status> {
        let r = request.into_inner();
        Ok(Response::new(
            self.manager.prompts().prompt(&RunId::from_wire(r.run_id), r.prompt, r.timeout_seconds).await?,
        ))
    }

    async fn call_product_tool(
        &self,
        request: Request<pb::CallProductToolRequest>,
    ) -> Result<Response<pb::CallProductToolResponse>, Status> {
        let r = request.into_inner();
        let call = r.call.ok_or_else(|| Status::invalid_argument("the request holds no call"))?;
        let result = self.manager.tools().call_product_tool(&RunId::from_wire(r.run_id), call).await?;
        Ok(Response::new(pb::CallProductToolResponse { result: Some(result) }))
    }
}
