//! The acp adapter's connection: the product as the ACP client of the run's agent.
//!
//! The agent is started at the run's first prompt, in the run's overlay envelope with
//! the sanitized environment, through sandboxd's LaunchInteractive: its stdout comes
//! back as the launch's output, our messages go in as its stdin. It lives for the
//! run; a later prompt finds it, and one that finds it dead starts a new one (with a
//! new session: an agent keeps its conversation in its own memory).
//!
//! Whatever the agent asks of us goes through the same layers as the harness's own
//! calls: `fs/*` through the gate and the runner's confinement, `terminal/*` through
//! the gate and the harness_bash envelope, `session/request_permission` to the gate
//! and its approvers. Handlers never wait in the connection's dispatch loop: each is
//! spawned, and at most [`MAX_IN_FLIGHT`] run at once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, CreateTerminalRequest, CreateTerminalResponse,
    FileSystemCapabilities, InitializeRequest, KillTerminalRequest, KillTerminalResponse, McpServer, McpServerStdio,
    NewSessionRequest, PromptRequest, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest,
    ReleaseTerminalResponse, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId,
    SessionNotification, StopReason, TerminalOutputRequest, TerminalOutputResponse, TextContent,
    WaitForTerminalExitRequest, WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use cc_proto::common::v1::EnvelopeKind;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_interactive_request::Input;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_response::Event as ToolEvent;
use cc_proto::supervisor::v1::prompt_run_response::Event;
use cc_proto::tools::v1 as tools;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::acp;
use super::acp_terminal::Terminals;
use super::agent_events::{AgentEvent, AgentEventKind, clipped};
use super::hook::Hooked;
use super::{LiveRun, RunError, RunManager};
use crate::ids::RunId;

/// Requests of the agent's served at once; past it, one is refused at once.
const MAX_IN_FLIGHT: usize = 32;
/// A line of the agent's longer than this ends the connection: no message of ours
/// to answer is that long, and the supervisor must not hold more.
const MAX_LINE_BYTES: usize = 16 << 20;
/// Our messages to the agent go to sandboxd in pieces of at most this.
const STDIN_CHUNK: usize = 1 << 20;
/// The agent's error output passed on per prompt, at most.
const MAX_STDERR_BYTES: u64 = 1 << 20;
/// How long a prompt cancelled at its timeout may take to answer before the agent is
/// killed.
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// The most a `fs/read_text_file` returns.
const MAX_READ_BYTES: usize = 8 << 20;

/// The run's live agent: where its prompts go.
pub struct AcpLink {
    jobs: mpsc::Sender<PromptJob>,
    gone: watch::Receiver<bool>,
}

type Out = mpsc::Sender<Result<pb::PromptRunResponse, Status>>;

type LastWord = mpsc::OwnedPermit<Result<pb::PromptRunResponse, Status>>;

struct PromptJob {
    text: String,
    timeout: Duration,
    /// The prompt's steps, dropped for a caller that does not keep up.
    out: Out,
    /// Held until the prompt is over, a cancelled one's answer included: one prompt
    /// at a time per run.
    session: Option<tokio::sync::OwnedMutexGuard<Option<String>>>,
    /// The place of the caller's last word, reserved as the prompt was sent: it
    /// reaches the caller however far behind the steps left it.
    last: Option<LastWord>,
    /// How the agent ended, once the connection took the prompt: what a prompt the
    /// connection dropped tells its caller.
    agent_end: Option<Arc<Mutex<Option<String>>>>,
}

impl PromptJob {
    /// The caller's last word: the prompt's end or why it failed. The run is free for
    /// its next prompt before the caller hears it.
    fn answer(&mut self, last: Result<pb::PromptRunResponse, Status>) {
        self.session.take();
        if let Some(place) = self.last.take() {
            place.send(last);
        }
    }
}

