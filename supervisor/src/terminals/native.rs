//! The native backend: the shell runs in a run of the conversation of its own, in the
//! run's harness_bash envelope, on a pseudo-terminal sandboxd opens (our init makes it
//! the envelope's controlling terminal). The run gives it everything a run has: the
//! sanitized environment, its cgroup, its network through the run's egress proxy and
//! its pushes through the gateway. What is typed is not classified by the command
//! policy: a terminal is a person's, and a line typed into it is not a tool call.
//!
//! The terminal and its run end together: when the shell exits the run is stopped,
//! and when the run is stopped (or sandboxd restarts, killing the envelope) the
//! terminal's output ends with how.

use std::sync::Arc;

use bytes::Bytes;
use cc_proto::common::v1::EnvelopeKind;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_interactive_request::Input;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::StreamExt;

use crate::ids::{ConversationId, RunId};
use crate::runs::{LiveRun, RunError, RunManager, StartRequest};
use cc_terminal::session::{Control, Exit, Forward, Forwarded, Hosted, Inputs, Size, forward};

/// What to start.
pub struct Spec {
    pub conversation: ConversationId,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub size: Size,
    pub network: bool,
}

/// The default command: a login shell.
pub fn default_command() -> Vec<String> {
    vec!["/bin/bash".into(), "-l".into()]
}

/// Starts the terminal's run, then its shell in the run's envelope, fed by `inputs`.
pub async fn start(manager: &Arc<RunManager>, spec: Spec, inputs: Inputs) -> Result<(Hosted, Arc<LiveRun>), RunError> {
    let live = manager
        .start(StartRequest {
            conversation: spec.conversation,
            agent: "default".into(),
            mode: cc_policy::Mode::default(),
            adapter: cc_proto::common::v1::Adapter::Harness,
            agent_command: String::new(),
            network: spec.network,
            limits: None,
            model_budget_tokens: 0,
            forwards: vec![],
        })
        .await?;
    let launch = sb::LaunchRequest {
        run_id: live.record.id.clone(),
        kind: EnvelopeKind::HarnessBash as i32,
        argv: spec.argv.into_iter().map(String::into_bytes).collect(),
        // It lives as long as its run.
        timeout_seconds: 0,
        host: None,
        pty: Some(sb::PtySize { columns: spec.size.columns.into(), rows: spec.size.rows.into() }),
        env: spec.env.into_iter().collect(),
    };
    let launched = manager.launch_interactive(&live, launch, "terminal").await;
    let (events, launch_inputs) = match launched {
        Ok(launched) => launched,
        Err(e) => {
            let _ = manager.stop(&live.run_id, "its terminal did not start").await;
            return Err(e);
        }
    };
    let (manager_for_output, run_for_output) = (manager.clone(), live.run_id.clone());
    let (output_tx, output) = mpsc::channel::<Bytes>(4);
    let (exited_tx, exited) = oneshot::channel();
    let hung_up = Arc::new(std::sync::Mutex::new(None));
    let (ended_tx, ended) = watch::channel(false);
    let input = carry_input(inputs, launch_inputs, manager.clone(), live.run_id.clone(), hung_up.clone(), ended);
    tokio::spawn(input);
    tokio::spawn(async move {
        carry_output(events, output_tx, exited_tx, manager_for_output, run_for_output, hung_up).await;
        let _ = ended_tx.send(true);
    });
    // The envelope's processes are sandboxd's children, not ours: no pid to show.
    Ok((Hosted { output, exited, pid: 0 }, live))
}

/// sandboxd's events to the session: output, then the exit; then the run is stopped.
async fn carry_output(
    mut events: tonic::Streaming<sb::LaunchInteractiveResponse>,
    output: mpsc::Sender<Bytes>,
    exited: oneshot::Sender<Exit>,
    manager: Arc<RunManager>,
    run: RunId,
    hung_up: HungUp,
) {
    let mut exit = None;
    loop {
        match events.next().await {
            Some(Ok(sb::LaunchInteractiveResponse { event: Some(event) })) => match event.event {
                Some(LaunchEvent::Stdout(bytes) | LaunchEvent::Stderr(bytes)) => {
                    if output.send(Bytes::from(bytes)).await.is_err() {
                        break;
                    }
                }
                Some(LaunchEvent::Exit(e)) => {
                    exit = Some(Exit { code: e.code, signal: e.signal, reason: String::new() });
                }
                Some(LaunchEvent::Envelope(_) | LaunchEvent::ProcessId(_) | LaunchEvent::Violation(_)) | None => {}
            },
            Some(Ok(_)) => {}
            Some(Err(status)) => {
                exit = Some(Exit { reason: format!("sandboxd: {}", status.message()), ..Exit::default() });
                break;
            }
            None => break,
        }
    }
    drop(output);
    let mut exit = exit.unwrap_or_else(|| Exit {
        reason: "sandboxd ended the launch without an exit (it restarted, or the run was stopped)".into(),
        ..Exit::default()
    });
    if let Some(why) = hung_up.lock().unwrap_or_else(|p| p.into_inner()).take() {
        exit.reason = why;
    }
    // The run was the terminal's alone.
    let _ = manager.stop(&run, "its terminal exited").await;
    let _ = exited.send(exit);
}

/// Clients' input to sandboxd until the terminal ends; a hangup stops the run, which
/// kills the envelope, whatever typing is still waiting for a command that reads none.
async fn carry_input(
    inputs: Inputs,
    launch: mpsc::Sender<sb::LaunchInteractiveRequest>,
    manager: Arc<RunManager>,
    run: RunId,
    hung_up: HungUp,
    ended: watch::Receiver<bool>,
) {
    let send = |next: Forward| {
        let input = match next {
            Forward::Typed(bytes) => Input::Stdin(bytes),
            Forward::Control(Control::Resize(size)) => {
                Input::Resize(sb::PtySize { columns: size.columns.into(), rows: size.rows.into() })
            }
            Forward::Control(Control::Signal(number)) => Input::Signal(number),
        };
        let launch = launch.clone();
        async move { launch.send(sb::LaunchInteractiveRequest { input: Some(input) }).await.is_ok() }
    };
    if let Forwarded::HungUp(why) = forward(inputs, ended, send).await {
        *hung_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        let _ = manager.stop(&run, &format!("its terminal was ended: {why}")).await;
    }
}

/// Why the terminal was ended from our side, for its exit.
type HungUp = Arc<std::sync::Mutex<Option<String>>>;
