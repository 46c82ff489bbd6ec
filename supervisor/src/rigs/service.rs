//! `cc.supervisor.v1.Rigs` on the client API socket: the RPC edge of [`RigManager`].

use std::sync::Arc;

use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::exec_rig_response::Event;
use cc_proto::supervisor::v1::rigs_server::Rigs;
use cc_proto::time::timestamp;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{Rig, RigManager};
use crate::ids::ConversationId;

pub struct RigsService {
    manager: Arc<RigManager>,
}

impl RigsService {
    pub fn new(manager: Arc<RigManager>) -> Self {
        Self { manager }
    }
}

fn to_proto(rig: &Rig, vm: sb::Vm) -> pb::Rig {
    pb::Rig {
        name: rig.name(),
        conversation_id: rig.conversation.to_string(),
        run_id: rig.run.to_string(),
        running: vm.running,
        ended_reason: vm.ended_reason,
        memory_mib: vm.memory_mib,
        cpus: vm.cpus,
        boot_ms: vm.boot_ms,
        accel: vm.accel,
        mounts: vm.mounts,
        qemu_pid: vm.qemu_pid,
        network: vm.network,
        create_time: Some(timestamp(
            rig.created.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64),
        )),
    }
}

#[tonic::async_trait]
impl Rigs for RigsService {
    async fn start_rig(&self, request: Request<pb::StartRigRequest>) -> Result<Response<pb::StartRigResponse>, Status> {
        let r = request.into_inner();
        if r.conversation_id.is_empty() {
            return Err(Status::invalid_argument("a rig belongs to a conversation: give one"));
        }
        let conversation = ConversationId::from_wire(r.conversation_id);
        let rig = self.manager.start(conversation, r.memory_mib, r.cpus, r.network).await?;
        let vm = rig.vm();
        Ok(Response::new(pb::StartRigResponse { rig: Some(to_proto(&rig, vm)) }))
    }

    async fn get_rig(&self, request: Request<pb::GetRigRequest>) -> Result<Response<pb::GetRigResponse>, Status> {
        let (rig, vm) = self.manager.get(&request.into_inner().name).await?;
        Ok(Response::new(pb::GetRigResponse { rig: Some(to_proto(&rig, vm)) }))
    }

    async fn list_rigs(
        &self,
        _request: Request<pb::ListRigsRequest>,
    ) -> Result<Response<pb::ListRigsResponse>, Status> {
        let rigs = self.manager.list().await.into_iter().map(|(rig, vm)| to_proto(&rig, vm)).collect();
        Ok(Response::new(pb::ListRigsResponse { rigs }))
    }

    type ExecRigStream = ReceiverStream<Result<pb::ExecRigResponse, Status>>;

    async fn exec_rig(&self, request: Request<pb::ExecRigRequest>) -> Result<Response<Self::ExecRigStream>, Status> {
        let r = request.into_inner();
        let mut output = self.manager.exec(&r.name, &r.command_line, r.timeout_seconds).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            while let Some(message) = output.recv().await {
                let event = match message {
                    Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stdout(b)) }) => Event::Stdout(b),
                    Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stderr(b)) }) => Event::Stderr(b),
                    Ok(sb::LaunchResponse { event: Some(LaunchEvent::Exit(e)) }) => {
                        Event::Exit(pb::RigExit { code: e.code, signal: e.signal, timed_out: e.timed_out })
                    }
                    Ok(_) => continue,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                if tx.send(Ok(pb::ExecRigResponse { event: Some(event) })).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn stop_rig(&self, request: Request<pb::StopRigRequest>) -> Result<Response<pb::StopRigResponse>, Status> {
        let (rig, vm) = self.manager.stop(&request.into_inner().name).await?;
        Ok(Response::new(pb::StopRigResponse { rig: Some(to_proto(&rig, vm)) }))
    }
}
