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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, CreateTerminalRequest, CreateTerminalResponse,
    FileSystemCapabilities, InitializeRequest, KillTerminalRequest, KillTerminalResponse, McpServer, McpServerStdio,
    NewSessionRequest, PermissionOptionKind, PromptRequest, ReadTextFileRequest, ReadTextFileResponse,
    ReleaseTerminalRequest, ReleaseTerminalResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionId, SessionNotification, StopReason,
    TerminalExitStatus, TerminalOutputRequest, TerminalOutputResponse, TextContent, WaitForTerminalExitRequest,
    WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
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

use super::acp::{self, OutputTail};
use super::claude_code::AgentEvent;
use super::hook::Hooked;
use super::{LiveRun, RunError, RunManager};
use crate::helpers::HelperKind;
use crate::ids::RunId;

/// Requests of the agent's served at once; past it, one is refused at once.
const MAX_IN_FLIGHT: usize = 32;
/// Terminals a run's agent holds at once (released ones do not count).
const MAX_TERMINALS: usize = 16;
/// A line of the agent's longer than this ends the connection: no message of ours
/// to answer is that long, and the supervisor must not hold more.
const MAX_LINE_BYTES: usize = 16 << 20;
/// Our messages to the agent go to sandboxd in pieces of at most this.
const STDIN_CHUNK: usize = 1 << 20;
/// The agent's error output passed on per prompt, at most.
const MAX_STDERR_BYTES: u64 = 1 << 20;
/// The events one prompt records at most (as for claude-code).
const MAX_EVENTS_PER_PROMPT: u32 = 10_000;
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

struct PromptJob {
    text: String,
    timeout: Duration,
    out: Out,
    /// Held until the prompt is answered: one prompt at a time per run.
    _session: tokio::sync::OwnedMutexGuard<Option<String>>,
}

/// What the handlers and the prompt loop share.
struct Shared {
    manager: Arc<RunManager>,
    run_id: RunId,
    subject: String,
    current: Mutex<Current>,
    terminals: Mutex<HashMap<String, Arc<Terminal>>>,
    next_terminal: AtomicU64,
    in_flight: Arc<Semaphore>,
    /// How the agent's process ended, once it has.
    ended: Mutex<Option<String>>,
    /// Whether its launch's stream has ended: an idle agent's end is noticed here, so
    /// that the next prompt starts a new one rather than writing to the dead one.
    gone: watch::Sender<bool>,
}

/// The prompt in flight.
#[derive(Default)]
struct Current {
    out: Option<Out>,
    text: String,
    recorded: u32,
    stderr_sent: u64,
}

struct Terminal {
    output: Mutex<OutputTail>,
    exit: watch::Sender<Option<TerminalExitStatus>>,
    reader: Mutex<Option<tokio::task::AbortHandle>>,
}

fn refused(message: impl Into<String>) -> agent_client_protocol::Error {
    // A server-defined JSON-RPC code: the request was understood and refused.
    agent_client_protocol::Error::new(-32001, message.into())
}

