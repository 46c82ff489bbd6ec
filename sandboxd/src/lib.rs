//! cc-sandboxd: the one helper that may keep privileges. It turns a run policy into an
//! envelope (a bubblewrap argv on Linux) and launches every process that runs agent
//! code inside it, under our init ([`init`]), with a sanitized environment
//! ([`environment`]), and reports what the envelope refused ([`violations`]).
#![forbid(unsafe_code)]

pub use cc_host::{beneath, probe};
pub mod bwrap;
pub mod environment;
pub mod error;
#[cfg(target_os = "linux")]
pub mod init;
pub mod launch;
pub mod microvm;
pub mod policy;
pub mod protect;
mod report;
mod runs;
pub mod sbpl;
pub mod seatbelt;
pub mod seatbelt_log;
#[cfg(target_os = "linux")]
pub mod seccomp;
pub mod spawn;
pub mod system;
pub mod terminal;
pub mod violations;
pub mod warm;

use std::path::PathBuf;
use std::sync::Arc;

use cc_proto::common::v1::SandboxBackend;
use cc_proto::hardening::{Capability, CapabilityPolicy};
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use cc_proto::sandboxd::v1 as pb;
use cc_proto::sandboxd::v1::sandboxd_server::{Sandboxd, SandboxdServer};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::error::LaunchError;
use crate::launch::{Launcher, Runs};
use crate::policy::RunPolicy;
use crate::probe::{Backend, SandboxChoice};

/// As root, sandboxd keeps only what launching as the run's unprivileged user needs:
/// switching to it, killing its processes, and creating the protected files of its
/// directories for it. Everything else, from every set.
#[cfg(target_os = "linux")]
pub const KEPT_CAPABILITIES: &[Capability] = &[
    Capability::CAP_SETUID,
    Capability::CAP_SETGID,
    Capability::CAP_KILL,
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_FOWNER,
];
/// No capabilities elsewhere.
#[cfg(not(target_os = "linux"))]
pub const KEPT_CAPABILITIES: &[Capability] = &[];

pub const SPEC: HelperSpec =
    HelperSpec { name: "sandboxd", capabilities: CapabilityPolicy::KeepOnly(KEPT_CAPABILITIES) };

pub struct SandboxdService {
    context: HelperContext,
    launcher: Arc<Launcher>,
    runs: Arc<Runs>,
    /// The microVMs of registered runs, and the probe made once, in the background,
    /// at start.
    vms: microvm::late::LateVmHost,
}

impl SandboxdService {
    /// Refuses to serve when native was asked for and the probe failed.
    pub fn new(context: &HelperContext) -> Result<Self, StartError> {
        let options = &context.bootstrap.options;
        let choice = options.get("sandbox").and_then(|s| s.parse().ok()).unwrap_or(SandboxChoice::Auto);
        let bwrap = options.get("bwrap").map(PathBuf::from);
        let probe = probe::probe(choice, bwrap.as_deref());
        tracing::info!(probe = %probe.line(), "sandboxd probe");
        // The supervisor asked for native: never launch unwrapped instead (fail closed).
        if choice == SandboxChoice::Native && probe.backend != Backend::Native {
            return Err(StartError::NativeUnavailable(probe.line()));
        }
        let data_dir =
            std::fs::canonicalize(&context.bootstrap.data_dir).unwrap_or_else(|_| context.bootstrap.data_dir.clone());
        let runs = Arc::new(Runs::default());
        let launcher = Arc::new(Launcher::new(probe, runs.clone(), data_dir));
        let image = options.get("microvm_image").map(PathBuf::from).unwrap_or_else(|| {
            let here = std::env::current_exe().ok().and_then(|e| e.parent().map(std::path::Path::to_owned));
            cc_host::microvm::default_image_dir(&here.unwrap_or_default())
        });
        let vms = microvm::late::LateVmHost::start(image, data_dir_for_vms(&context.bootstrap.data_dir));
        Ok(Self { context: context.clone(), launcher, runs, vms })
    }
}

