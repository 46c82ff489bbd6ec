//! A run's host forwards: `forward-PORT.sock` in its gateway directory, bridged into
//! its envelopes at 127.0.0.1:PORT, so that a database on the host's localhost is
//! reachable from inside at the same address. A connection there is a connection to
//! 127.0.0.1:PORT on the host and nothing else: the port is fixed by the door, not by
//! anything the run sends. The supervisor decided the port at the run's start (a gate
//! rule for `localhost:PORT`, never a port of the always-deny list); each connection is
//! reported like the proxies' (its bytes, or why it could not be made), and becomes a
//! `forward_connection` event in the audit trail.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};

use super::report::{Seen, What};
use super::{RunDoor, Shared};

/// The host, as the forward's records name it.
pub const FORWARD_HOST: &str = "localhost";
/// How long the host's server may take to accept.
const DIAL: Duration = Duration::from_secs(10);

/// The socket's name in the run's gateway directory.
pub fn socket_name(port: u16) -> String {
    format!("forward-{port}.sock")
}

pub async fn serve(mut client: UnixStream, door: Arc<RunDoor>, port: u16, shared: Arc<Shared>) {
    let seen = |what| Seen { run_id: door.run_id.clone(), host: FORWARD_HOST.into(), port, what, forwarded: true };
    let mut server = match tokio::time::timeout(DIAL, TcpStream::connect((Ipv4Addr::LOCALHOST, port))).await {
        Ok(Ok(server)) => server,
        Ok(Err(e)) => {
            let reason = format!("localhost:{port} on the host cannot be reached: {e}");
            shared.reporter.report(seen(What::Denied { rule: "unreachable", reason }));
            return;
        }
        Err(_) => {
            let reason = format!("localhost:{port} on the host did not answer within {DIAL:?}");
            shared.reporter.report(seen(What::Denied { rule: "unreachable", reason }));
            return;
        }
    };
    let _ = server.set_nodelay(true);
    shared.reporter.report(seen(What::Opened));
    let (sent, received) = tokio::io::copy_bidirectional(&mut client, &mut server).await.unwrap_or((0, 0));
    shared.reporter.report(seen(What::Closed { sent, received }));
}
