//! The Control Center's client: `ccctl` ([`cli`]) and the connection to the client API
//! that it, the tests and the benchmarks share. A crate of its own so that the client
//! links neither the daemon's code nor its storage (SQLite): it needs the wire types
//! (`cc-proto`) and the data directory's layout, nothing the supervisor keeps.
#![forbid(unsafe_code)]

pub mod cli;
pub mod handback;
pub mod install;
pub mod refusal;

use std::path::Path;

use cc_proto::client::{self, ConnectError};
use cc_proto::helper::MAX_MESSAGE_BYTES;
use cc_proto::supervisor::v1::conversations_client::ConversationsClient;
use cc_proto::supervisor::v1::gate_client::GateClient;
use cc_proto::supervisor::v1::repositories_client::RepositoriesClient;
use cc_proto::supervisor::v1::rigs_client::RigsClient;
use cc_proto::supervisor::v1::runs_client::RunsClient;
use cc_proto::supervisor::v1::sandbox_client::SandboxClient;
use cc_proto::supervisor::v1::system_client::SystemClient;
use cc_proto::supervisor::v1::terminals_client::TerminalsClient;
use cc_proto::supervisor::v1::workspaces_client::WorkspacesClient;
use tonic::transport::Channel;

pub type Gate = GateClient<Channel>;
pub type Runs = RunsClient<Channel>;

/// Every service of the client API, over one connection.
#[derive(Clone)]
pub struct Client {
    pub system: SystemClient<Channel>,
    pub workspaces: WorkspacesClient<Channel>,
    pub repositories: RepositoriesClient<Channel>,
    pub conversations: ConversationsClient<Channel>,
    pub sandbox: SandboxClient<Channel>,
    pub runs: Runs,
    pub gate: Gate,
    pub terminals: TerminalsClient<Channel>,
    pub rigs: RigsClient<Channel>,
}

impl Client {
    pub fn new(channel: Channel) -> Self {
        let max = MAX_MESSAGE_BYTES;
        Self {
            system: SystemClient::new(channel.clone()).max_decoding_message_size(max),
            workspaces: WorkspacesClient::new(channel.clone()).max_decoding_message_size(max),
            repositories: RepositoriesClient::new(channel.clone()).max_decoding_message_size(max),
            conversations: ConversationsClient::new(channel.clone()).max_decoding_message_size(max),
            sandbox: SandboxClient::new(channel.clone()).max_decoding_message_size(max),
            runs: RunsClient::new(channel.clone()).max_decoding_message_size(max),
            gate: GateClient::new(channel.clone()).max_decoding_message_size(max),
            terminals: TerminalsClient::new(channel.clone()).max_decoding_message_size(max),
            rigs: RigsClient::new(channel).max_decoding_message_size(max),
        }
    }
}

/// Connects to the client API socket (checking that the supervisor listening is of our
/// uid or root).
pub async fn connect(api_socket: &Path) -> Result<Client, ConnectError> {
    Ok(Client::new(client::connect(api_socket).await?))
}

pub async fn connect_gate(api_socket: &Path) -> Result<Gate, ConnectError> {
    Ok(connect(api_socket).await?.gate)
}

pub async fn connect_runs(api_socket: &Path) -> Result<Runs, ConnectError> {
    Ok(connect(api_socket).await?.runs)
}
