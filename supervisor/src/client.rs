//! The client library behind ccctl (and the tests): a connection to the client API.

use std::path::Path;

use cc_proto::client::{self, ConnectError};
use cc_proto::helper::MAX_MESSAGE_BYTES;
use cc_proto::supervisor::v1::gate_client::GateClient;
use cc_proto::supervisor::v1::runs_client::RunsClient;
use cc_proto::supervisor::v1::supervisor_client::SupervisorClient;
use tonic::transport::Channel;

pub type Client = SupervisorClient<Channel>;
pub type Gate = GateClient<Channel>;
pub type Runs = RunsClient<Channel>;

pub async fn connect(api_socket: &Path) -> Result<Client, ConnectError> {
    Ok(supervisor(client::connect(api_socket).await?))
}

pub async fn connect_gate(api_socket: &Path) -> Result<Gate, ConnectError> {
    Ok(gate(client::connect(api_socket).await?))
}

pub fn supervisor(channel: Channel) -> Client {
    SupervisorClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

pub fn gate(channel: Channel) -> Gate {
    GateClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

pub async fn connect_runs(api_socket: &Path) -> Result<Runs, ConnectError> {
    Ok(runs(client::connect(api_socket).await?))
}

pub fn runs(channel: Channel) -> Runs {
    RunsClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}
