//! cc-sandboxd: the one helper that may keep privileges. It will build envelopes and launch every
//! process that runs agent code; for now it serves health and its status.
#![forbid(unsafe_code)]

pub mod environment;

use cc_proto::common::v1::{GetStatusRequest, HelperStatus};
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use cc_proto::sandboxd::v1::sandboxd_server::{Sandboxd, SandboxdServer};
use tonic::{Request, Response, Status};

pub const SPEC: HelperSpec = HelperSpec { name: "sandboxd", capabilities: CapabilityPolicy::Keep };

pub struct SandboxdService {
    context: HelperContext,
}

#[tonic::async_trait]
impl Sandboxd for SandboxdService {
    async fn get_status(&self, _request: Request<GetStatusRequest>) -> Result<Response<HelperStatus>, Status> {
        Ok(Response::new(self.context.status()))
    }
}

pub fn service(context: &HelperContext) -> SandboxdServer<SandboxdService> {
    SandboxdServer::new(SandboxdService { context: context.clone() }).max_decoding_message_size(MAX_MESSAGE_BYTES)
}
