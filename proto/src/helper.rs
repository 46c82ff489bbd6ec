//! The start-up sequence every helper process runs, in order:
//!
//! 1. become non-dumpable, then say [`HELLO_LINE`]: the supervisor writes the bootstrap
//!    only after that, so no same-uid process can read it out of a dumpable process;
//! 2. read the bootstrap message on stdin (never argv or env);
//! 3. die with the supervisor (`PR_SET_PDEATHSIG`), and refuse to run under anyone else;
//! 4. harden (capabilities dropped and `no_new_privs`, except for sandboxd);
//! 5. bind the socket the bootstrap names, 0600 in a 0700 directory;
//! 6. serve grpc.health.v1 plus the helper's own service, every RPC authorized by
//!    peer uid and peer secret;
//! 7. tell the supervisor it is serving by writing [`READY_LINE`] on stdout;
//! 8. on SIGTERM or SIGINT, stop serving, remove the socket, exit 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::{InterceptorLayer, Routes};
use tonic::transport::Server;

use crate::auth::PeerGuard;
use crate::bootstrap::Bootstrap;
use crate::common::v1::HelperStatus;
use crate::hardening::{self, CapabilityPolicy};
use crate::{logging, socket};

/// The helpers the supervisor runs; their names are shared by the API, the
/// supervisor's configuration, events and the binaries (`cc-NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HelperKind {
    Sandboxd,
    Broker,
    Gateway,
}

impl HelperKind {
    /// In start order (stopped in reverse).
    pub const ALL: [HelperKind; 3] = [HelperKind::Sandboxd, HelperKind::Broker, HelperKind::Gateway];

    /// Its name: in the API, the config (`[helpers.NAME]`), events, and `cc-NAME`.
    pub fn name(self) -> &'static str {
        match self {
            HelperKind::Sandboxd => "sandboxd",
            HelperKind::Broker => "broker",
            HelperKind::Gateway => "gateway",
        }
    }

    pub fn from_name(name: &str) -> Option<HelperKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a helper writes on stdout once it is non-dumpable and waits for its bootstrap.
pub const HELLO_LINE: &str = "HELLO";
/// What a helper writes on stdout once its socket serves.
pub const READY_LINE: &str = "READY";

/// Messages bigger than this are refused before they are decoded.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// What a helper is: its name and what it may keep.
pub struct HelperSpec {
    pub name: &'static str,
    pub capabilities: CapabilityPolicy,
}

/// What a helper's services know about the process they run in.
#[derive(Clone)]
pub struct HelperContext {
    pub bootstrap: Bootstrap,
    pub started_unix_ms: i64,
}

impl HelperContext {
    /// The answer to every helper's `GetStatus`.
    pub fn status(&self) -> HelperStatus {
        HelperStatus {
            name: self.bootstrap.name.clone(),
            version: crate::VERSION.to_owned(),
            pid: std::process::id(),
            hardening: Some(hardening::report()),
            start_time: Some(crate::time::timestamp(self.started_unix_ms)),
        }
    }
}

pub fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Runs a helper to completion. `service` returns the helper's own gRPC service
/// (`health` is added here), or why the helper cannot serve, which ends it with exit
/// code 2 and that line on stderr; `S::NAME` is reported serving on grpc.health.v1.
pub fn run<S, F, E>(spec: HelperSpec, service: F) -> ExitCode
where
    F: FnOnce(&HelperContext) -> Result<S, E>,
    E: std::fmt::Display,
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let fail = |message: String| {
        eprintln!("cc-{}: {message}", spec.name);
        ExitCode::from(2)
    };
    hardening::close_inherited_descriptors();
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        return fail(format!("cannot make the process non-dumpable: {e}"));
    }
    if let Err(e) = announce(HELLO_LINE) {
        return fail(format!("cannot greet the supervisor: {e}"));
    }
    let bootstrap = match Bootstrap::read_from(std::io::stdin().lock(), spec.name) {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    // Linux only: on macOS a helper outlives a supervisor killed with SIGKILL (the
    // README's residual risks).
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
        return fail(format!("cannot ask to die with the supervisor: {e}"));
    }
    // Checked after PDEATHSIG is set, so a supervisor that died in between is noticed.
    let parent = nix::unistd::getppid().as_raw() as u32;
    if bootstrap.supervisor_pid != 0 && parent != bootstrap.supervisor_pid {
        return fail(format!(
            "started by pid {parent}, not by the supervisor (pid {}): exiting",
            bootstrap.supervisor_pid
        ));
    }
    if let Err(e) = hardening::harden(spec.capabilities) {
        return fail(e.to_string());
    }
    // CC_LOG, or (for a helper in an envelope, whose environment is cleared) the
    // supervisor's filter passed in the bootstrap.
    logging::init(bootstrap.log_format, bootstrap.options.get("log").map_or("info", String::as_str));

    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let context = HelperContext { bootstrap, started_unix_ms: unix_ms(SystemTime::now()) };
    let service = match service(&context) {
        Ok(service) => service,
        Err(e) => return fail(e.to_string()),
    };
    match runtime.block_on(serve(context, service)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(message),
    }
}

async fn serve<S>(context: HelperContext, service: S) -> Result<(), String>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let bootstrap = &context.bootstrap;
    if let Some(dir) = bootstrap.socket.parent() {
        socket::prepare_private_dir(dir).map_err(|e| e.to_string())?;
    }
    let listener = socket::bind_private(&bootstrap.socket).map_err(|e| e.to_string())?;

    // Before READY: a SIGTERM from then on is a clean stop, never the default action.
    let shutdown = Shutdown::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<S>().await;
    let guard = PeerGuard::owner_or_root().requiring_secrets(bootstrap.peers.clone());
    let routes = Routes::new(health).add_service(service);

    match announce(READY_LINE) {
        Ok(()) => {}
        // The supervisor stopped waiting for us (the run ended while we started, or it
        // stopped): nobody is left to tell, or to read an error, so we stop quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            tracing::debug!(helper = %bootstrap.name, "the supervisor stopped waiting before we were ready; stopping");
            drop(listener);
            socket::remove_socket(&bootstrap.socket);
            return Ok(());
        }
        Err(e) => return Err(format!("cannot tell the supervisor we are ready: {e}")),
    }
    tracing::info!(helper = %bootstrap.name, socket = %bootstrap.socket.display(), "serving");

    let result = Server::builder()
        .layer(InterceptorLayer::new(guard))
        .add_routes(routes)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown.wait())
        .await;
    socket::remove_socket_unless_served(&bootstrap.socket);
    tracing::info!(helper = %bootstrap.name, "stopped");
    result.map_err(|e| format!("serving {} failed: {e}", bootstrap.socket.display()))
}

fn announce(line: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()
}

/// SIGTERM and SIGINT, caught from the moment this is installed.
pub struct Shutdown {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Shutdown {
    /// Must be called inside the runtime, before anything that a signal should stop cleanly.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    /// Resolves on the first SIGTERM or SIGINT.
    pub async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
