//! Each run's doors: five Unix sockets in `gateway/runs/<run>/` under the data
//! directory. `git.sock` serves git's smart HTTP for the run's GitHub remotes;
//! `http.sock` and `socks.sock` are its egress proxies; `agent.sock` answers the
//! agent's hook (`cc.agent.v1.AgentGate`); `model.sock` is its model door. sandboxd binds the directory
//! into the run's envelopes and our init bridges each socket to a `127.0.0.1` port.
//!
//! The gateway holds no state of its own about runs: the supervisor registers each
//! live run, and again after the gateway restarts. Sockets are made again at the same
//! paths; since the envelope binds the directory, not the sockets, it sees the new ones.

mod agent;
mod answer;
pub mod forward;
mod front;
mod loopback;
pub mod model;
mod provider;
mod proxy;
mod push;
pub mod report;
mod segments;
mod splice;
mod upstream;

use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

pub use loopback::Loopback;
pub use proxy::{EgressConfig, EgressRun};
pub use upstream::Upstream;

use crate::peers::Peers;

/// The git door's name in the run's gateway directory.
pub const GIT_SOCKET: &str = "git.sock";
/// The HTTP proxy's.
pub const HTTP_PROXY_SOCKET: &str = "http.sock";
/// The SOCKS5 proxy's.
pub const SOCKS_SOCKET: &str = "socks.sock";
/// The agent socket's.
pub const AGENT_SOCKET: &str = "agent.sock";
/// The model door's.
pub const MODEL_SOCKET: &str = "model.sock";

/// Connections one run may hold open to its git door at once: git uses one or two;
/// a run that opens thousands must not take the gateway's descriptors from the others.
pub const MAX_GIT_CONNECTIONS: usize = 32;
/// Tunnels one run may hold open through its proxies at once; past it, 503.
pub const MAX_TUNNELS: usize = 256;
/// Connections one run may hold to its agent socket: a hook opens one per tool call.
pub const MAX_AGENT_CONNECTIONS: usize = 16;
/// Connections one run may hold to its model door: an agent and its subagents.
pub const MAX_MODEL_CONNECTIONS: usize = 64;
/// Connections one run may hold through each of its host forwards.
pub const MAX_FORWARD_CONNECTIONS: usize = 64;

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
    pub egress: EgressConfig,
    /// The providers its model door serves.
    pub models: Vec<model::ModelRoute>,
    /// Its model token budget; 0: none.
    pub model_budget_tokens: u64,
    /// For an agent on the host: the model door's port on 127.0.0.1 too.
    pub model_loopback_port: Option<u16>,
    /// Host loopback ports it may reach, each through `forward-PORT.sock`.
    pub forwards: Vec<u16>,
}

impl RunDoor {
    pub fn repository(&self, name: &str) -> Option<&Repository> {
        self.repositories.iter().find(|r| r.name == name)
    }
}

/// What every door shares: its callees and the upstream.
pub struct Shared {
    pub peers: Arc<Peers>,
    pub upstream: Upstream,
    pub reporter: report::Reporter,
    /// How long a proxy's client may take to send its whole request.
    pub handshake: std::time::Duration,
    /// The model door's connections to providers.
    pub providers: Arc<provider::Providers>,
}

#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("cannot make {path}: {source}")]
    Dir { path: String, source: std::io::Error },
    #[error(transparent)]
    Socket(#[from] cc_proto::socket::SocketError),
    #[error("cannot open {path} to the run's user: {source}")]
    Permissions { path: String, source: std::io::Error },
    #[error("the run's egress policy: {0}")]
    Egress(String),
    #[error("cannot listen on 127.0.0.1:{port} for the run's proxy (another process holds it?): {source}")]
    PortTaken { port: u16, source: std::io::Error },
}

/// The sockets a run's doors serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sockets {
    pub git: PathBuf,
    pub http_proxy: PathBuf,
    pub socks: PathBuf,
    pub agent: PathBuf,
    pub model: PathBuf,
}

impl Sockets {
    fn all(&self) -> [&PathBuf; 5] {
        [&self.git, &self.http_proxy, &self.socks, &self.agent, &self.model]
    }
}

struct Open {
    door: Arc<RunDoor>,
    sockets: Sockets,
    /// Its host forwards' sockets.
    forwards: Vec<PathBuf>,
    ledger: Arc<model::Ledger>,
    /// Dropped to close the doors and every connection through them.
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

