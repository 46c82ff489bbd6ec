//! A run's git front door. Every envelope of the run reaches the gateway's socket for
//! the run as `127.0.0.1:GIT_GATEWAY_PORT`, and the run's git config sends every
//! GitHub remote there. The config lives beside the socket, in the run's gateway
//! directory, which every envelope of the run shows read-only (the agent's config dir
//! is not in the harness bash's envelope, which shows its working directory alone). The gateway keeps
//! nothing of its own: each live run is registered when it starts and again whenever
//! a gateway process starts; a run's end closes its door.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cc_proto::gateway::v1 as gw;
use serde_json::json;

use super::{LiveRun, RunManager};
use crate::helpers::HelperKind;

/// The loopback port of the gateway inside a run's envelopes.
pub const GIT_GATEWAY_PORT: u16 = 41418;

/// The gateway's socket in the run's gateway directory.
pub const GIT_SOCKET: &str = "git.sock";

/// The run's git config, in its gateway directory.
pub const GITCONFIG_NAME: &str = "gitconfig";

/// Where sandboxd shows a bridge's directory inside an envelope (`/run/cc/bridges/PORT`).
pub fn gitconfig_inside() -> String {
    format!("/run/cc/bridges/{GIT_GATEWAY_PORT}/{GITCONFIG_NAME}")
}

/// A GitHub repository of a run, as the gateway and the gate see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHubRepo {
    /// `owner/name`, lower case.
    pub name: String,
    /// The registered repository's name for a checkout's origin; `owner/name` for a
    /// repository linked to the workspace.
    pub gate_name: String,
    pub default_branch: Option<String>,
}

/// Makes the run's gateway directory, `gateway/runs/<run>` under the data directory,
/// and writes the run's git config into it. Below the data directory every step goes
/// by handle and never through a link (the directory is the supervisor's, but nothing
/// here should rest on that): each directory is made or opened from its parent's
/// handle, made searchable by the run's user and not listable (sandboxd binds it before
/// the gateway has made its sockets there), and the config is a new file in it.
pub fn make_gateway_dir(data_root: &Path, run: &str) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::{Mode, fchmod};
    let errno = |e: nix::errno::Errno| std::io::Error::from_raw_os_error(e as i32);
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = open(data_root, flags, Mode::empty()).map_err(errno)?;
    for name in ["gateway", "runs", run] {
        cc_host::beneath::create_dir(&dir, name);
        dir = cc_host::beneath::child_dir(&dir, std::ffi::OsStr::new(name)).map_err(errno)?;
        fchmod(&dir, Mode::from_bits_truncate(0o711)).map_err(errno)?;
    }
    let text = super::gitconfig::run_gitconfig(GIT_GATEWAY_PORT, super::egress::HTTP_PROXY_PORT)
        .map_err(std::io::Error::other)?;
    // A new run's directory: the config is new, made exclusively and never through a link.
    if !cc_host::beneath::create_file(&dir, GITCONFIG_NAME, text.as_bytes()) {
        return Err(std::io::Error::other(format!("cannot make {GITCONFIG_NAME} in the run's gateway directory")));
    }
    Ok(())
}

/// `used`: the run's model tokens so far, from which a restarted gateway counts on.
fn register_request(run: &LiveRun, used: u64) -> gw::RegisterRunRequest {
    gw::RegisterRunRequest {
        run_id: run.record.id.clone(),
        workspace_id: run.record.workspace.clone(),
        mode: crate::gate::wire::mode(run.record.mode) as i32,
        uid: run.uid,
        gid: run.gid,
        repositories: run
            .github_repositories
            .iter()
            .map(|r| gw::GitRepository {
                name: r.name.clone(),
                gate_name: r.gate_name.clone(),
                default_branch: r.default_branch.clone().unwrap_or_default(),
            })
            .collect(),
        git_dirs: run.git_dirs.iter().map(|d| d.as_os_str().as_bytes().to_vec()).collect(),
        egress: Some(run.egress.clone()),
        models: run.models.clone(),
        model_budget_tokens: run.model_budget_tokens,
        model_tokens_used: used,
        model_refusal: run.model_refusal().unwrap_or_default(),
        model_loopback_port: run.model_loopback_port.into(),
        forwards: run.forwards.iter().map(|p| u32::from(*p)).collect(),
    }
}

