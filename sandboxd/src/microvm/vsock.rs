//! A guest's vsock port, through the Unix socket `vhost-device-vsock` exposes: the
//! host connects, writes `CONNECT <port>\n`, and reads `OK <host port>\n` before the
//! stream is the guest's (Firecracker's hybrid vsock protocol). The gRPC channel to the
//! guest's agent runs over such streams.

use std::io;
use std::path::Path;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// The longest acknowledgement line read.
const MAX_ACK: usize = 64;

/// Checks the daemon's acknowledgement line (without its newline).
pub fn acknowledged(line: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(line).map_err(|_| "the vsock daemon's answer is not text".to_owned())?;
    match text.strip_prefix("OK ") {
        Some(port) if port.parse::<u32>().is_ok() => Ok(()),
        _ => Err(format!("the vsock daemon refused the connection: {text:?}")),
    }
}

/// One stream to `port` of the guest.
pub async fn stream(uds: &Path, port: u32) -> io::Result<UnixStream> {
    let mut stream = UnixStream::connect(uds).await?;
    stream.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
    // Byte by byte: what follows the newline is the guest's.
    let mut line = Vec::with_capacity(16);
    loop {
        let byte = stream.read_u8().await?;
        if byte == b'\n' {
            break;
        }
        line.push(byte);
        if line.len() > MAX_ACK {
            return Err(io::Error::other("the vsock daemon's answer is too long"));
        }
    }
    acknowledged(&line).map_err(io::Error::other)?;
    Ok(stream)
}

/// A gRPC channel to `port` of the guest; each connection is a new stream.
pub async fn connect(uds: &Path, port: u32) -> Result<Channel, tonic::transport::Error> {
    let uds = uds.to_owned();
    // The URI is required by the HTTP/2 layer and otherwise unused.
    Endpoint::from_static("http://guest.vsock")
        .connect_with_connector(tower::service_fn(move |_| {
            let uds = uds.clone();
            async move { stream(&uds, port).await.map(TokioIo::new) }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements() {
        assert!(acknowledged(b"OK 1073741824").is_ok());
        for bad in [&b""[..], b"OK", b"OK x", b"ERR", b"ok 1", b"\xff"] {
            assert!(acknowledged(bad).is_err(), "{bad:?}");
        }
    }

    /// The handshake against a stand-in daemon: the request line, then the guest's
    /// bytes right after the acknowledgement.
    #[tokio::test]
    async fn the_handshake_then_the_guests_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vsock.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let daemon = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 13];
            s.read_exact(&mut request).await.unwrap();
            assert_eq!(&request, b"CONNECT 1024\n");
            s.write_all(b"OK 1073741824\nguest").await.unwrap();
        });
        let mut s = stream(&path, 1024).await.unwrap();
        let mut rest = String::new();
        s.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "guest");
        daemon.await.unwrap();
    }
}
