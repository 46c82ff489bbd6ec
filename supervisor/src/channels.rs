//! Channels to the helpers, one per helper process (keyed by pid), so that a call costs
//! one round trip rather than a connection and an HTTP/2 handshake. A channel is only
//! ever opened to the pid we started (`SO_PEERCRED`), and presents that process's secret.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cc_proto::client::{self, PresentSecret};
use cc_proto::reasons;
use cc_proto::sandboxd::v1::sandboxd_client::SandboxdClient;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::helpers::{Helper, HelperKind, HelperSet, SUPERVISOR_PEER};

/// How long a call waits for a helper that is starting or restarting.
const HELPER_START_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub type SandboxdClientWithSecret = SandboxdClient<InterceptedService<Channel, PresentSecret>>;

pub struct HelperChannels {
    helpers: Arc<HelperSet>,
    cache: Mutex<HashMap<HelperKind, (u32, Channel)>>,
}

impl HelperChannels {
    pub fn new(helpers: Arc<HelperSet>) -> Self {
        Self { helpers, cache: Mutex::default() }
    }

    pub fn helpers(&self) -> &Arc<HelperSet> {
        &self.helpers
    }

    pub async fn channel_to(&self, helper: &Helper, pid: u32) -> Result<Channel, client::ConnectError> {
        if let Some((cached_pid, channel)) = self.cache.lock().ok().and_then(|c| c.get(&helper.kind()).cloned())
            && cached_pid == pid
        {
            return Ok(channel);
        }
        let channel = client::connect_checked(helper.socket(), Some(pid)).await?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(helper.kind(), (pid, channel.clone()));
        }
        Ok(channel)
    }

    /// A client of sandboxd, over the cached channel to its current process.
    pub async fn sandboxd(&self) -> Result<SandboxdClientWithSecret, Status> {
        let helper = self.helpers.of(HelperKind::Sandboxd);
        let unavailable = |message: String| reasons::helper_unavailable(message, "sandboxd");
        // A sandboxd that is starting (the supervisor's first moments) or restarting is
        // waited for, as long as a helper may take to start.
        let pid = helper
            .serving_pid(HELPER_START_WAIT)
            .await
            .ok_or_else(|| unavailable("sandboxd is not running; see ccctl helpers".into()))?;
        let channel = self.channel_to(helper, pid).await.map_err(|e| unavailable(e.to_string()))?;
        Ok(SandboxdClient::new(InterceptedService::new(channel, PresentSecret::new(SUPERVISOR_PEER, &helper.secret()))))
    }
}
