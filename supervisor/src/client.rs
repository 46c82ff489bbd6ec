//! The client library behind ccctl (and the tests): a connection to the client API.

use std::path::Path;

use cc_proto::client::{self, ConnectError};
use cc_proto::helper::MAX_MESSAGE_BYTES;
use cc_proto::supervisor::v1::supervisor_client::SupervisorClient;
use tonic::transport::Channel;

pub type Client = SupervisorClient<Channel>;

pub async fn connect(api_socket: &Path) -> Result<Client, ConnectError> {
    let channel = client::connect(api_socket).await?;
    Ok(SupervisorClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
}
