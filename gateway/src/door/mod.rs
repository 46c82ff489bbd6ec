//! Each run's git front door: one Unix socket per run, `gateway/runs/<run>/git.sock`
//! under the data directory, serving git's smart HTTP. sandboxd binds the directory
//! into the run's envelopes and our init bridges it to `127.0.0.1:<port>`, where the
//! run's git config sends every GitHub remote.
//!
//! The gateway holds no state of its own about runs: the supervisor registers each
//! live run, and again after the gateway restarts. A socket is made again at the same
//! path; since the envelope binds the directory, not the socket, it sees the new one.

mod front;
mod push;
mod upstream;

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;
use tokio::sync::watch;

pub use upstream::Upstream;

use crate::peers::Peers;

/// The socket's name in the run's gateway directory.
pub const GIT_SOCKET: &str = "git.sock";

/// Connections one run may hold open at once: git uses one or two; a run that opens
/// thousands must not take the gateway's descriptors from every other run.
pub const MAX_CONNECTIONS_PER_RUN: usize = 32;

/// A GitHub repository a run may fetch from and push to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// `owner/name`, lower case.
    pub name: String,
    /// What the gate's `repo` scope is matched against.
    pub gate_name: String,
    pub default_branch: Option<String>,
}

/// What the supervisor told the gateway about a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDoor {
    pub run_id: String,
    pub workspace: String,
    /// `cc.common.v1.Mode`, as the gate takes it.
    pub mode: i32,
    pub uid: u32,
    pub repositories: Vec<Repository>,
    pub git_dirs: Vec<PathBuf>,
}

impl RunDoor {
    pub fn repository(&self, name: &str) -> Option<&Repository> {
        self.repositories.iter().find(|r| r.name == name)
    }
}

/// What every door shares: its callees and the upstream.
pub struct Shared {
    pub peers: Peers,
    pub upstream: Upstream,
}

#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("cannot make {path}: {source}")]
    Dir { path: String, source: std::io::Error },
    #[error(transparent)]
    Socket(#[from] cc_proto::socket::SocketError),
    #[error("cannot open {path} to the run's user: {source}")]
    Permissions { path: String, source: std::io::Error },
}

struct Open {
    door: Arc<RunDoor>,
    socket: PathBuf,
    /// Dropped to close the door and every connection through it.
    _stop: watch::Sender<()>,
}

pub struct Doors {
    runs_dir: PathBuf,
    shared: Arc<Shared>,
    open: Mutex<HashMap<String, Open>>,
}

impl Doors {
    /// `runs_dir`: `gateway/runs` under the data directory.
    pub fn new(runs_dir: PathBuf, shared: Shared) -> Self {
        Self { runs_dir, shared: Arc::new(shared), open: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves the run's socket, or keeps serving it when nothing changed. A run told
    /// again with other repositories gets them from its next connection on.
    pub fn open(&self, door: RunDoor) -> Result<PathBuf, DoorError> {
        let mut open = self.lock();
        if let Some(existing) = open.get(&door.run_id)
            && *existing.door == door
            && existing.socket.exists()
        {
            return Ok(existing.socket.clone());
        }
        open.remove(&door.run_id);
        let dir = self.runs_dir.join(&door.run_id);
        let socket = dir.join(GIT_SOCKET);
        let listener = bind(&dir, &socket, door.uid)?;
        let (stop, stopped) = watch::channel(());
        let door = Arc::new(door);
        tokio::spawn(serve(listener, door.clone(), self.shared.clone(), stopped, socket.clone()));
        tracing::info!(run = %door.run_id, socket = %socket.display(), repositories = door.repositories.len(), "serving the run's git socket");
        open.insert(door.run_id.clone(), Open { door, socket: socket.clone(), _stop: stop });
        Ok(socket)
    }

    /// Closes the run's socket and every connection on it; its directory goes too.
    pub fn close(&self, run: &str) {
        if let Some(open) = self.lock().remove(run) {
            cc_proto::socket::remove_socket(&open.socket);
            tracing::info!(run, "closed the run's git socket");
        }
        let _ = std::fs::remove_dir(self.runs_dir.join(run));
    }
}

/// Binds the run's socket. When the run's user is not ours (a root supervisor runs
/// agents as its service user, and the gateway keeps no capability to chown), the
/// directory is searchable and the socket open to all, and each connection's peer uid
/// is checked instead ([`serve`]).
fn bind(dir: &Path, socket: &Path, uid: u32) -> Result<UnixListener, DoorError> {
    let made = |source| DoorError::Dir { path: dir.display().to_string(), source };
    std::fs::create_dir_all(dir).map_err(made)?;
    let ours = std::fs::metadata(dir).map_err(made)?.uid();
    let shared = uid != ours;
    let dir_mode = if shared { 0o711 } else { 0o700 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode)).map_err(made)?;
    let listener = cc_proto::socket::bind_private(socket)?;
    if shared {
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
            .map_err(|source| DoorError::Permissions { path: socket.display().to_string(), source })?;
    }
    Ok(listener)
}

async fn serve(
    listener: UnixListener,
    door: Arc<RunDoor>,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<()>,
    socket: PathBuf,
) {
    let ours = std::fs::metadata(&socket).map(|m| m.uid()).ok();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_RUN));
    loop {
        let accepted = tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait a little rather than spin.
                tracing::warn!(run = %door.run_id, error = %e, "cannot accept on the run's git socket");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(run = %door.run_id, limit = MAX_CONNECTIONS_PER_RUN, "refused a connection: the run holds too many");
            continue;
        };
        // Only the run's own user (its envelopes) or ours may talk to the door.
        let peer = stream.peer_cred().ok().map(|c| c.uid());
        if peer.is_none() || (peer != Some(door.uid) && peer != ours) {
            tracing::warn!(run = %door.run_id, peer_uid = ?peer, "refused a connection from another user");
            continue;
        }
        let (door, shared, mut stopped) = (door.clone(), shared.clone(), stopped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                let (door, shared) = (door.clone(), shared.clone());
                async move { Ok::<_, std::convert::Infallible>(front::handle(&door, &shared, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = stopped.changed() => {}
            }
        });
    }
}
