//! systemd's readiness protocol: one datagram to `$NOTIFY_SOCKET`. A no-op elsewhere.

use std::io;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `READY=1`). Returns whether a notify socket was set.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let socket = UnixDatagram::unbound()?;
    let bytes = target.as_encoded_bytes();
    #[cfg(target_os = "linux")]
    if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket: '@' stands for the leading NUL.
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
        return Ok(true);
    }
    let _ = bytes;
    socket.send_to(state.as_bytes(), &target)?;
    Ok(true)
}
