//! cc-runner: the run's own process, one per run, in an envelope of the run's. It hosts
//! the harness file tools ([`service`]) over the path confinement of [`confine`], and
//! reads the run's agent's output into typed steps ([`adapters`]). The supervisor
//! starts it with the run's roots in its bootstrap, asks the gate before every call,
//! and is the only peer it answers.
#![forbid(unsafe_code)]

pub mod adapters;
pub mod confine;
pub mod fetch;
pub mod files;
pub mod hook;
pub mod mcp;
pub mod patch;
pub mod search;
pub mod service;
pub mod walk;

use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use cc_proto::runner::v1::runner_server::{Runner, RunnerServer};
use cc_proto::runner::v1::{
    CallToolRequest, CallToolResponse, DriveAcpAgentRequest, GetStatusRequest, GetStatusResponse,
    ParseAgentOutputRequest,
};

use std::path::{Path, PathBuf};

use crate::confine::Roots;
use crate::service::{Tools, parse_roots};
use tonic::{Request, Response, Status, Streaming};

pub const SPEC: HelperSpec = HelperSpec { name: "runner", capabilities: CapabilityPolicy::DropAll };

pub struct RunnerService {
    context: HelperContext,
    tools: Tools,
}

#[tonic::async_trait]
impl Runner for RunnerService {
    async fn get_status(&self, _request: Request<GetStatusRequest>) -> Result<Response<GetStatusResponse>, Status> {
        Ok(Response::new(GetStatusResponse { status: Some(self.context.status()) }))
    }

    async fn call_tool(&self, request: Request<CallToolRequest>) -> Result<Response<CallToolResponse>, Status> {
        Ok(Response::new(CallToolResponse { result: Some(self.tools.call(request.into_inner()).await?) }))
    }

    type ParseAgentOutputStream = adapters::Steps;
    type DriveAcpAgentStream = adapters::acp::client::Outputs;

    async fn drive_acp_agent(
        &self,
        request: Request<Streaming<DriveAcpAgentRequest>>,
    ) -> Result<Response<Self::DriveAcpAgentStream>, Status> {
        Ok(Response::new(adapters::acp::client::drive(request.into_inner()).await?))
    }

    async fn parse_agent_output(
        &self,
        request: Request<Streaming<ParseAgentOutputRequest>>,
    ) -> Result<Response<Self::ParseAgentOutputStream>, Status> {
        Ok(Response::new(adapters::parse(request.into_inner()).await?))
    }
}

/// Why a runner cannot serve: it says so and exits, and the supervisor marks the run
/// failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(String);

pub fn service(context: &HelperContext) -> Result<RunnerServer<RunnerService>, StartError> {
    let roots = context
        .bootstrap
        .options
        .get("roots")
        .ok_or_else(|| "the bootstrap names no roots".to_owned())
        .and_then(|json| parse_roots(json))
        .and_then(|roots| Roots::open(roots).map_err(|e| format!("cannot open the run's roots: {e}")))
        .and_then(|roots| match context.bootstrap.options.get("home") {
            Some(home) => roots.with_home(Path::new(home)).map_err(|e| format!("the run's HOME: {e}")),
            None => Ok(roots),
        });
    let roots = roots.map_err(StartError)?;
    // Only a run whose network is on is told its proxy's socket.
    let egress_proxy = context.bootstrap.options.get("egress_proxy").map(PathBuf::from);
    Ok(RunnerServer::new(RunnerService { context: context.clone(), tools: Tools::new(roots, egress_proxy) })
        .max_decoding_message_size(MAX_MESSAGE_BYTES))
}
