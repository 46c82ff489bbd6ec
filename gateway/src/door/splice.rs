//! A tunnel's two directions copied by `splice(2)` through a pipe each: the bytes go
//! socket → pipe → socket inside the kernel, never through the gateway's memory. A
//! userspace copy held a tunnel to 0.4× of loopback's speed on two cores (the client,
//! the server and the proxy all copy); splicing is what the 0.9× needs.
//!
//! Readiness comes from tokio (`readable`/`writable`, `try_io` clearing it on
//! EAGAIN), so a tunnel costs no thread. Each direction drains its pipe before it reads
//! again, so an EAGAIN always means the socket's, never the pipe's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// What one splice moves at most, and the pipe's size asked for: 1 MiB each way keeps
/// a tunnel at loopback's speed (256 KiB held it to 0.63× on two cores: the two ends
/// took turns every quarter MiB). 32 tunnels of an unprivileged gateway's user fit the
/// kernel's default per-user pipe allowance (`pipe-user-pages-soft`, 64 MiB); past it a
/// pipe gets [`FALLBACK_PIPE`], then one or two pages.
const CHUNK: usize = 1 << 20;
const FALLBACK_PIPE: usize = 256 << 10;
/// Past its allowance the kernel makes a user's new pipes one or two pages: too small
/// to beat a buffered copy, which the caller then does instead.
const SMALLEST_PIPE: i32 = 64 << 10;

/// A socket tokio watches, spliced by its descriptor.
pub trait Socket: AsFd {
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn try_io_for<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    /// Makes the socket's send buffer as large as the system allows
    /// (`net.core.wmem_max`): a Unix socket's default ~200 KiB made a fast tunnel
    /// switch between its ends every few pages. TCP's buffers tune themselves.
    fn widen(&self) {}
}

impl Socket for TcpStream {
    async fn ready_for(&self, interest: Interest) -> io::Result<()> {
        self.ready(interest).await.map(|_| ())
    }
    fn try_io_for<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, f)
    }
}

impl Socket for UnixStream {
    async fn ready_for(&self, interest: Interest) -> io::Result<()> {
        self.ready(interest).await.map(|_| ())
    }
    fn try_io_for<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, f)
    }
    fn widen(&self) {
        let _ = nix::sys::socket::setsockopt(self, nix::sys::socket::sockopt::SndBuf, &(4 << 20));
    }
}

/// Bytes carried each way, readable even when the tunnel ended in an error.
#[derive(Default)]
pub struct Carried {
    pub a_to_b: AtomicU64,
    pub b_to_a: AtomicU64,
}

/// Copies both ways until both are done or one fails; each side's write half is shut
/// when its source ends, as `copy_bidirectional` does. `Err` when no pipe can be made
/// (out of descriptors): the caller copies in userspace instead.
pub async fn both_ways(a: &impl Socket, b: &impl Socket, carried: &Carried) -> Result<(), io::Error> {
    let (a_pipe, b_pipe) = (pipe()?, pipe()?);
    let _ = tokio::try_join!(one_way(a, b, &a_pipe, &carried.a_to_b), one_way(b, a, &b_pipe, &carried.b_to_a));
    Ok(())
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
    // Best effort: the size the pipe has is what counts.
    if fcntl(&write, FcntlArg::F_SETPIPE_SZ(CHUNK as i32)).is_err() {
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(FALLBACK_PIPE as i32));
    }
    let size = fcntl(&write, FcntlArg::F_GETPIPE_SZ)?;
    if size < SMALLEST_PIPE {
        return Err(io::Error::other(format!("the kernel gave a pipe of {size} bytes")));
    }
    Ok((read, write))
}

async fn one_way(
    from: &impl Socket,
    to: &impl Socket,
    (pipe_read, pipe_write): &(OwnedFd, OwnedFd),
    count: &AtomicU64,
) -> io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let filled =
            retry(from, Interest::READABLE, || splice(from.as_fd(), None, pipe_write, None, CHUNK, flags)).await?;
        if filled == 0 {
            let _ = nix::sys::socket::shutdown(to.as_fd().as_raw_fd(), nix::sys::socket::Shutdown::Write);
            return Ok(());
        }
        let mut left = filled;
        while left > 0 {
            let moved =
                retry(to, Interest::WRITABLE, || splice(pipe_read, None, to.as_fd(), None, left, flags)).await?;
            // Counted as it reaches the other side, so a tunnel cut mid-chunk says so.
            count.fetch_add(moved as u64, Ordering::Relaxed);
            left -= moved;
        }
    }
}

/// Runs `splice` once the socket is ready, again whenever it says EAGAIN.
async fn retry(
    socket: &impl Socket,
    interest: Interest,
    mut call: impl FnMut() -> nix::Result<usize>,
) -> io::Result<usize> {
    loop {
        socket.ready_for(interest).await?;
        match socket.try_io_for(interest, || call().map_err(io::Error::from)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Both directions arrive whole and in order, half-closes pass through, and the
    /// counts are the bytes each way.
    #[tokio::test]
    async fn both_directions_arrive_whole_with_their_counts() {
        let (mut client, proxy_client) = UnixStream::pair().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_upstream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..5_000_000u32).map(|i| (i % 241) as u8).collect();

        let carried = Carried::default();
        let tunnel = both_ways(&proxy_client, &proxy_upstream, &carried);
        let (up2, down2) = (up.clone(), down.clone());
        let client_side = async move {
            let (mut r, mut w) = client.split();
            let send = async {
                w.write_all(&up2).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let mut got = Vec::new();
            let receive = r.read_to_end(&mut got);
            let (_, received) = tokio::join!(send, receive);
            received.unwrap();
            got
        };
        let server_side = async move {
            let (mut r, mut w) = server.split();
            let mut got = Vec::new();
            let receive = r.read_to_end(&mut got);
            let send = async {
                w.write_all(&down2).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let (received, _) = tokio::join!(receive, send);
            received.unwrap();
            got
        };
        let (done, at_client, at_server) = tokio::join!(tunnel, client_side, server_side);
        done.unwrap();
        assert!(at_server == up, "upstream got {} bytes of {}", at_server.len(), up.len());
        assert!(at_client == down, "the client got {} bytes of {}", at_client.len(), down.len());
        assert_eq!(carried.a_to_b.load(Ordering::Relaxed), up.len() as u64);
        assert_eq!(carried.b_to_a.load(Ordering::Relaxed), down.len() as u64);
    }
}