fn run_error(e: RunError) -> agent_client_protocol::Error {
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
        current.recorded += 1;
        let events = self.manager.events();
        if current.recorded <= MAX_EVENTS_PER_PROMPT {
            events.record(event.kind, &self.subject, event.payload.clone());
        } else if current.recorded == MAX_EVENTS_PER_PROMPT + 1 {
            events.record("agent_events_suppressed", &self.subject, json!({ "after": MAX_EVENTS_PER_PROMPT }));
        }
        if let Some(out) = &current.out {
            let event = pb::AgentEvent { kind: event.kind.into(), payload_json: event.payload.to_string() };
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

    /// The gate's answer, through its approvers when a rule asks: the agent hears it
    /// as the option of the matching kind, once (an "always" would let it stop asking).
    async fn permission(
        self: Arc<Self>,
        request: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, agent_client_protocol::Error> {
        let run = self.live()?;
        let described = acp::describe_permission(&request.tool_call.fields, &run.record.work_dir);
        let (allowed, reason) = match described {
            Hooked::Gate(described) => match self.manager.ask_gate(&run, &described, true).await {
                Ok(()) => (true, "allowed by Control Center".to_owned()),
                Err(e) => (false, run_error(e).message),
            },
            Hooked::OwnTool => (false, "not a tool call Control Center judges".into()),
            Hooked::Refused(why) => (false, format!("Control Center: {why}")),
        };
        let wanted: &[PermissionOptionKind] = if allowed {
            &[PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways]
        } else {
            &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways]
        };
        let option = wanted
            .iter()
            .find_map(|kind| request.options.iter().find(|o| o.kind == *kind))
            .map(|o| o.option_id.clone());
        let payload = json!({
            "tool_call": request.tool_call.tool_call_id.to_string(),
            "title": request.tool_call.fields.title,
            "allowed": allowed,
            "reason": reason,
        });
        self.manager.events().record("agent_permission", &self.subject, payload);
        let outcome = match option {
            Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
            // No option says what the gate decided: the request is cancelled, which no
            // agent may take as a yes.
            None => RequestPermissionOutcome::Cancelled,
        };
        Ok(RequestPermissionResponse::new(outcome))
    }

    fn terminal(&self, id: &str) -> Result<Arc<Terminal>, agent_client_protocol::Error> {
        let terminals = self.terminals.lock().unwrap_or_else(|p| p.into_inner());
        terminals.get(id).cloned().ok_or_else(|| refused(format!("no terminal {id:?}")))
    }

    async fn create_terminal(
        self: Arc<Self>,
        request: CreateTerminalRequest,
    ) -> Result<CreateTerminalResponse, agent_client_protocol::Error> {
        let env: Vec<(String, String)> = request.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
        let line = acp::terminal_command_line(&request.command, &request.args, &env, request.cwd.as_deref())
            .map_err(|e| refused(format!("Control Center: {e}")))?;
        if self.terminals.lock().unwrap_or_else(|p| p.into_inner()).len() >= MAX_TERMINALS {
            return Err(refused(format!("Control Center: at most {MAX_TERMINALS} terminals at once; release one")));
        }
        let limit = request.output_byte_limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let bash = pb::BashArgs { command: line, timeout_seconds: 0 };
        // The gate first, then the harness's bash envelope, as `ccctl tool bash`.
        let mut events = self
            .manager
            .call_tool(&self.run_id, Some(pb::call_tool_request::Tool::Bash(bash)))
            .await
            .map_err(run_error)?;
        let (exit, _) = watch::channel(None);
        let terminal =
            Arc::new(Terminal { output: Mutex::new(OutputTail::new(limit)), exit, reader: Mutex::new(None) });
        let reading = terminal.clone();
        let reader = tokio::spawn(async move {
            let mut status = TerminalExitStatus::new();
            while let Some(event) = events.next().await {
                match event {
                    Ok(pb::CallToolResponse { event: Some(ToolEvent::Stdout(b) | ToolEvent::Stderr(b)) }) => {
                        reading.output.lock().unwrap_or_else(|p| p.into_inner()).push(&b);
                    }
                    Ok(pb::CallToolResponse { event: Some(ToolEvent::Exit(e)) }) => {
                        status = TerminalExitStatus::new()
                            .exit_code(e.code.and_then(|c| u32::try_from(c).ok()))
                            .signal(e.signal.map(signal_name));
                    }
                    Ok(_) => {}
                    Err(s) => {
                        let note = format!("\ncc: the terminal's command was lost: {}\n", s.message());
                        reading.output.lock().unwrap_or_else(|p| p.into_inner()).push(note.as_bytes());
                        status = TerminalExitStatus::new().signal(Some("SIGKILL".to_owned()));
                    }
                }
            }
            reading.exit.send_replace(Some(status));
        });
        *terminal.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(reader.abort_handle());
        let id = format!("term-{}", self.next_terminal.fetch_add(1, Ordering::Relaxed) + 1);
        self.terminals.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), terminal);
        Ok(CreateTerminalResponse::new(id))
    }

    fn terminal_output(
        &self,
        request: &TerminalOutputRequest,
    ) -> Result<TerminalOutputResponse, agent_client_protocol::Error> {
        let terminal = self.terminal(&request.terminal_id.to_string())?;
        let output = terminal.output.lock().unwrap_or_else(|p| p.into_inner());
        let exit = terminal.exit.borrow().clone();
        Ok(TerminalOutputResponse::new(output.text(), output.truncated()).exit_status(exit))
    }

    async fn wait_for_exit(
        self: Arc<Self>,
        request: WaitForTerminalExitRequest,
    ) -> Result<WaitForTerminalExitResponse, agent_client_protocol::Error> {
        let terminal = self.terminal(&request.terminal_id.to_string())?;
        let mut exit = terminal.exit.subscribe();
        // The command's own timeout (bash's) bounds this wait.
        let status = exit.wait_for(Option::is_some).await.map_err(|_| refused("the terminal was released"))?.clone();
        Ok(WaitForTerminalExitResponse::new(status.unwrap_or_default()))
    }

    /// Kills the command: dropping its launch's stream makes sandboxd kill it.
    fn kill_terminal(&self, id: &str) -> Result<(), agent_client_protocol::Error> {
        let terminal = self.terminal(id)?;
        if let Some(reader) = terminal.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            reader.abort();
        }
        terminal.exit.send_if_modified(|exit| {
            exit.is_none().then(|| *exit = Some(TerminalExitStatus::new().signal(Some("SIGKILL".to_owned())))).is_some()
        });
        Ok(())
    }

    fn release_terminal(&self, id: &str) -> Result<(), agent_client_protocol::Error> {
        self.kill_terminal(id)?;
        self.terminals.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        Ok(())
    }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
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
                s5.serve(&cx, responder, s5.clone().create_terminal(r))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: TerminalOutputRequest, responder: Responder<TerminalOutputResponse>, _cx| {
                responder.respond_with_result(s6.terminal_output(&r))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: WaitForTerminalExitRequest,
                        responder: Responder<WaitForTerminalExitResponse>,
                        cx: ConnectionTo<Agent>| { s7.serve(&cx, responder, s7.clone().wait_for_exit(r)) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: KillTerminalRequest, responder: Responder<KillTerminalResponse>, _cx| {
                responder.respond_with_result(
                    s8.kill_terminal(&r.terminal_id.to_string()).map(|()| KillTerminalResponse::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: ReleaseTerminalRequest, responder: Responder<ReleaseTerminalResponse>, _cx| {
                responder.respond_with_result(
                    s9.release_terminal(&r.terminal_id.to_string()).map(|()| ReleaseTerminalResponse::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| prompts(cx, shared, jobs, cwd, mcp).await)
        .await
}

/// The prompts, one at a time, each answered on its own stream.
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
            job = jobs.recv() => job,
            _ = gone.wait_for(|gone| *gone) => None,
        };
        let Some(mut job) = job else { break };
        {
            let mut current = shared.lock_current();
            *current = Current { out: Some(job.out.clone()), ..Default::default() };
        }
        let deadline = tokio::time::Instant::now() + job.timeout;
        let late = || cc_proto::reasons::helper_timeout("the ACP agent", "the prompt's answer", job.timeout);
        let started = tokio::time::timeout_at(deadline, async {
            if session.is_none() {
                session = Some(start_session(&cx, &shared, &cwd, &mcp).await?);
            }
            Ok::<_, agent_client_protocol::Error>(session.clone().unwrap_or_else(|| SessionId::new("")))
        })
        .await;
        let answer = match started {
            Ok(Ok(sid)) => {
                let prompt = PromptRequest::new(
                    sid.clone(),
                    vec![ContentBlock::Text(TextContent::new(std::mem::take(&mut job.text)))],
                );
                let asked = cx.send_request(prompt).block_task();
                tokio::pin!(asked);
                match tokio::time::timeout_at(deadline, &mut asked).await {
                    Ok(answer) => answer.map(|r| r.stop_reason),
                    // Past its timeout the prompt is cancelled, as ACP has a client do;
                    // an agent that does not answer that soon is killed (the connection
                    // ends with this loop).
                    Err(_) => {
                        let _ = cx.send_notification(CancelNotification::new(sid));
                        shared.flush_text();
                        let _ = job.out.send(Err(late())).await;
                        shared.lock_current().out = None;
                        drop(job);
                        if tokio::time::timeout(CANCEL_GRACE, &mut asked).await.is_err() {
                            return Err(refused("the agent did not answer its cancelled prompt"));
                        }
                        continue;
                    }
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                let _ = job.out.send(Err(late())).await;
                shared.lock_current().out = None;
                return Err(refused("the agent did not start its session in time"));
            }
        };
        shared.flush_text();
        match answer {
            Ok(stop) => {
                let reason = serde_json::to_value(stop).ok().and_then(|v| v.as_str().map(str::to_owned));
                let reason = reason.unwrap_or_else(|| "unknown".into());
                shared.emit(AgentEvent { kind: "agent_result", payload: json!({ "subtype": reason, "result": "" }) });
                let code = if stop == StopReason::EndTurn { 0 } else { 1 };
                let exit = pb::BashExit { code: Some(code), signal: None, timed_out: false, truncated: false };
                // The last message waits for a slow reader, a while; the steps before
                // it were dropped for one that did not keep up.
                let last = job.out.send(Ok(pb::PromptRunResponse { event: Some(Event::Exit(exit)) }));
                let _ = tokio::time::timeout(CANCEL_GRACE, last).await;
                shared.lock_current().out = None;
            }
            Err(e) => {
                let known = shared.ended.lock().unwrap_or_else(|p| p.into_inner()).is_some();
                let why = if known { shared.agent_gone() } else { format!("{} ({})", shared.agent_gone(), e.message) };
                let gone = RunError::AgentFailed(why);
                let _ = job.out.send(Err(Status::from(gone))).await;
                shared.lock_current().out = None;
                return Err(e);
            }
        }
    }
    Ok(())
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
        kind: "agent_init",
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
    let mut pending: Vec<u8> = Vec::new();
    let ended = loop {
        let event = match launched.next().await {
            Some(Ok(sb::LaunchInteractiveResponse { event: Some(sb::LaunchResponse { event }) })) => event,
            Some(Ok(_)) => continue,
            Some(Err(status)) => break format!("was lost with sandboxd ({})", status.message()),
            None => break "was lost: sandboxd's stream ended".to_owned(),
        };
        match event {
            Some(LaunchEvent::Stdout(chunk)) => {
                pending.extend_from_slice(&chunk);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                    if lines.send(Ok(line)).await.is_err() {
                        return;
                    }
                }
                if pending.len() > MAX_LINE_BYTES {
                    let too_long = std::io::Error::other(format!("the agent wrote a line over {MAX_LINE_BYTES} bytes"));
                    let _ = lines.send(Err(too_long)).await;
                    *shared.ended.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("wrote a line over {MAX_LINE_BYTES} bytes and was stopped"));
                    return;
                }
            }
            Some(LaunchEvent::Stderr(chunk)) => shared.stderr(&chunk),
            Some(LaunchEvent::Violation(v)) => {
                let payload =
                    json!({ "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "acp" });
                shared.manager.events().record("sandbox_violation", &shared.subject, payload);
            }
            Some(LaunchEvent::Exit(e)) => {
                let how = match (e.code, e.signal) {
                    (_, Some(signal)) => format!("signal {signal}"),
                    // Our init reports a command killed by a signal as a shell does.
                    (Some(code @ 129..=192), None) if enveloped => format!("signal {}", code - 128),
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
        let job = PromptJob { text, timeout: Duration::from_secs(u64::from(timeout)), out, _session: session };
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
        };
        let (launched, inputs) = self.launch_agent(run, launch).await?;

        let shared = Arc::new(Shared {
            manager: self.clone(),
            run_id: run.run_id.clone(),
            subject: format!("run:{}", run.record.id),
            current: Mutex::default(),
            terminals: Mutex::default(),
            next_terminal: AtomicU64::new(0),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            ended: Mutex::default(),
            gone: watch::channel(false).0,
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
            let terminals: Vec<String> =
                shared.terminals.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
            for id in terminals {
                let _ = shared.release_terminal(&id);
            }
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

    /// The agent's launch, with its input (the launch itself first), through
    /// [`RunManager::on_sandboxd`].
    async fn launch_agent(
        &self,
        run: &LiveRun,
        launch: sb::LaunchRequest,
    ) -> Result<(tonic::Streaming<sb::LaunchInteractiveResponse>, mpsc::Sender<sb::LaunchInteractiveRequest>), RunError>
    {
        let channels = self.channels().clone();
        let launching = |mut sandboxd: crate::channels::SandboxdClientWithSecret| {
            let (channels, launch) = (channels.clone(), launch.clone());
            async move {
                let (inputs, input_rx) = mpsc::channel::<sb::LaunchInteractiveRequest>(16);
                let _ = inputs.send(sb::LaunchInteractiveRequest { input: Some(Input::Launch(launch)) }).await;
                let call = sandboxd.launch_interactive(ReceiverStream::new(input_rx));
                let launched = channels.within(HelperKind::Sandboxd, "LaunchInteractive", call).await?;
                Ok((launched.into_inner(), inputs))
            }
        };
        self.on_sandboxd(run, "acp", launching).await
    }

    /// The product's MCP server, offered to the agent's session: cc-mcp, as the
    /// claude-code adapter gives it.
    fn acp_mcp_server(&self, run: &LiveRun) -> McpServerStdio {
        let helpers = self.agent_helpers(&run.record.id, false);
        let args = helpers.agent.map(|a| vec!["--agent".to_owned(), a]).unwrap_or_default();
        McpServerStdio::new(super::hook::MCP_SERVER_NAME, helpers.mcp).args(args)
    }
}