impl Drop for PromptJob {
    /// A prompt the connection dropped, queued or in flight, as it ended: its caller
    /// hears so rather than seeing its stream end without a word.
    fn drop(&mut self) {
        let ended = self.agent_end.as_ref().and_then(|e| e.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let why = match ended {
            Some(how) => format!("the ACP agent {how} before it answered; send the prompt again, to a new agent"),
            None => "the ACP agent's connection ended before it answered; send it again".to_owned(),
        };
        self.answer(Err(Status::from(RunError::AgentFailed(why))));
    }
}

/// What the handlers and the prompt loop share.
struct Shared {
    manager: Arc<RunManager>,
    run_id: RunId,
    subject: String,
    current: Mutex<Current>,
    terminals: Terminals,
    in_flight: Arc<Semaphore>,
    /// How the agent's process ended, once it has.
    ended: Arc<Mutex<Option<String>>>,
    /// Whether its launch's stream has ended: an idle agent's end is noticed here, so
    /// that the next prompt starts a new one rather than writing to the dead one.
    gone: watch::Sender<bool>,
    /// Set from the `session/cancel` we send until the cancelled prompt is over:
    /// permission requests waiting on the gate then, or arriving meanwhile, are
    /// answered "cancelled".
    cancelling: watch::Sender<bool>,
}

/// The prompt in flight.
#[derive(Default)]
struct Current {
    out: Option<Out>,
    text: String,
    recorded: super::agent_events::PromptBudget,
    stderr_sent: u64,
}

pub(super) fn refused(message: impl Into<String>) -> agent_client_protocol::Error {
    // A server-defined JSON-RPC code: the request was understood and refused.
    agent_client_protocol::Error::new(-32001, message.into())
}

pub(super) fn run_error(e: RunError) -> agent_client_protocol::Error {
    match e {
        RunError::GateDenied { reason, .. } | RunError::NoApprover(reason) => {
            refused(format!("Control Center policy: {reason}"))
        }
        other => refused(format!("Control Center: {}", Status::from(other).message())),
    }
}

impl Shared {
    fn lock_current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `event` for the run (up to the prompt's cap) and streams it to the
    /// prompt's caller, who may have stopped reading: then it is dropped for them.
    fn emit(&self, event: AgentEvent) {
        let mut current = self.lock_current();
        current.recorded.record(self.manager.events(), &self.subject, &event);
        if let Some(out) = &current.out {
            let event = event.to_wire();
            let _ = out.try_send(Ok(pb::PromptRunResponse { event: Some(Event::AgentEvent(event)) }));
        }
    }

    fn update(&self, notification: SessionNotification) {
        let events = {
            let mut current = self.lock_current();
            acp::update_events(&notification.update, &mut current.text)
        };
        for event in events {
            self.emit(event);
        }
    }

    fn flush_text(&self) {
        let text = acp::flush_text(&mut self.lock_current().text);
        if let Some(event) = text {
            self.emit(event);
        }
    }

    fn stderr(&self, chunk: &[u8]) {
        let mut current = self.lock_current();
        if current.stderr_sent >= MAX_STDERR_BYTES {
            return;
        }
        let keep = chunk.len().min((MAX_STDERR_BYTES - current.stderr_sent) as usize);
        current.stderr_sent += keep as u64;
        if let Some(out) = &current.out {
            let _ = out.try_send(Ok(pb::PromptRunResponse { event: Some(Event::Stderr(chunk[..keep].to_vec())) }));
        }
    }

    /// Whether the agent's process is known to have ended (or to have been stopped).
    fn agent_ended(&self) -> bool {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    fn agent_gone(&self) -> String {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone();
        format!(
            "the ACP agent {}; the next prompt starts it again, in a new session",
            ended.unwrap_or_else(|| "stopped answering".into())
        )
    }

    /// Runs `work` off the dispatch loop and answers with what it returns; past
    /// [`MAX_IN_FLIGHT`] the request is refused at once.
    fn serve<T, F>(
        self: &Arc<Self>,
        cx: &ConnectionTo<Agent>,
        responder: Responder<T>,
        work: F,
    ) -> Result<(), agent_client_protocol::Error>
    where
        T: agent_client_protocol::JsonRpcResponse + Send + 'static,
        F: Future<Output = Result<T, agent_client_protocol::Error>> + Send + 'static,
    {
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return responder.respond_with_error(refused(format!(
                "Control Center serves at most {MAX_IN_FLIGHT} requests of an agent at once"
            )));
        };
        cx.spawn(async move {
            let answer = work.await;
            drop(permit);
            // The agent may have gone meanwhile: nothing to answer then.
            let _ = responder.respond_with_result(answer);
            Ok(())
        })
    }

    fn live(&self) -> Result<Arc<LiveRun>, agent_client_protocol::Error> {
        self.manager.require_live(&self.run_id).map_err(run_error)
    }

    async fn call(&self, tool: pb::call_tool_request::Tool) -> Result<tools::ToolResult, agent_client_protocol::Error> {
        let mut events = self.manager.call_tool(&self.run_id, Some(tool)).await.map_err(run_error)?;
        match events.next().await {
            Some(Ok(pb::CallToolResponse { event: Some(ToolEvent::Result(result)) })) => Ok(result),
            Some(Err(status)) => Err(refused(format!("Control Center: {}", status.message()))),
            _ => Err(refused("Control Center: the runner gave no result")),
        }
    }

    async fn read(
        self: Arc<Self>,
        request: ReadTextFileRequest,
    ) -> Result<ReadTextFileResponse, agent_client_protocol::Error> {
        let path = request.path.as_os_str().as_encoded_bytes().to_vec();
        // ACP counts lines from 1; the runner from 0. Without a limit the whole file,
        // window by window.
        let mut offset = u64::from(request.line.unwrap_or(1).max(1) - 1);
        let mut left = request.limit.map(u64::from);
        let mut text = String::new();
        loop {
            let limit = left.unwrap_or(0);
            let read = tools::ReadArgs { path: path.clone(), offset, limit };
            let result = self.call(pb::call_tool_request::Tool::Read(read)).await?;
            let Some(tools::tool_result::Result::Read(window)) = result.result else {
                return Err(refused("Control Center: the runner's answer was not a read"));
            };
            if window.binary {
                return Err(refused(format!("{} is a binary file", request.path.display())));
            }
            text.push_str(&window.text);
            offset += window.lines;
            if let Some(l) = &mut left {
                *l = l.saturating_sub(window.lines);
            }
            if !window.more || window.lines == 0 || left == Some(0) {
                return Ok(ReadTextFileResponse::new(text));
            }
            if text.len() > MAX_READ_BYTES {
                return Err(refused(format!(
                    "{} is over {MAX_READ_BYTES} bytes: read it with line and limit",
                    request.path.display()
                )));
            }
        }
    }

    async fn write(
        self: Arc<Self>,
        request: WriteTextFileRequest,
    ) -> Result<WriteTextFileResponse, agent_client_protocol::Error> {
        let write = tools::WriteArgs {
            path: request.path.as_os_str().as_encoded_bytes().to_vec(),
            content: request.content.into_bytes(),
        };
        self.call(pb::call_tool_request::Tool::Write(write)).await?;
        Ok(WriteTextFileResponse::new())
    }

    /// The gate's answer, through its approvers when a rule asks (see
    /// [`acp::permission_outcome`]). A prompt cancelled meanwhile has its pending
    /// requests answered "cancelled", as ACP asks of a client, and their asks withdrawn.
    async fn permission(
        self: Arc<Self>,
        request: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, agent_client_protocol::Error> {
        let mut cancelling = self.cancelling.subscribe();
        let mut cancelled_first = false;
        let run = self.live()?;
        let described = acp::describe_permission(&request.tool_call.fields, &run.record.work_dir);
        let (allowed, reason) = match described {
            Hooked::Gate(described) => tokio::select! {
                decided = self.manager.ask_gate(&run, &described, true) => match decided {
                    Ok(()) => (true, "allowed by Control Center".to_owned()),
                    Err(e) => (false, run_error(e).message),
                },
                _ = cancelling.wait_for(|c| *c) => {
                    cancelled_first = true;
                    (false, "the prompt was cancelled before the gate answered".to_owned())
                }
            },
            Hooked::OwnTool => (false, "not a tool call Control Center judges".into()),
            Hooked::Refused(why) => (false, format!("Control Center: {why}")),
        };
        // Cancelled before the gate answered, or as it answered.
        let cancelled = cancelled_first || *self.cancelling.borrow();
        let outcome = if cancelled {
            RequestPermissionOutcome::Cancelled
        } else {
            acp::permission_outcome(&request.options, allowed)
        };
        let title = request.tool_call.fields.title.as_deref().map(clipped);
        self.emit(AgentEvent {
            kind: AgentEventKind::Permission,
            payload: json!({
                "tool_call": clipped(&request.tool_call.tool_call_id.to_string()),
                "title": title,
                "allowed": allowed && !cancelled,
                "reason": reason,
            }),
        });
        Ok(RequestPermissionResponse::new(outcome))
    }
}

/// The client side of the connection, every request of the agent's served by `shared`.
async fn serve_agent(
    shared: Arc<Shared>,
    transport: impl agent_client_protocol::ConnectTo<Client> + 'static,
    jobs: mpsc::Receiver<PromptJob>,
    cwd: PathBuf,
    mcp: McpServerStdio,
) -> Result<(), agent_client_protocol::Error> {
    let (s1, s2, s3, s4, s5, s6, s7, s8, s9) = (
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
    );
    Client
        .v1()
        .name("control-center")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                s1.update(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |r: ReadTextFileRequest, responder: Responder<ReadTextFileResponse>, cx: ConnectionTo<Agent>| {
                s2.serve(&cx, responder, s2.clone().read(r))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: WriteTextFileRequest,
                        responder: Responder<WriteTextFileResponse>,
                        cx: ConnectionTo<Agent>| { s3.serve(&cx, responder, s3.clone().write(r)) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse>,
                        cx: ConnectionTo<Agent>| { s4.serve(&cx, responder, s4.clone().permission(r)) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: CreateTerminalRequest,
                        responder: Responder<CreateTerminalResponse>,
                        cx: ConnectionTo<Agent>| {
                let s = s5.clone();
                s5.serve(&cx, responder, async move { s.terminals.create(&s.manager, &s.run_id, r).await })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: TerminalOutputRequest, responder: Responder<TerminalOutputResponse>, _cx| {
                responder.respond_with_result(s6.terminals.output(&r.terminal_id.to_string()))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: WaitForTerminalExitRequest,
                        responder: Responder<WaitForTerminalExitResponse>,
                        cx: ConnectionTo<Agent>| {
                let s = s7.clone();
                let waited = async move {
                    s.terminals.wait_for_exit(&r.terminal_id.to_string()).await.map(WaitForTerminalExitResponse::new)
                };
                s7.serve(&cx, responder, waited)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: KillTerminalRequest, responder: Responder<KillTerminalResponse>, _cx| {
                responder.respond_with_result(
                    s8.terminals.kill(&r.terminal_id.to_string()).map(|()| KillTerminalResponse::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: ReleaseTerminalRequest, responder: Responder<ReleaseTerminalResponse>, _cx| {
                responder.respond_with_result(
                    s9.terminals.release(&r.terminal_id.to_string()).map(|()| ReleaseTerminalResponse::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| prompts(cx, shared, jobs, cwd, mcp).await)
        .await
}

/// The prompts, one at a time, each answered on its own stream. An error returned
/// ends the connection, and the agent with it.
async fn prompts(
    cx: ConnectionTo<Agent>,
    shared: Arc<Shared>,
    mut jobs: mpsc::Receiver<PromptJob>,
    cwd: PathBuf,
    mcp: McpServerStdio,
) -> Result<(), agent_client_protocol::Error> {
    let mut session: Option<SessionId> = None;
    let mut gone = shared.gone.subscribe();
    loop {
        let job = tokio::select! {
            biased;
            _ = gone.wait_for(|gone| *gone) => None,
            job = jobs.recv() => job,
        };
        let Some(mut job) = job else { break };
        job.agent_end = Some(shared.ended.clone());
        // What an idle agent said before is not this prompt's.
        *shared.lock_current() = Current { out: Some(job.out.clone()), ..Default::default() };
        let _records = shared.manager.events().prompt_scope(shared.run_id.as_str());
        let deadline = tokio::time::Instant::now() + job.timeout;
        let timeout = job.timeout;
        let late = move || cc_proto::reasons::helper_timeout("the ACP agent", "the prompt's answer", timeout);
        let started = tokio::time::timeout_at(deadline, async {
            if session.is_none() {
                session = Some(start_session(&cx, &shared, &cwd, &mcp).await?);
            }
            Ok::<_, agent_client_protocol::Error>(session.clone().unwrap_or_else(|| SessionId::new("")))
        })
        .await;
        let sid = match started {
            Ok(Ok(sid)) => sid,
            Ok(Err(e)) => {
                let why = if shared.agent_ended() {
                    shared.agent_gone()
                } else {
                    format!("the ACP agent did not start a session: {}", e.message)
                };
                // Closed first: a prompt sent as this one is answered starts a new agent.
                jobs.close();
                end_prompt(&shared, &mut job, Err(Status::from(RunError::AgentFailed(why))));
                return Err(e);
            }
            Err(_) => {
                jobs.close();
                end_prompt(&shared, &mut job, Err(late()));
                return Err(refused("the agent did not start its session in time"));
            }
        };
        let text = std::mem::take(&mut job.text);
        let prompt = PromptRequest::new(sid.clone(), vec![ContentBlock::Text(TextContent::new(text))]);
        let asked = cx.send_request(prompt).block_task();
        tokio::pin!(asked);
        let answered = tokio::select! {
            answer = &mut asked => Some(answer),
            _ = tokio::time::sleep_until(deadline) => None,
            // Its caller went away (ccctl was interrupted): no one wants the answer.
            _ = job.out.closed() => None,
        };
        let Some(answer) = answered else {
            // The prompt is cancelled, as ACP has a client do, and its permission
            // requests still waiting on the gate are answered "cancelled". What the
            // agent says until it answers still reaches the caller, who then hears of
            // the timeout; an agent that does not answer soon is killed (the
            // connection ends with this loop). The run's next prompt waits for this.
            let _ = cx.send_notification(CancelNotification::new(sid));
            shared.cancelling.send_replace(true);
            let stopped = tokio::time::timeout(CANCEL_GRACE, &mut asked).await.is_ok();
            shared.cancelling.send_replace(false);
            if !stopped {
                jobs.close();
                end_prompt(&shared, &mut job, Err(late()));
                return Err(refused("the agent did not answer its cancelled prompt"));
            }
            end_prompt(&shared, &mut job, Err(late()));
            continue;
        };
        match answer {
            Ok(response) => {
                let stop = response.stop_reason;
                shared.flush_text();
                let reason = serde_json::to_value(stop).ok().and_then(|v| v.as_str().map(str::to_owned));
                let reason = reason.unwrap_or_else(|| "unknown".into());
                shared.emit(AgentEvent {
                    kind: AgentEventKind::Result,
                    payload: json!({ "subtype": reason, "result": "" }),
                });
                let code = if stop == StopReason::EndTurn { 0 } else { 1 };
                let exit = pb::BashExit { code: Some(code), signal: None, timed_out: false, truncated: false };
                end_prompt(&shared, &mut job, Ok(pb::PromptRunResponse { event: Some(Event::Exit(exit)) }));
            }
            // The agent answered the prompt with an error and lives on: the prompt
            // failed, the agent and its session did not. The connection's own end is
            // told apart by a marker the library sets and a peer cannot send, and the
            // agent's by the end of its output, noted before the connection sees it.
            Err(e) if !connection_lost(&e) && !shared.agent_ended() => {
                let why = format!("the ACP agent answered the prompt with an error: {} ({})", e.message, e.code);
                end_prompt(&shared, &mut job, Err(Status::from(RunError::AgentFailed(why))));
            }
            Err(e) => {
                let why = if shared.agent_ended() {
                    shared.agent_gone()
                } else {
                    format!("{} ({})", shared.agent_gone(), e.message)
                };
                jobs.close();
                end_prompt(&shared, &mut job, Err(Status::from(RunError::AgentFailed(why))));
                return Err(e);
            }
        }
    }
    Ok(())
}

fn connection_lost(e: &agent_client_protocol::Error) -> bool {
    agent_client_protocol::is_incoming_transport_closed(e) || agent_client_protocol::is_connection_terminated(e)
}

/// Answers the prompt in flight with `last`, its gathered text first; nothing of the
/// agent's reaches the caller after it.
fn end_prompt(shared: &Shared, job: &mut PromptJob, last: Result<pb::PromptRunResponse, Status>) {
    shared.flush_text();
    *shared.lock_current() = Current::default();
    job.answer(last);
}

async fn start_session(
    cx: &ConnectionTo<Agent>,
    shared: &Shared,
    cwd: &std::path::Path,
    mcp: &McpServerStdio,
) -> Result<SessionId, agent_client_protocol::Error> {
    let capabilities = ClientCapabilities::new()
        .fs(FileSystemCapabilities::new().read_text_file(true).write_text_file(true))
        .terminal(true);
    let init = InitializeRequest::new(ProtocolVersion::V1).client_capabilities(capabilities);
    let agent = cx.send_request(init).block_task().await?;
    let new = NewSessionRequest::new(cwd.to_owned()).mcp_servers(vec![McpServer::Stdio(mcp.clone())]);
    let session = cx.send_request(new).block_task().await?;
    let info = agent.agent_info.map(|i| i.name).unwrap_or_default();
    shared.emit(AgentEvent {
        kind: AgentEventKind::Init,
        payload: json!({
            "session_id": session.session_id.to_string(),
            "model": info,
            "cwd": cwd.to_string_lossy(),
            "tools": [],
            "permission_mode": "asked through session/request_permission",
        }),
    });
    Ok(session.session_id)
}

/// The agent's output as lines, each at most [`MAX_LINE_BYTES`]; everything else of
/// its launch (stderr, violations, its end) goes to `shared`.
async fn pump(
    mut launched: tonic::Streaming<sb::LaunchInteractiveResponse>,
    lines: mpsc::Sender<std::io::Result<String>>,
    shared: Arc<Shared>,
    enveloped: bool,
) {
    let mut split = acp::LineSplitter::new(MAX_LINE_BYTES);
    let ended = loop {
        let event = match launched.next().await {
            Some(Ok(sb::LaunchInteractiveResponse { event: Some(sb::LaunchResponse { event }) })) => event,
            Some(Ok(_)) => continue,
            Some(Err(status)) => break format!("was lost with sandboxd ({})", status.message()),
            None => break "was lost: sandboxd's stream ended".to_owned(),
        };
        match event {
            Some(LaunchEvent::Stdout(chunk)) => match split.push(&chunk) {
                Ok(complete) => {
                    for line in complete {
                        if lines.send(Ok(line)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(too_long) => {
                    *shared.ended.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("wrote a line over {MAX_LINE_BYTES} bytes and was stopped"));
                    let _ = lines.send(Err(std::io::Error::other(too_long))).await;
                    return;
                }
            },
            Some(LaunchEvent::Stderr(chunk)) => shared.stderr(&chunk),
            Some(LaunchEvent::Violation(v)) => {
                let payload =
                    json!({ "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "acp" });
                shared.manager.events().record("sandbox_violation", &shared.subject, payload);
            }
            Some(LaunchEvent::Exit(e)) => {
                let how = match acp::exit_of(e.code, e.signal, enveloped) {
                    (_, Some(signal)) => format!("signal {signal}"),
                    (Some(code), None) => format!("code {code}"),
                    (None, None) => "status unknown".into(),
                };
                shared.manager.events().record(
                    "agent_exited",
                    &shared.subject,
                    json!({ "code": e.code, "signal": e.signal }),
                );
                break format!("exited ({how})");
            }
            Some(LaunchEvent::Envelope(_)) | None => {}
        }
    };
    *shared.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(ended);
    // A last message the agent wrote without its newline before it ended.
    if let Some(last) = split.finish() {
        let _ = lines.send(Ok(last)).await;
    }
}

type Events = ReceiverStream<Result<pb::PromptRunResponse, Status>>;

impl RunManager {
    /// A prompt to the run's ACP agent, started first if it is not running.
    pub(super) async fn prompt_acp(
        self: &Arc<Self>,
        run: &Arc<LiveRun>,
        text: String,
        timeout: u32,
    ) -> Result<Events, RunError> {
        let session = run.agent.0.clone().try_lock_owned().map_err(|_| RunError::AgentBusy(run.run_id.clone()))?;
        let jobs = {
            let link = run.acp.lock().unwrap_or_else(|p| p.into_inner());
            link.as_ref().filter(|l| !l.jobs.is_closed() && !*l.gone.borrow()).map(|l| l.jobs.clone())
        };
        let jobs = match jobs {
            Some(jobs) => jobs,
            None => {
                let link = self.start_acp(run).await?;
                let jobs = link.jobs.clone();
                *run.acp.lock().unwrap_or_else(|p| p.into_inner()) = Some(link);
                jobs
            }
        };
        let (out, rx) = mpsc::channel(256);
        let last =
            out.clone().try_reserve_owned().map_err(|_| RunError::AgentFailed("the prompt's stream closed".into()))?;
        let timeout = Duration::from_secs(u64::from(timeout));
        let job = PromptJob { text, timeout, out, session: Some(session), last: Some(last), agent_end: None };
        jobs.send(job)
            .await
            .map_err(|_| RunError::AgentFailed("the ACP agent ended as the prompt was sent; send it again".into()))?;
        Ok(ReceiverStream::new(rx))
    }

    async fn start_acp(self: &Arc<Self>, run: &LiveRun) -> Result<AcpLink, RunError> {
        let argv = acp::agent_argv(&run.agent_command).map_err(RunError::Precondition)?;
        let launch = sb::LaunchRequest {
            run_id: run.record.id.clone(),
            kind: EnvelopeKind::Overlay as i32,
            argv: argv.into_iter().map(String::into_bytes).collect(),
            // The agent lives for the run: sandboxd ends it with the run.
            timeout_seconds: 0,
            host: None,
            ..Default::default()
        };
        let (launched, inputs) = self.launch_interactive(run, launch, "acp").await?;

        let shared = Arc::new(Shared {
            manager: self.clone(),
            run_id: run.run_id.clone(),
            subject: format!("run:{}", run.record.id),
            current: Mutex::default(),
            terminals: Terminals::default(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            ended: Arc::default(),
            gone: watch::channel(false).0,
            cancelling: watch::channel(false).0,
        });
        let (line_tx, line_rx) = mpsc::channel(64);
        let gone = shared.gone.subscribe();
        let pumped = shared.clone();
        let enveloped = self.env.enveloped;
        let pump = tokio::spawn(async move {
            pump(launched, line_tx, pumped.clone(), enveloped).await;
            pumped.gone.send_replace(true);
        });
        // Our messages, each a line, to the agent's stdin.
        let stdin =
            futures::sink::unfold(inputs, async |inputs: mpsc::Sender<sb::LaunchInteractiveRequest>, line: String| {
                let mut bytes = line.into_bytes();
                bytes.push(b'\n');
                for piece in bytes.chunks(STDIN_CHUNK) {
                    let input = Some(Input::Stdin(piece.to_vec()));
                    inputs.send(sb::LaunchInteractiveRequest { input }).await.map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the agent's input is closed")
                    })?;
                }
                Ok::<_, std::io::Error>(inputs)
            });
        let transport = Lines::new(Box::pin(stdin), ReceiverStream::new(line_rx));
        let (jobs, jobs_rx) = mpsc::channel(1);
        let cwd = run.record.work_dir.clone();
        let mcp = self.acp_mcp_server(run);
        let subject = shared.subject.clone();
        let events = self.events().clone();
        tokio::spawn(async move {
            let ended = serve_agent(shared.clone(), transport, jobs_rx, cwd, mcp).await;
            // Whatever ended the connection, the agent goes with it: dropping its
            // launch's stream makes sandboxd kill it.
            pump.abort();
            // Its terminals go with it: dropping their readers kills their commands.
            shared.terminals.release_all();
            if let Err(e) = ended {
                events.record(
                    "agent_disconnected",
                    &subject,
                    json!({ "reason": shared.agent_gone(), "error": e.message }),
                );
            }
        });
        Ok(AcpLink { jobs, gone })
    }

    /// The product's MCP server, offered to the agent's session: cc-mcp, as the
    /// claude-code adapter gives it.
    fn acp_mcp_server(&self, run: &LiveRun) -> McpServerStdio {
        let helpers = self.agent_helpers(&run.record.id, false);
        let args = helpers.agent.map(|a| vec!["--agent".to_owned(), a]).unwrap_or_default();
        McpServerStdio::new(super::hook::MCP_SERVER_NAME, helpers.mcp).args(args)
    }
}
