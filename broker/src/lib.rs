//! cc-broker: credential issuance and revocation. The helper serves health and its
//! status; the lease store and the providers below are what the run credentials are
//! being built on (issue 20).
#![forbid(unsafe_code)]

pub mod credentials;
pub mod github_app;
pub mod leases;
pub mod revoke;
pub mod secret;
pub mod static_tokens;

use cc_proto::broker::v1::broker_server::{Broker, BrokerServer};
use cc_proto::broker::v1::{GetStatusRequest, GetStatusResponse};
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use tonic::{Request, Response, Status};

pub const SPEC: HelperSpec = HelperSpec { name: "broker", capabilities: CapabilityPolicy::DropAll };

pub struct BrokerService {
    context: HelperContext,
}

#[tonic::async_trait]
impl Broker for BrokerService {
    async fn get_status(&self, _request: Request<GetStatusRequest>) -> Result<Response<GetStatusResponse>, Status> {
        Ok(Response::new(GetStatusResponse { status: Some(self.context.status()) }))
    }
}

pub fn service(context: &HelperContext) -> Result<BrokerServer<BrokerService>, std::convert::Infallible> {
    Ok(BrokerServer::new(BrokerService { context: context.clone() }).max_decoding_message_size(MAX_MESSAGE_BYTES))
}
