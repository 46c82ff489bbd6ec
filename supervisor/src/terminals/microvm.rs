//! The microvm backend: the shell runs in a rig of the conversation of its own, a
//! microVM with the conversation's repos and agent work dir shared in and nothing else
//! of the host, on a pseudo-terminal the guest's agent opens. The terminal and its rig
//! end together.

use std::sync::Arc;

use bytes::Bytes;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::exec_vm_request::Input;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use tokio::sync::{mpsc, oneshot};

use crate::ids::ConversationId;
use crate::rigs::{Rig, RigError, RigManager};
use cc_terminal::session::{Control, Exit, Forward, Forwarded, Hosted, Inputs, Size, forward};

/// The default command: busybox's shell, the guest's only one.
pub fn default_command() -> Vec<String> {
    vec!["/bin/sh".into(), "-l".into()]
}

/// What to start.
pub struct Spec {
    pub conversation: ConversationId,
    /// A running rig to open the terminal in (it outlives the terminal); `None`: a
    /// rig of the terminal's own, which ends with it.
    pub rig: Option<Arc<Rig>>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub size: Size,
    /// A rig of its own: its network (see `StartRigRequest.network`).
    pub network: bool,
}

/// Starts the terminal's rig (unless it is given one), then its command on a terminal
/// in the guest.
pub async fn start(rigs: &Arc<RigManager>, spec: Spec, inputs: Inputs) -> Result<(Hosted, Arc<Rig>), RigError> {
    let Spec { conversation, rig, argv, env, size, network } = spec;
    let owned = rig.is_none();
    let rig = match rig {
        Some(rig) => rig,
        None => rigs.start(conversation, 0, 0, network).await?,
    };
    let start = sb::ExecVmStart {
        vm_id: rig.vm_id.clone(),
        argv: argv.into_iter().map(String::into_bytes).collect(),
        pty: Some(sb::PtySize { columns: size.columns.into(), rows: size.rows.into() }),
        env: env.into_iter().collect(),
        timeout_seconds: 0,
    };
    let (mut events, launch) = match rigs.exec_vm(start).await {
        Ok(started) => started,
        Err(e) => {
            if owned {
                let _ = rigs.stop(&rig.name()).await;
            }
            return Err(e);
        }
    };
    let (output_tx, output) = mpsc::channel::<Bytes>(4);
    let (exited_tx, exited) = oneshot::channel();
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    let (rigs_out, name_out) = (rigs.clone(), rig.name());
    let hung_up = Arc::new(std::sync::Mutex::new(None::<String>));
    let hung_up_out = hung_up.clone();
    // Set on a hangup: the command's call is dropped, which ends it in the guest.
    let (drop_call, mut call_dropped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut exit = Exit { reason: "the microVM ended without the command's exit".into(), ..Exit::default() };
        loop {
            let message = tokio::select! {
                message = events.recv() => match message {
                    Some(message) => message,
                    None => break,
                },
                _ = async { call_dropped.wait_for(|d| *d).await.map(|_| ()) } => break,
            };
            match message {
                Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stdout(b) | LaunchEvent::Stderr(b)) }) => {
                    if output_tx.send(Bytes::from(b)).await.is_err() {
                        break;
                    }
                }
                Ok(sb::LaunchResponse { event: Some(LaunchEvent::Exit(e)) }) => {
                    exit = Exit { code: e.code, signal: e.signal, reason: String::new() };
                    break;
                }
                Ok(_) => {}
                Err(status) => {
                    exit.reason = format!("sandboxd: {}", status.message());
                    break;
                }
            }
        }
        drop(output_tx);
        if let Some(why) = hung_up_out.lock().unwrap_or_else(|p| p.into_inner()).take() {
            exit.reason = why;
        }
        // A rig of the terminal's own ends with it; a rig it was opened in goes on.
        if owned {
            let _ = rigs_out.stop(&name_out).await;
        }
        let _ = ended_tx.send(true);
        let _ = exited_tx.send(exit);
    });
    let (rigs_in, name_in) = (rigs.clone(), rig.name());
    tokio::spawn(async move {
        let send = |next: Forward| {
            let input = match next {
                Forward::Typed(bytes) => Input::Stdin(bytes),
                Forward::Control(Control::Resize(size)) => {
                    Input::Resize(sb::PtySize { columns: size.columns.into(), rows: size.rows.into() })
                }
                Forward::Control(Control::Signal(number)) => Input::Signal(number),
            };
            let launch = launch.clone();
            async move { launch.send(sb::ExecVmRequest { input: Some(input) }).await.is_ok() }
        };
        if let Forwarded::HungUp(why) = forward(inputs, ended, send).await {
            *hung_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            // Its own rig goes with the terminal; in a rig it was opened in, the
            // command's call is dropped, which kills it there.
            if owned {
                let _ = rigs_in.stop(&name_in).await;
            } else {
                let _ = drop_call.send(true);
            }
        }
    });
    Ok((Hosted { output, exited, pid: 0 }, rig))
}