    /// Serves the run's sockets, or keeps serving them when nothing changed. A run told
    /// again with another policy gets it from its next connection on. `used` and
    /// `refusal`: the run's model tokens so far and whether it may make more, as the
    /// supervisor counts them; told again, they update the door in place.
    pub fn open(&self, door: RunDoor, used: u64, refusal: Option<String>) -> Result<Sockets, DoorError> {
        let mut open = self.lock();
        if let Some(existing) = open.get(&door.run_id)
            && *existing.door == door
            && existing.sockets.all().iter().all(|s| s.exists())
        {
            existing.ledger.update(used, refusal);
            return Ok(existing.sockets.clone());
        }
        let ledger = Arc::new(model::Ledger::new(used, refusal));
        let egress = Arc::new(EgressRun::new(&door).map_err(DoorError::Egress)?);
        open.remove(&door.run_id);
        let dir = self.runs_dir.join(&door.run_id);
        let sockets = Sockets {
            git: dir.join(GIT_SOCKET),
            http_proxy: dir.join(HTTP_PROXY_SOCKET),
            socks: dir.join(SOCKS_SOCKET),
            agent: dir.join(AGENT_SOCKET),
            model: dir.join(MODEL_SOCKET),
        };
        let (git, http, socks, agent, model_door) = (
            bind(&dir, &sockets.git, door.uid)?,
            bind(&dir, &sockets.http_proxy, door.uid)?,
            bind(&dir, &sockets.socks, door.uid)?,
            bind(&dir, &sockets.agent, door.uid)?,
            bind(&dir, &sockets.model, door.uid)?,
        );
        // A run without an envelope: its proxies on loopback ports too, bound before
        // anything is served so that a port taken by someone else fails the call.
        let listen = |port| loopback::listen(port).map_err(|source| DoorError::PortTaken { port, source });
        let loopback = match &door.egress.loopback {
            Some(l) => Some((l.clone(), listen(l.http_port)?, listen(l.socks_port)?)),
            None => None,
        };
        let model_listener = door.model_loopback_port.map(listen).transpose()?;
        let mut forward_sockets = Vec::with_capacity(door.forwards.len());
        let mut forward_listeners = Vec::with_capacity(door.forwards.len());
        for port in &door.forwards {
            let path = dir.join(forward::socket_name(*port));
            forward_listeners.push((*port, bind(&dir, &path, door.uid)?));
            forward_sockets.push(path);
        }
        let (stop, stopped) = watch::channel(());
        let door = Arc::new(door);
        let ours = std::fs::metadata(&dir).map(|m| m.uid()).ok();
        let allowed = Allowed { run: door.uid, ours };
        let tunnels = Arc::new(Semaphore::new(MAX_TUNNELS));
        {
            let (door, shared) = (door.clone(), self.shared.clone());
            let slots = Arc::new(Semaphore::new(MAX_GIT_CONNECTIONS));
            let limit: Limit<UnixStream> = (slots, Arc::new(proxy::too_many));
            tokio::spawn(accept(git, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                serve_git(stream, door.clone(), shared.clone())
            }));
        }
        {
            let (door, shared) = (door.clone(), self.shared.clone());
            let slots = Arc::new(Semaphore::new(MAX_AGENT_CONNECTIONS));
            // Past the cap a connection is closed: the hook takes that for a deny.
            let limit: Limit<UnixStream> = (slots, Arc::new(drop));
            tokio::spawn(accept(agent, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                agent::serve(stream, door.clone(), shared.clone())
            }));
        }
        for (port, listener) in forward_listeners {
            let (door, shared) = (door.clone(), self.shared.clone());
            let slots = Arc::new(Semaphore::new(MAX_FORWARD_CONNECTIONS));
            let limit: Limit<UnixStream> = (slots, Arc::new(drop));
            tokio::spawn(accept(listener, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                forward::serve(stream, door.clone(), port, shared.clone())
            }));
        }
        // The model door: its socket, and for a run without an envelope its loopback
        // port, where the run's placeholder is the credential.
        let model_slots = Arc::new(Semaphore::new(MAX_MODEL_CONNECTIONS));
        {
            let (door, ledger, shared) = (door.clone(), ledger.clone(), self.shared.clone());
            let limit: Limit<UnixStream> = (model_slots.clone(), Arc::new(drop));
            tokio::spawn(accept(model_door, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                // A long answer otherwise waits on the agent's reading every ~200 KiB.
                splice::Socket::widen(&stream);
                model::serve(stream, door.clone(), ledger.clone(), shared.clone())
            }));
        }
        if let Some(listener) = model_listener {
            let (door, ledger, shared) = (door.clone(), ledger.clone(), self.shared.clone());
            let limit: Limit<tokio::net::TcpStream> = (model_slots, Arc::new(drop));
            tokio::spawn(accept(listener, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                model::serve(stream, door.clone(), ledger.clone(), shared.clone())
            }));
        }
        {
            let (egress, shared) = (egress.clone(), self.shared.clone());
            let full = {
                let (egress, shared) = (egress.clone(), shared.clone());
                move |stream| {
                    egress.refuse_too_many(&shared);
                    proxy::too_many(stream);
                }
            };
            let limit: Limit<UnixStream> = (tunnels.clone(), Arc::new(full));
            tokio::spawn(accept(http, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                proxy::http(stream, egress.clone(), shared.clone(), None)
            }));
        }
        {
            let (egress, shared) = (egress.clone(), self.shared.clone());
            let full = {
                let (egress, shared) = (egress.clone(), shared.clone());
                move |stream: UnixStream| {
                    egress.refuse_too_many(&shared);
                    drop(stream);
                }
            };
            let limit: Limit<UnixStream> = (tunnels.clone(), Arc::new(full));
            tokio::spawn(accept(socks, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                proxy::socks(stream, egress.clone(), shared.clone(), None)
            }));
        }
        if let Some((auth, http, socks)) = loopback {
            // Past the cap a loopback connection is closed, and the refusal recorded.
            let full = {
                let (egress, shared) = (egress.clone(), self.shared.clone());
                move |stream: tokio::net::TcpStream| {
                    egress.refuse_too_many(&shared);
                    drop(stream);
                }
            };
            let full: Arc<dyn Fn(tokio::net::TcpStream) + Send + Sync> = Arc::new(full);
            // Slots of their own: anyone local can connect here, and holding them
            // unauthenticated must not starve the run's sockets (its runner's web_fetch).
            let tunnels = Arc::new(Semaphore::new(MAX_TUNNELS));
            let (http_egress, shared, http_auth) = (egress.clone(), self.shared.clone(), auth.clone());
            let limit = (tunnels.clone(), full.clone());
            tokio::spawn(accept(http, door.run_id.clone(), allowed, stopped.clone(), limit, move |stream| {
                proxy::http(stream, http_egress.clone(), shared.clone(), Some(http_auth.clone()))
            }));
            let shared = self.shared.clone();
            tokio::spawn(accept(socks, door.run_id.clone(), allowed, stopped, (tunnels, full), move |stream| {
                proxy::socks(stream, egress.clone(), shared.clone(), Some(auth.clone()))
            }));
        }
        tracing::info!(run = %door.run_id, dir = %dir.display(), repositories = door.repositories.len(), network = door.egress.network, "serving the run's doors");
        let forwards = forward_sockets;
        open.insert(door.run_id.clone(), Open { door, sockets: sockets.clone(), forwards, ledger, _stop: stop });
        Ok(sockets)
    }

    /// Closes the run's sockets and every connection on them; its directory goes too.
    pub fn close(&self, run: &str) {
        if let Some(open) = self.lock().remove(run) {
            for socket in open.sockets.all().into_iter().chain(&open.forwards) {
                cc_proto::socket::remove_socket(socket);
            }
            tracing::info!(run, "closed the run's doors");
        }
        let _ = std::fs::remove_dir(self.runs_dir.join(run));
    }
}

