//! `cc.supervisor.v1.Terminals` on the client API socket: the RPC edge of
//! [`TerminalManager`].

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::attach_terminal_request::Input;
use cc_proto::supervisor::v1::attach_terminal_response::Event;
use cc_proto::supervisor::v1::terminals_server::Terminals;
use cc_proto::time::timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::{Backend, CreateRequest, Terminal, TerminalManager};
use crate::ids::ConversationId;
use cc_terminal::session::{Attachment, Control, Exit, Out, Size};

/// How long a client may take to say which terminal it attaches to.
const START_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
/// The scrollback is replayed in pieces of at most this.
const REPLAY_CHUNK: usize = 64 << 10;

pub struct TerminalsService {
    manager: Arc<TerminalManager>,
}

impl TerminalsService {
    pub fn new(manager: Arc<TerminalManager>) -> Self {
        Self { manager }
    }
}

fn backend_from(raw: i32) -> Result<Backend, Status> {
    match pb::TerminalBackend::try_from(raw) {
        Ok(pb::TerminalBackend::Unspecified | pb::TerminalBackend::Host) => Ok(Backend::Host),
        Ok(pb::TerminalBackend::Native) => Ok(Backend::Native),
        Ok(pb::TerminalBackend::Microvm) => Ok(Backend::Microvm),
        Err(_) => Err(Status::invalid_argument(format!("unknown terminal backend {raw}"))),
    }
}

fn backend_to(backend: Backend) -> pb::TerminalBackend {
    match backend {
        Backend::Host => pb::TerminalBackend::Host,
        Backend::Native => pb::TerminalBackend::Native,
        Backend::Microvm => pb::TerminalBackend::Microvm,
    }
}

/// A requested size: absent or all zero is the default.
fn size_from(size: Option<pb::TerminalSize>) -> Result<Option<Size>, Status> {
    match size {
        None | Some(pb::TerminalSize { columns: 0, rows: 0 }) => Ok(None),
        Some(s) => {
            let (columns, rows) = cc_host::terminal::cells(s.columns, s.rows).map_err(Status::invalid_argument)?;
            Ok(Some(Size { columns, rows }))
        }
    }
}

fn exit_to(exit: Exit) -> pb::TerminalExit {
    pb::TerminalExit { code: exit.code, signal: exit.signal, reason: exit.reason }
}

pub fn to_proto(t: &Terminal) -> pb::Terminal {
    let exit = t.session.exit();
    let size = t.session.size();
    pb::Terminal {
        name: t.name(),
        backend: backend_to(t.backend) as i32,
        conversation_id: t.conversation.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        run_id: t.run.as_ref().map(|r| r.to_string()).unwrap_or_default(),
        state: if exit.is_some() { pb::TerminalState::Exited } else { pb::TerminalState::Running } as i32,
        command: t.command.clone(),
        size: Some(pb::TerminalSize { columns: size.columns.into(), rows: size.rows.into() }),
        attached_clients: u32::try_from(t.session.attached()).unwrap_or(u32::MAX),
        create_time: Some(timestamp(
            t.created.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64),
        )),
        pid: if exit.is_some() { 0 } else { t.session.pid },
        exit: exit.map(exit_to),
        confinement: t.confinement.clone(),
    }
}

/// What one input message asks of the terminal.
enum Asked {
    Type(Vec<u8>),
    Control(Control),
    Nothing,
}

fn asked(input: Input) -> Result<Asked, Status> {
    Ok(match input {
        Input::Start(_) => return Err(Status::invalid_argument("an attach names its terminal once, first")),
        Input::Data(bytes) => Asked::Type(bytes),
        Input::Resize(size) => size_from(Some(size))?.map_or(Asked::Nothing, |s| Asked::Control(Control::Resize(s))),
        Input::Signal(number) => {
            if cc_host::terminal::signal(number).is_none() {
                return Err(Status::invalid_argument(format!(
                    "signal {number} is not one a terminal takes (INT, QUIT or TSTP, as a keyboard sends; delete the terminal to end it)"
                )));
            }
            Asked::Control(Control::Signal(number))
        }
    })
}

type AttachStream = Pin<Box<dyn Stream<Item = Result<pb::AttachTerminalResponse, Status>> + Send + 'static>>;

