//! The guest agent's server: `cc.vmagent.v1.VmAgent` on the vsock port the command
//! line names, for any CID (only the host can reach a guest's vsock).

use std::process::ExitCode;

use cc_proto::vmagent::v1 as pb;
use cc_proto::vmagent::v1::vm_agent_server::{VmAgent, VmAgentServer};
use tonic::{Request, Response, Status};

pub struct Agent;

#[tonic::async_trait]
impl VmAgent for Agent {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let uptime_ms = std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0, |s| (s * 1000.0) as u64);
        let mounts = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields.get(2) == Some(&"virtiofs")).then(|| {
                    let mode = if fields.get(3).is_some_and(|o| o.split(',').any(|f| f == "ro")) { "ro" } else { "rw" };
                    format!("{} on {} ({mode})", fields[0], fields[1])
                })
            })
            .collect();
        Ok(Response::new(pb::GetStatusResponse { uptime_ms, mounts }))
    }

    type ExecStream = crate::exec::ExecStream;

    async fn exec(
        &self,
        request: Request<tonic::Streaming<pb::ExecRequest>>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        crate::exec::exec(request.into_inner()).await.map(Response::new)
    }
}

pub fn run() -> ExitCode {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let (port, bridges) = match crate::settings(&cmdline) {
        Ok(settings) => (settings.port, settings.bridges),
        Err(e) => {
            eprintln!("cc-vm-agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cc-vm-agent: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async move {
        for bridge in bridges {
            let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, bridge))
                .await
                .map_err(|e| format!("cannot listen on 127.0.0.1:{bridge}: {e}"))?;
            tokio::spawn(carry_bridge(listener, bridge));
        }
        let address = tokio_vsock::VsockAddr::new(tokio_vsock::VMADDR_CID_ANY, port);
        let listener = tokio_vsock::VsockListener::bind(address)
            .map_err(|e| format!("cannot listen on vsock port {port}: {e}"))?;
        eprintln!("cc-vm-agent: serving on vsock port {port}");
        tonic::transport::Server::builder()
            .add_service(VmAgentServer::new(Agent))
            .serve_with_incoming(listener.incoming())
            .await
            .map_err(|e| format!("the server failed: {e}"))
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cc-vm-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Each connection to a bridged loopback port, carried to the host's vsock port of the
/// same number (sandboxd, which passes it to the run's socket).
async fn carry_bridge(listener: tokio::net::TcpListener, port: u16) {
    while let Ok((mut client, _)) = listener.accept().await {
        tokio::spawn(async move {
            let host = tokio_vsock::VsockAddr::new(tokio_vsock::VMADDR_CID_HOST, u32::from(port));
            if let Ok(mut upstream) = tokio_vsock::VsockStream::connect(host).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        });
    }
}
