//! The helper process: health and status over its socket.

use cc_proto::gateway::v1::gateway_server::{Gateway, GatewayServer};
use cc_proto::gateway::v1::{GetStatusRequest, GetStatusResponse};
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use tonic::{Request, Response, Status};

pub const SPEC: HelperSpec = HelperSpec { name: "gateway", capabilities: CapabilityPolicy::DropAll };

pub struct GatewayService {
    context: HelperContext,
}

#[tonic::async_trait]
impl Gateway for GatewayService {
    async fn get_status(&self, _request: Request<GetStatusRequest>) -> Result<Response<GetStatusResponse>, Status> {
        Ok(Response::new(GetStatusResponse { status: Some(self.context.status()) }))
    }
}

pub fn service(context: &HelperContext) -> Result<GatewayServer<GatewayService>, std::convert::Infallible> {
    Ok(GatewayServer::new(GatewayService { context: context.clone() }).max_decoding_message_size(MAX_MESSAGE_BYTES))
}
