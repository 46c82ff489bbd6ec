//! cc-runner: one per agent execution; it will host the harness tools. For now it serves health
//! and its status; [`confine`] is the path confinement the file tools are built on.
#![forbid(unsafe_code)]

pub mod confine;
pub mod files;
pub mod patch;
pub mod search;
pub mod walk;

use cc_proto::common::v1::{GetStatusRequest, HelperStatus};
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use cc_proto::runner::v1::runner_server::{Runner, RunnerServer};
use tonic::{Request, Response, Status};

pub const SPEC: HelperSpec = HelperSpec { name: "runner", capabilities: CapabilityPolicy::DropAll };

pub struct RunnerService {
    context: HelperContext,
}

#[tonic::async_trait]
impl Runner for RunnerService {
    async fn get_status(&self, _request: Request<GetStatusRequest>) -> Result<Response<HelperStatus>, Status> {
        Ok(Response::new(self.context.status()))
    }
}

pub fn service(context: &HelperContext) -> RunnerServer<RunnerService> {
    RunnerServer::new(RunnerService { context: context.clone() }).max_decoding_message_size(MAX_MESSAGE_BYTES)
}