/// Binds one of the run's sockets. When the run's user is not ours (a root supervisor
/// runs agents as its service user, and the gateway keeps no capability to chown), the
/// directory is searchable and the socket open to all, and each connection's peer uid
/// is checked instead ([`accept`]).
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

/// Who may connect: the run's user (its envelopes) or ours.
#[derive(Clone, Copy)]
struct Allowed {
    run: u32,
    ours: Option<u32>,
}

/// A door's connection slots, and what a connection past them gets.
type Limit<S> = (Arc<Semaphore>, Arc<dyn Fn(S) + Send + Sync>);

/// What a door listens on: a Unix socket of the run's, where the kernel names the
/// peer's user, or (for a run without an envelope) a loopback port, where anyone
/// local may connect and the handler asks for the run's credential ([`loopback`]).
trait Listener: Send + 'static {
    type Stream: Send + 'static;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
    /// `Err(uid)`: a peer of another user, refused before a byte is read.
    fn admits(stream: &Self::Stream, allowed: Allowed) -> Result<(), Option<u32>>;
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    async fn accept_one(&self) -> std::io::Result<UnixStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
    fn admits(stream: &UnixStream, allowed: Allowed) -> Result<(), Option<u32>> {
        let peer = stream.peer_cred().ok().map(|c| c.uid());
        if peer.is_none() || (peer != Some(allowed.run) && peer != allowed.ours) { Err(peer) } else { Ok(()) }
    }
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<tokio::net::TcpStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
    fn admits(_: &tokio::net::TcpStream, _: Allowed) -> Result<(), Option<u32>> {
        Ok(())
    }
}

/// Accepts connections the listener admits until the run's doors close, each served
/// by `handle` while it holds one of `slots`; one past them is given to `full` (an
/// HTTP 503, or closed) and dropped at once.
async fn accept<L, F, Fut>(
    listener: L,
    run: String,
    allowed: Allowed,
    mut stopped: watch::Receiver<()>,
    (slots, full): Limit<L::Stream>,
    handle: F,
) where
    L: Listener,
    F: Fn(L::Stream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept_one() => accepted,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait a little rather than spin.
                tracing::warn!(run, error = %e, "cannot accept on a run's door");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Err(peer_uid) = L::admits(&stream, allowed) {
            tracing::warn!(run, ?peer_uid, "refused a connection from another user");
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(run, "refused a connection: the run holds too many");
            full(stream);
            continue;
        };
        let served = handle(stream);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                _ = served => {}
                _ = stopped.changed() => {}
            }
        });
    }
}

async fn serve_git(stream: UnixStream, door: Arc<RunDoor>, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |request| {
        let (door, shared) = (door.clone(), shared.clone());
        async move { Ok::<_, std::convert::Infallible>(front::handle(&door, &shared, request).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}
