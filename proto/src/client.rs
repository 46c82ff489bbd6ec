//! The client side of our sockets: a tonic channel over a Unix socket, and the
//! interceptor that presents a peer secret.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::auth::{PEER_HEADER, SECRET_HEADER};
use crate::secret::PeerSecret;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("nothing is listening on {path}")]
    NotListening { path: PathBuf },
    #[error("permission denied on {path}: the socket serves only its owner")]
    PermissionDenied { path: PathBuf },
    #[error("cannot connect to {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is served by pid {found:?}, not by the expected process (pid {expected}): refusing to talk to it")]
    WrongPeer { path: PathBuf, expected: u32, found: Option<i32> },
    #[error("cannot open a gRPC channel on {path}: {source}")]
    Transport { path: PathBuf, source: tonic::transport::Error },
}

/// Connects to the gRPC server on the Unix socket at `path`.
///
/// The first connection is made here, so that "nobody is listening" is told apart
/// from every other failure; the channel reconnects to the same path if needed.
pub async fn connect(path: &Path) -> Result<Channel, ConnectError> {
    connect_checked(path, None).await
}

/// Like [`connect`], but every connection (the first and each reconnect) must be served
/// by the process `expected_pid`, read from `SO_PEERCRED`: a secret is never presented
/// to whoever managed to bind the path.
pub async fn connect_checked(path: &Path, expected_pid: Option<u32>) -> Result<Channel, ConnectError> {
    let check = move |stream: &UnixStream, path: &Path| -> Result<(), ConnectError> {
        let Some(expected) = expected_pid else { return Ok(()) };
        let found = stream.peer_cred().ok().and_then(|c| c.pid());
        if found == Some(expected as i32) {
            Ok(())
        } else {
            Err(ConnectError::WrongPeer { path: path.to_owned(), expected, found })
        }
    };
    let first = first_connect(path).await?;
    check(&first, path)?;
    let first = Arc::new(Mutex::new(Some(first)));
    let socket = path.to_owned();
    // The URI is required by the HTTP/2 layer and otherwise unused.
    Endpoint::from_static("http://cc.local")
        .connect_with_connector(tower::service_fn(move |_| {
            let first = first.lock().map(|mut slot| slot.take()).unwrap_or(None);
            let socket = socket.clone();
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => {
                        let stream = UnixStream::connect(&socket).await?;
                        check(&stream, &socket)
                            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
                        stream
                    }
                };
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| ConnectError::Transport { path: path.to_owned(), source })
}

/// Like [`connect_checked`], for a server that runs inside an envelope started by
/// `ancestor` (bubblewrap, then our init, then the server): the first connection must be
/// served by a descendant of `ancestor`, and that process is the only one trusted from
/// then on. Returns the channel and the server's pid (in our pid namespace).
pub async fn connect_to_descendant(path: &Path, ancestor: u32) -> Result<(Channel, u32), ConnectError> {
    let probe = first_connect(path).await?;
    let found = probe.peer_cred().ok().and_then(|c| c.pid()).and_then(|p| u32::try_from(p).ok());
    match found {
        Some(pid) if descends_from(pid, ancestor) => {
            drop(probe);
            Ok((connect_checked(path, Some(pid)).await?, pid))
        }
        _ => Err(ConnectError::WrongPeer { path: path.to_owned(), expected: ancestor, found: found.map(|p| p as i32) }),
    }
}

/// The first connection, its failure told apart: nobody listening, not allowed, other.
async fn first_connect(path: &Path) -> Result<UnixStream, ConnectError> {
    UnixStream::connect(path).await.map_err(|source| match source.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ConnectError::NotListening { path: path.to_owned() }
        }
        io::ErrorKind::PermissionDenied => ConnectError::PermissionDenied { path: path.to_owned() },
        _ => ConnectError::Io { path: path.to_owned(), source },
    })
}

/// Whether `pid`'s chain of parents reaches `ancestor` (read from /proc; a few steps).
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    for _ in 0..16 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else { return false };
        // The fields after the command name, which is in parentheses and may hold any byte.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
        let Some(parent) = after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) else { return false };
        if parent == ancestor {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        current = parent;
    }
    false
}

/// Adds `x-cc-peer` / `x-cc-secret` to every request.
#[derive(Clone)]
pub struct PresentSecret {
    peer: AsciiMetadataValue,
    secret: AsciiMetadataValue,
}

impl PresentSecret {
    pub fn new(peer: &str, secret: &PeerSecret) -> Self {
        // Peer names are ours (ASCII); secrets are hex: both always parse.
        Self {
            peer: AsciiMetadataValue::try_from(peer).unwrap_or_else(|_| AsciiMetadataValue::from_static("invalid")),
            secret: AsciiMetadataValue::try_from(secret.expose())
                .unwrap_or_else(|_| AsciiMetadataValue::from_static("")),
        }
    }
}

impl tonic::service::Interceptor for PresentSecret {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let meta = request.metadata_mut();
        meta.insert(PEER_HEADER, self.peer.clone());
        meta.insert(SECRET_HEADER, self.secret.clone());
        Ok(request)
    }
}