/// Why a run whose loopback proxy port was taken ends.
pub(super) const PORT_TAKEN_REASON: &str =
    "another process took its loopback proxy port, where its proxy variables point: it cannot be held to its proxies";

/// The gateway could not listen on the run's loopback proxy port.
pub(super) fn port_taken(status: &tonic::Status) -> bool {
    cc_proto::reasons::reason_of(status).is_some_and(|(reason, _)| reason == cc_proto::reasons::PORT_TAKEN)
}

impl RunManager {
    /// Opens the run's door. A gateway that is down does not stop the run: its git
    /// cannot reach GitHub until the gateway is back and has been told the run again.
    /// `Err` only when the run's loopback proxy port is taken ([`port_taken`]): the
    /// caller stops the run.
    pub(super) async fn register_gateway(&self, live: &LiveRun) -> Result<(), tonic::Status> {
        let channels = &self.env.channels;
        let registered = async {
            let mut gateway = channels.gateway().await?;
            let call = gateway.register_run(register_request(live, self.model_tokens_used(&live.record.id)));
            channels.within(HelperKind::Gateway, "RegisterRun", call).await
        };
        match registered.await {
            Ok(_) => live.set_gateway_bridged(true),
            Err(status) if port_taken(&status) => return Err(status),
            Err(status) => {
                let payload = json!({ "error": status.message(), "then": "registered when the gateway next starts" });
                self.env.events.record("git_gateway_unavailable", &format!("run:{}", live.record.id), payload);
            }
        }
        Ok(())
    }

    /// Closes the run's door and every connection through it.
    pub(super) async fn end_gateway(&self, run_id: &str) {
        let channels = &self.env.channels;
        let ended = async {
            let mut gateway = channels.gateway().await?;
            let call = gateway.end_run(gw::EndRunRequest { run_id: run_id.to_owned() });
            channels.within(HelperKind::Gateway, "EndRun", call).await
        };
        if let Err(status) = ended.await {
            tracing::warn!(run = run_id, error = %status.message(), "cannot close the run's git door now");
        }
        // By handle, never through a link, as every removal of a run's directories.
        let _ = cc_worktree::remove_tree(&self.env.data.gateway_run_dir(run_id));
    }

    /// A gateway process started: every live run is registered with it again. A run
    /// whose loopback proxy port another process took meanwhile is stopped (in the
    /// background: its end needs the gateway this reconciliation makes ready).
    pub(super) async fn sync_gateway(self: &std::sync::Arc<Self>, pid: u32) {
        let live: Vec<std::sync::Arc<LiveRun>> = self.lock().values().cloned().collect();
        let channels = &self.env.channels;
        let mut failed = 0;
        for run in &live {
            let register = async {
                let mut gateway = channels.gateway_at(pid).await?;
                let call = gateway.register_run(register_request(run, self.model_tokens_used(&run.record.id)));
                channels.within(HelperKind::Gateway, "RegisterRun", call).await
            };
            if let Err(status) = register.await {
                run.set_gateway_bridged(false);
                failed += 1;
                if port_taken(&status) {
                    let (manager, id) = (self.clone(), run.run_id.clone());
                    tokio::spawn(async move { manager.stop(&id, PORT_TAKEN_REASON).await });
                }
                tracing::warn!(run = %run.record.id, error = %status.message(), "cannot register the run with the gateway again");
            } else {
                run.set_gateway_bridged(true);
            }
            // A run that ended meanwhile: its door must not stay open.
            if !self.lock().contains_key(&run.run_id) {
                self.end_gateway(&run.record.id).await;
            }
        }
        if !live.is_empty() {
            let payload = json!({ "runs": live.len(), "failed": failed });
            self.env.events.record("git_gateway_synced", "helper:gateway", payload);
        }
    }
}