/// Where sandboxd keeps its VMs' directories (sockets, console logs): short, since a
/// Unix socket's path is at most 108 bytes.
fn data_dir_for_vms(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("vms")
}

/// Why sandboxd does not serve.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The supervisor asked for native: never launch unwrapped instead (fail closed).
    #[error("--sandbox native was asked for, but {0}")]
    NativeUnavailable(String),
}

/// Blocking work of a request, off the async threads.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LaunchError> + Send + 'static,
) -> Result<T, LaunchError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| LaunchError::Internal(e.to_string()))?
}

#[tonic::async_trait]
impl Sandboxd for SandboxdService {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        Ok(Response::new(pb::GetStatusResponse { status: Some(self.context.status()) }))
    }

    async fn get_probe(
        &self,
        _request: Request<pb::GetProbeRequest>,
    ) -> Result<Response<pb::GetProbeResponse>, Status> {
        let probe = self.launcher.probe();
        let vms = self.vms.get().await?;
        let backend = SandboxBackend::from(probe.backend) as i32;
        Ok(Response::new(pb::GetProbeResponse {
            backend,
            detail: probe.detail.clone(),
            microvm_available: vms.probe.available,
            microvm: vms.probe.line.clone(),
        }))
    }

    async fn register_run(
        &self,
        request: Request<pb::RegisterRunRequest>,
    ) -> Result<Response<pb::RegisterRunResponse>, Status> {
        let proto = request.into_inner().policy.ok_or_else(|| Status::invalid_argument("the request has no policy"))?;
        let data_dir = self.launcher.data_dir().to_owned();
        let policy = off_thread(move || Ok(RunPolicy::from_proto(&proto, &data_dir)?)).await?;
        self.runs.register(policy);
        Ok(Response::new(pb::RegisterRunResponse {}))
    }

    async fn unregister_run(
        &self,
        request: Request<pb::UnregisterRunRequest>,
    ) -> Result<Response<pb::UnregisterRunResponse>, Status> {
        let run_id = request.into_inner().run_id;
        let killed = self.runs.unregister(&run_id).ok_or_else(|| LaunchError::RunNotFound(run_id.clone()))?;
        let vms = self.vms.get().await?.stop_run(&run_id).await;
        Ok(Response::new(pb::UnregisterRunResponse { killed: killed + vms }))
    }

    type LaunchStream = ReceiverStream<Result<pb::LaunchResponse, Status>>;

    async fn launch(&self, request: Request<pb::LaunchRequest>) -> Result<Response<Self::LaunchStream>, Status> {
        let stream = self.launcher.clone().launch(request.into_inner(), None).await?;
        Ok(Response::new(stream))
    }

    type LaunchInteractiveStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::LaunchInteractiveResponse, Status>> + Send + 'static>,
    >;

    async fn launch_interactive(
        &self,
        request: Request<tonic::Streaming<pb::LaunchInteractiveRequest>>,
    ) -> Result<Response<Self::LaunchInteractiveStream>, Status> {
        use pb::launch_interactive_request::Input;
        use tokio_stream::StreamExt;
        let mut inputs = request.into_inner();
        // The launch comes first, and soon: a caller that sends nothing holds nothing.
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), inputs.next())
            .await
            .map_err(|_| Status::deadline_exceeded("no launch within 10 s of the call"))?;
        let launch = match first {
            Some(Ok(pb::LaunchInteractiveRequest { input: Some(Input::Launch(launch)) })) => launch,
            Some(Err(status)) => return Err(status),
            _ => return Err(Status::invalid_argument("an interactive launch starts with the launch itself")),
        };
        // A few chunks in flight: a caller that writes faster than the process reads
        // waits, as a pipe makes a writer wait.
        let (feed, stdin) = tokio::sync::mpsc::channel::<terminal::Input>(16);
        let on_terminal = launch.pty.is_some();
        tokio::spawn(async move {
            while let Some(Ok(message)) = inputs.next().await {
                let input = match message.input {
                    Some(Input::Stdin(bytes)) => terminal::Input::Stdin(bytes),
                    Some(Input::Resize(size)) => terminal::Input::Resize(size),
                    Some(Input::Signal(signal)) => terminal::Input::Signal(signal),
                    // Closing: dropping the sender ends the process's input. A
                    // terminal's input ends with the launch.
                    Some(Input::CloseStdin(_)) if !on_terminal => return,
                    Some(Input::CloseStdin(_) | Input::Launch(_)) | None => continue,
                };
                if feed.send(input).await.is_err() {
                    return;
                }
            }
        });
        let events = self.launcher.clone().launch(launch, Some(stdin)).await?;
        let events = events.map(|event| event.map(|e| pb::LaunchInteractiveResponse { event: Some(e) }));
        Ok(Response::new(Box::pin(events)))
    }

    async fn start_vm(&self, request: Request<pb::StartVmRequest>) -> Result<Response<pb::StartVmResponse>, Status> {
        let r = request.into_inner();
        let policy = self.launcher.policy_of(&r.run_id)?;
        let vm = self.vms.get().await?.start(&policy, r.memory_mib, r.cpus, r.network).await?;
        Ok(Response::new(pb::StartVmResponse { vm: Some(vm) }))
    }

    type ExecVmStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ExecVmResponse, Status>> + Send + 'static>>;

    async fn exec_vm(
        &self,
        request: Request<tonic::Streaming<pb::ExecVmRequest>>,
    ) -> Result<Response<Self::ExecVmStream>, Status> {
        use pb::exec_vm_request::Input;
        use tokio_stream::StreamExt;
        let mut inputs = request.into_inner();
        let first = tokio::time::timeout(std::time::Duration::from_secs(10), inputs.next())
            .await
            .map_err(|_| Status::deadline_exceeded("no command within 10 s of the call"))?;
        let start = match first {
            Some(Ok(pb::ExecVmRequest { input: Some(Input::Start(start)) })) => start,
            Some(Err(status)) => return Err(status),
            _ => return Err(Status::invalid_argument("an exec in a microVM starts with what to run")),
        };
        let (feed, fed) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Some(Ok(message)) = inputs.next().await {
                if let Some(input) = message.input
                    && feed.send(input).await.is_err()
                {
                    return;
                }
            }
        });
        let events = self.vms.get().await?.exec(start, fed).await?;
        let events = ReceiverStream::new(events).map(|e| e.map(|event| pb::ExecVmResponse { event: Some(event) }));
        Ok(Response::new(Box::pin(events)))
    }

    async fn stop_vm(&self, request: Request<pb::StopVmRequest>) -> Result<Response<pb::StopVmResponse>, Status> {
        self.vms.get().await?.stop(&request.into_inner().vm_id, "stopped on request").await?;
        Ok(Response::new(pb::StopVmResponse {}))
    }

    async fn get_vm(&self, request: Request<pb::GetVmRequest>) -> Result<Response<pb::GetVmResponse>, Status> {
        let vm = self.vms.get().await?.get(&request.into_inner().vm_id)?;
        Ok(Response::new(pb::GetVmResponse { vm: Some(vm) }))
    }

    async fn explain_envelope(
        &self,
        request: Request<pb::ExplainEnvelopeRequest>,
    ) -> Result<Response<pb::ExplainEnvelopeResponse>, Status> {
        let pb::ExplainEnvelopeRequest { run_id, kind, argv } = request.into_inner();
        let envelope = self.launcher.explain(&run_id, kind, &argv)?;
        Ok(Response::new(pb::ExplainEnvelopeResponse { envelope: Some(envelope) }))
    }
}

pub(crate) fn short(text: &str) -> String {
    text.chars().take(64).collect()
}

pub fn service(context: &HelperContext) -> Result<SandboxdServer<SandboxdService>, StartError> {
    Ok(SandboxdServer::new(SandboxdService::new(context)?).max_decoding_message_size(MAX_MESSAGE_BYTES))
}