/// The answer to an attach: `attached`, the replay, live output, the exit; or the
/// refusal of the client's bad input. The attachment lives as long as the stream, and
/// detaches with it.
fn attach_stream(terminal: &Terminal, mut attachment: Attachment, refused: oneshot::Receiver<Status>) -> AttachStream {
    let attached = pb::TerminalAttached {
        terminal: Some(to_proto(terminal)),
        banner: terminal.banner(),
        scrollback_bytes: attachment.replay.len() as u64,
    };
    let mut first = vec![response(Event::Attached(attached))];
    // Moved out, so that a long attach does not hold its replay for its whole life.
    let replay = std::mem::take(&mut attachment.replay);
    first.extend(replay.chunks(REPLAY_CHUNK).map(|c| response(Event::Data(c.to_vec()))));
    if let Some(exit) = attachment.exited.clone() {
        first.push(response(Event::Exit(exit_to(exit))));
    }
    let live = attachment.live.take().map(|queue| Live { queue, attachment, refused });
    let tail = futures::stream::unfold(live, |live| async move {
        let mut live = live?;
        tokio::select! {
            out = live.queue.recv() => match out {
                Some(Out::Data(bytes)) => Some((response(Event::Data(bytes.to_vec())), Some(live))),
                Some(Out::Exit(exit)) => Some((response(Event::Exit(exit_to(exit))), None)),
                None if live.attachment.stalled.load(Ordering::SeqCst) => Some((
                    Err(Status::resource_exhausted(
                        "detached: this client took no output for too long (`[terminals] stalled_client_ms`); attach again",
                    )),
                    None,
                )),
                // The session ended without an exit for this client (its queue was
                // full at the exit): the session has it.
                None => live.attachment.session().exit().map(|e| (response(Event::Exit(exit_to(e))), None)),
            },
            Ok(status) = &mut live.refused => Some((Err(status), None)),
        }
    });
    Box::pin(tokio_stream::iter(first).chain(tail))
}

/// An attachment while its terminal runs.
struct Live {
    queue: mpsc::Receiver<Out>,
    attachment: Attachment,
    refused: oneshot::Receiver<Status>,
}

fn response(event: Event) -> Result<pb::AttachTerminalResponse, Status> {
    Ok(pb::AttachTerminalResponse { event: Some(event) })
}

#[tonic::async_trait]
impl Terminals for TerminalsService {
    async fn create_terminal(
        &self,
        request: Request<pb::CreateTerminalRequest>,
    ) -> Result<Response<pb::CreateTerminalResponse>, Status> {
        let r = request.into_inner();
        let request = CreateRequest {
            backend: backend_from(r.backend)?,
            conversation: (!r.conversation_id.is_empty()).then(|| ConversationId::from_wire(r.conversation_id)),
            cwd: (!r.cwd.is_empty()).then(|| PathBuf::from(r.cwd)),
            command: r.command,
            env: r.env.into_iter().collect(),
            size: size_from(r.size)?.unwrap_or_default(),
            network: r.network,
            rig: (!r.rig.is_empty()).then_some(r.rig),
        };
        let terminal = self.manager.create(request).await?;
        Ok(Response::new(pb::CreateTerminalResponse { terminal: Some(to_proto(&terminal)) }))
    }

    async fn get_terminal(
        &self,
        request: Request<pb::GetTerminalRequest>,
    ) -> Result<Response<pb::GetTerminalResponse>, Status> {
        let terminal = self.manager.get(&request.into_inner().name)?;
        Ok(Response::new(pb::GetTerminalResponse { terminal: Some(to_proto(&terminal)) }))
    }

    async fn list_terminals(
        &self,
        _request: Request<pb::ListTerminalsRequest>,
    ) -> Result<Response<pb::ListTerminalsResponse>, Status> {
        let terminals = self.manager.list().iter().map(|t| to_proto(t)).collect();
        Ok(Response::new(pb::ListTerminalsResponse { terminals }))
    }

    async fn delete_terminal(
        &self,
        request: Request<pb::DeleteTerminalRequest>,
    ) -> Result<Response<pb::DeleteTerminalResponse>, Status> {
        self.manager.delete(&request.into_inner().name)?;
        Ok(Response::new(pb::DeleteTerminalResponse {}))
    }

    type AttachTerminalStream = AttachStream;

    async fn attach_terminal(
        &self,
        request: Request<tonic::Streaming<pb::AttachTerminalRequest>>,
    ) -> Result<Response<Self::AttachTerminalStream>, Status> {
        let mut inputs = request.into_inner();
        let first = tokio::time::timeout(START_WITHIN, inputs.next())
            .await
            .map_err(|_| Status::deadline_exceeded("no terminal named within 10 s of the attach"))?;
        let start = match first {
            Some(Ok(pb::AttachTerminalRequest { input: Some(Input::Start(start)) })) => start,
            Some(Err(status)) => return Err(status),
            _ => return Err(Status::invalid_argument("an attach starts by naming its terminal")),
        };
        let terminal = self.manager.get(&start.name)?;
        if let Some(size) = size_from(start.size)? {
            terminal.session.control(Control::Resize(size));
        }
        let attachment = terminal.session.attach().ok_or_else(|| {
            Status::resource_exhausted(format!(
                "{} clients are attached to {} already, the most at once; detach one",
                cc_terminal::session::MAX_CLIENTS,
                terminal.name()
            ))
        })?;
        let session = terminal.session.clone();
        let (refuse, refused) = oneshot::channel();
        // The client's input, until it ends or sends nonsense, which ends the attach
        // with the refusal (the terminal goes on).
        tokio::spawn(async move {
            while let Some(Ok(message)) = inputs.next().await {
                let Some(input) = message.input else { continue };
                let more = match asked(input) {
                    Ok(Asked::Type(bytes)) => session.type_bytes(bytes).await,
                    Ok(Asked::Control(control)) => session.control(control),
                    Ok(Asked::Nothing) => true,
                    Err(status) => {
                        let _ = refuse.send(status);
                        return;
                    }
                };
                if !more {
                    return;
                }
            }
        });
        Ok(Response::new(attach_stream(&terminal, attachment, refused)))
    }
}
