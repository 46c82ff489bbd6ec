//! The run's ACP agent's client, in the run's own runner. The supervisor launched the
//! agent (sandboxd's LaunchInteractive, in the run's overlay envelope) and relays its
//! stdio unread: its stdout arrives here as `stdout` messages, and what this client
//! writes goes back as `stdin`. The agent lives for the run; the stream lives as long
//! as the agent.
//!
//! Whatever the agent asks goes through the same layers as the harness's own calls,
//! asked of the supervisor in typed messages (`AcpRequest`): `fs/*` through the gate
//! and the runner's confinement, `terminal/*` through the gate and the harness_bash
//! envelope, `session/request_permission` to the gate and its approvers. Handlers
//! never wait in the connection's dispatch loop: each is spawned, and at most
//! [`MAX_IN_FLIGHT`] run at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, CreateTerminalRequest, CreateTerminalResponse,
    FileSystemCapabilities, InitializeRequest, KillTerminalRequest, KillTerminalResponse, McpServer, McpServerStdio,
    NewSessionRequest, PromptRequest, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest,
    ReleaseTerminalResponse, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId,
    SessionNotification, StopReason, TerminalExitStatus, TerminalOutputRequest, TerminalOutputResponse, TextContent,
    WaitForTerminalExitRequest, WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use cc_proto::agent_event::{MAX_EVENT_TEXT, clipped, clipped_id};
use cc_proto::runner::v1 as rn;
use cc_proto::runner::v1::acp_answer::Answer;
use cc_proto::runner::v1::acp_prompt_failure::Kind as FailureKind;
use cc_proto::runner::v1::acp_request::Ask;
use cc_proto::runner::v1::agent_event::Step;
use cc_proto::runner::v1::drive_acp_agent_request::Input;
use cc_proto::runner::v1::drive_acp_agent_response::Output;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::{LineSplitter, Permission};

/// Requests of the agent's served at once; past it, one is refused at once.
const MAX_IN_FLIGHT: usize = 32;
/// A line of the agent's longer than this ends the connection: no message of ours
/// to answer is that long, and the runner must not hold more.
const MAX_LINE_BYTES: usize = 16 << 20;
/// Our messages to the agent go to the supervisor in pieces of at most this.
const STDIN_CHUNK: usize = 1 << 20;
/// How long a prompt cancelled at its timeout may take to answer before the agent is
/// let go (the connection ends, and the supervisor kills it).
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// What this client tells the supervisor, waiting for it to take them.
const OUTPUT_HELD: usize = 64;

type Error = agent_client_protocol::Error;
pub type Outputs = ReceiverStream<Result<rn::DriveAcpAgentResponse, Status>>;

fn refused(message: impl Into<String>) -> Error {
    // A server-defined JSON-RPC code: the request was understood and refused.
    Error::new(-32001, message.into())
}

/// `DriveAcpAgent`: the start first, then the agent's output, prompts and answers.
pub async fn drive(mut input: Streaming<rn::DriveAcpAgentRequest>) -> Result<Outputs, Status> {
    let start = match input.message().await? {
        Some(rn::DriveAcpAgentRequest { input: Some(Input::Start(start)) }) => start,
        _ => return Err(Status::invalid_argument("the first message starts the agent's client")),
    };
    let (out, outputs) = mpsc::channel(OUTPUT_HELD);
    let shared = Arc::new(Shared {
        out,
        cwd: PathBuf::from(&start.cwd),
        next_request: AtomicU64::new(1),
        pending: Mutex::default(),
        current: Mutex::default(),
        prompt: Mutex::default(),
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        ended: Mutex::default(),
        cancelling: watch::channel(false).0,
    });
    let mcp = McpServerStdio::new(start.mcp_name, start.mcp_command).args(start.mcp_args);
    let (lines, lines_rx) = mpsc::channel(64);
    let (jobs, jobs_rx) = mpsc::channel(1);
    let reading = tokio::spawn(read_input(input, shared.clone(), lines, jobs));
    // Our messages, each a line, to the agent's stdin.
    let stdin = futures::sink::unfold(shared.out.clone(), async |out: Sender, line: String| {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        for piece in bytes.chunks(STDIN_CHUNK) {
            let output = Some(Output::Stdin(piece.to_vec()));
            out.send(Ok(rn::DriveAcpAgentResponse { output }))
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the agent's input is closed"))?;
        }
        Ok::<_, std::io::Error>(out)
    });
    let transport = Lines::new(Box::pin(stdin), ReceiverStream::new(lines_rx));
    tokio::spawn(async move {
        let _ = serve_agent(shared.clone(), transport, jobs_rx, mcp).await;
        // A connection that broke under a prompt (the agent's output over its bound,
        // its end) drops the prompt's loop: the prompt still hears why.
        let unanswered = shared.prompt.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(id) = unanswered {
            end_prompt(&shared, id, failed(FailureKind::AgentFailed, shared.agent_gone())).await;
        }
        // The connection is over: the stream ends, and the supervisor lets the agent go.
        reading.abort();
        shared.pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
    });
    Ok(ReceiverStream::new(outputs))
}

type Sender = mpsc::Sender<Result<rn::DriveAcpAgentResponse, Status>>;

/// The supervisor's side of the stream: the agent's output into lines, prompts into
/// jobs, answers to their askers. Its end, or the agent's, ends the connection.
async fn read_input(
    mut input: Streaming<rn::DriveAcpAgentRequest>,
    shared: Arc<Shared>,
    lines: mpsc::Sender<std::io::Result<String>>,
    jobs: mpsc::Sender<PromptJob>,
) {
    let mut split = LineSplitter::new(MAX_LINE_BYTES);
    let mut callers: HashMap<u64, watch::Sender<bool>> = HashMap::new();
    loop {
        let message = match input.message().await {
            Ok(Some(message)) => message,
            Ok(None) | Err(_) => {
                shared.set_ended("was lost with the supervisor's stream".into());
                break;
            }
        };
        match message.input {
            Some(Input::Stdout(chunk)) => match split.push(&chunk) {
                Ok(complete) => {
                    for line in complete {
                        if lines.send(Ok(line)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(_) => {
                    shared.set_ended(format!("wrote a line over {MAX_LINE_BYTES} bytes and was stopped"));
                    let _ = lines.send(Err(std::io::Error::other("a line over the limit"))).await;
                    return;
                }
            },
            Some(Input::AgentEnded(how)) => {
                shared.set_ended(how);
                break;
            }
            Some(Input::Prompt(prompt)) => {
                let (gone, caller_gone) = watch::channel(false);
                callers.retain(|_, caller| !caller.is_closed());
                callers.insert(prompt.id, gone);
                let timeout = Duration::from_millis(prompt.timeout_ms);
                let job = PromptJob { id: prompt.id, text: prompt.text, timeout, caller_gone };
                if jobs.send(job).await.is_err() {
                    break;
                }
            }
            Some(Input::CallerGone(id)) => {
                if let Some(caller) = callers.remove(&id) {
                    caller.send_replace(true);
                }
            }
            Some(Input::Answer(answer)) => {
                let asker = shared.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&answer.request);
                if let (Some(asker), Some(answer)) = (asker, answer.answer) {
                    let _ = asker.send(answer);
                }
            }
            Some(Input::Start(_)) | None => {}
        }
    }
    // A last message the agent wrote without its newline before it ended.
    if let Some(last) = split.finish() {
        let _ = lines.send(Ok(last)).await;
    }
}

/// One prompt, from the supervisor.
struct PromptJob {
    id: u64,
    text: String,
    timeout: Duration,
    caller_gone: watch::Receiver<bool>,
}

/// What the handlers and the prompt loop share.
struct Shared {
    out: Sender,
    cwd: PathBuf,
    next_request: AtomicU64,
    /// Requests asked of the supervisor, waiting for its answer.
    pending: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The agent's message chunks of the prompt in flight, gathered.
    current: Mutex<String>,
    /// The prompt in flight, until its end is sent.
    prompt: Mutex<Option<u64>>,
    in_flight: Arc<Semaphore>,
    /// How the agent ended, once it has.
    ended: Mutex<Option<String>>,
    /// Set from the `session/cancel` we send until the cancelled prompt is over:
    /// permission requests waiting on the gate then, or arriving meanwhile, are
    /// answered "cancelled" and their asks withdrawn.
    cancelling: watch::Sender<bool>,
}

impl Shared {
    fn set_ended(&self, how: String) {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(how);
    }

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

    async fn send(&self, output: Output) {
        let _ = self.out.send(Ok(rn::DriveAcpAgentResponse { output: Some(output) })).await;
    }

    async fn emit(&self, step: Step) {
        self.send(Output::Event(rn::AgentEvent { step: Some(step) })).await;
    }

    async fn update(&self, notification: SessionNotification) {
        let events =
            super::update_events(&notification.update, &mut self.current.lock().unwrap_or_else(|p| p.into_inner()));
        for event in events {
            self.send(Output::Event(event)).await;
        }
    }

    async fn flush_text(&self) {
        let text = super::flush_text(&mut self.current.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(event) = text {
            self.send(Output::Event(event)).await;
        }
    }

    /// Asks the supervisor and waits for its answer, which the supervisor bounds (the
    /// gate's approval timeout, a tool's deadline); the stream's end ends the wait.
    async fn ask(&self, ask: Ask) -> Result<Answer, Error> {
        let (id, answered) = self.register();
        self.send(Output::Request(rn::AcpRequest { id, ask: Some(ask) })).await;
        answered.await.map_err(|_| refused("Control Center: the supervisor went away before it answered"))
    }

    fn register(&self) -> (u64, oneshot::Receiver<Answer>) {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, answer);
        (id, answered)
    }

    /// Runs `work` off the dispatch loop and answers with what it returns; past
    /// [`MAX_IN_FLIGHT`] the request is refused at once.
    fn serve<T, F>(self: &Arc<Self>, cx: &ConnectionTo<Agent>, responder: Responder<T>, work: F) -> Result<(), Error>
    where
        T: agent_client_protocol::JsonRpcResponse + Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
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

    async fn read(self: Arc<Self>, request: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        let path = request.path.as_os_str().as_encoded_bytes().to_vec();
        let read = rn::ReadTextFile { path, line: request.line, limit: request.limit };
        match self.ask(Ask::Read(read)).await? {
            Answer::Text(text) => Ok(ReadTextFileResponse::new(text)),
            other => Err(unexpected(other)),
        }
    }

    async fn write(self: Arc<Self>, request: WriteTextFileRequest) -> Result<WriteTextFileResponse, Error> {
        let path = request.path.as_os_str().as_encoded_bytes().to_vec();
        match self.ask(Ask::Write(rn::WriteTextFile { path, content: request.content })).await? {
            Answer::Done(_) => Ok(WriteTextFileResponse::new()),
            other => Err(unexpected(other)),
        }
    }

    /// The gate's answer, through its approvers when a rule asks (see
    /// [`super::permission_outcome`]). A prompt cancelled meanwhile has its pending
    /// requests answered "cancelled", as ACP asks of a client, and their asks withdrawn.
    async fn permission(
        self: Arc<Self>,
        request: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        let mut cancelling = self.cancelling.subscribe();
        let mut cancelled_first = false;
        let (allowed, reason) = match super::describe_permission(&request.tool_call.fields, &self.cwd) {
            Permission::Gate(asked) => {
                let (id, answered) = self.register();
                self.send(Output::Request(rn::AcpRequest { id, ask: Some(Ask::Gate(asked)) })).await;
                tokio::select! {
                    answer = answered => match answer {
                        Ok(Answer::Gate(gate)) => (gate.allowed, gate.reason),
                        Ok(Answer::Refused(why)) => (false, why),
                        Ok(other) => (false, unexpected(other).message),
                        Err(_) => (false, "Control Center: the supervisor went away before it answered".into()),
                    },
                    () = async { drop(cancelling.wait_for(|c| *c).await) } => {
                        cancelled_first = true;
                        self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                        self.send(Output::Withdraw(id)).await;
                        (false, "the prompt was cancelled before the gate answered".to_owned())
                    }
                }
            }
            Permission::Refused(why) => (false, format!("Control Center: {why}")),
        };
        // Cancelled before the gate answered, or as it answered.
        let cancelled = cancelled_first || { *self.cancelling.borrow() };
        let outcome = if cancelled {
            RequestPermissionOutcome::Cancelled
        } else {
            super::permission_outcome(&request.options, allowed)
        };
        let title = request.tool_call.fields.title.as_deref().map(|t| clipped(t, MAX_EVENT_TEXT));
        self.emit(Step::Permission(rn::AgentPermission {
            tool_call: clipped_id(&request.tool_call.tool_call_id.to_string()),
            title,
            allowed: allowed && !cancelled,
            reason: clipped(&reason, MAX_EVENT_TEXT),
        }))
        .await;
        Ok(RequestPermissionResponse::new(outcome))
    }

    async fn create_terminal(self: Arc<Self>, request: CreateTerminalRequest) -> Result<CreateTerminalResponse, Error> {
        let env: Vec<(String, String)> = request.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
        let command_line = super::terminal_command_line(&request.command, &request.args, &env, request.cwd.as_deref())
            .map_err(|e| refused(format!("Control Center: {e}")))?;
        let create = rn::TerminalCreate { command_line, output_byte_limit: request.output_byte_limit };
        match self.ask(Ask::TerminalCreate(create)).await? {
            Answer::TerminalId(id) => Ok(CreateTerminalResponse::new(id)),
            other => Err(unexpected(other)),
        }
    }

    async fn terminal_output(self: Arc<Self>, id: String) -> Result<TerminalOutputResponse, Error> {
        match self.ask(Ask::TerminalOutput(id)).await? {
            Answer::TerminalOutput(output) => {
                Ok(TerminalOutputResponse::new(output.text, output.truncated).exit_status(output.exit.map(exit_status)))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn wait_for_terminal(self: Arc<Self>, id: String) -> Result<WaitForTerminalExitResponse, Error> {
        match self.ask(Ask::TerminalWait(id)).await? {
            Answer::TerminalExit(exit) => Ok(WaitForTerminalExitResponse::new(exit_status(exit))),
            other => Err(unexpected(other)),
        }
    }

    async fn done(self: Arc<Self>, ask: Ask) -> Result<(), Error> {
        match self.ask(ask).await? {
            Answer::Done(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn exit_status(exit: rn::TerminalExit) -> TerminalExitStatus {
    TerminalExitStatus::new().exit_code(exit.exit_code).signal(exit.signal)
}

/// An answer of the wrong kind, or a refusal: what the agent hears.
fn unexpected(answer: Answer) -> Error {
    match answer {
        Answer::Refused(why) => refused(why),
        _ => refused("Control Center: the supervisor's answer was not for this request"),
    }
}

/// The client side of the connection, every request of the agent's served by `shared`.
async fn serve_agent(
    shared: Arc<Shared>,
    transport: impl agent_client_protocol::ConnectTo<Client> + 'static,
    jobs: mpsc::Receiver<PromptJob>,
    mcp: McpServerStdio,
) -> Result<(), Error> {
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
                s1.update(n).await;
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
            async move |r: TerminalOutputRequest,
                        responder: Responder<TerminalOutputResponse>,
                        cx: ConnectionTo<Agent>| {
                s6.serve(&cx, responder, s6.clone().terminal_output(r.terminal_id.to_string()))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: WaitForTerminalExitRequest,
                        responder: Responder<WaitForTerminalExitResponse>,
                        cx: ConnectionTo<Agent>| {
                s7.serve(&cx, responder, s7.clone().wait_for_terminal(r.terminal_id.to_string()))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: KillTerminalRequest, responder: Responder<KillTerminalResponse>, cx: ConnectionTo<Agent>| {
                let killed = s8.clone().done(Ask::TerminalKill(r.terminal_id.to_string()));
                s8.serve(&cx, responder, async move { killed.await.map(|()| KillTerminalResponse::new()) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: ReleaseTerminalRequest,
                        responder: Responder<ReleaseTerminalResponse>,
                        cx: ConnectionTo<Agent>| {
                let released = s9.clone().done(Ask::TerminalRelease(r.terminal_id.to_string()));
                s9.serve(&cx, responder, async move { released.await.map(|()| ReleaseTerminalResponse::new()) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| prompts(cx, shared, jobs, mcp).await)
        .await
}

/// The prompts, one at a time, each answered with its end. An error returned ends
/// the connection, and the agent with it.
async fn prompts(
    cx: ConnectionTo<Agent>,
    shared: Arc<Shared>,
    mut jobs: mpsc::Receiver<PromptJob>,
    mcp: McpServerStdio,
) -> Result<(), Error> {
    let mut session: Option<SessionId> = None;
    while let Some(mut job) = jobs.recv().await {
        // What an idle agent said before is not this prompt's.
        shared.current.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *shared.prompt.lock().unwrap_or_else(|p| p.into_inner()) = Some(job.id);
        let deadline = tokio::time::Instant::now() + job.timeout;
        let late = format!("the ACP agent did not answer the prompt within {} s", job.timeout.as_secs());
        let started = tokio::time::timeout_at(deadline, async {
            if session.is_none() {
                session = Some(start_session(&cx, &shared, &mcp).await?);
            }
            Ok::<_, Error>(session.clone().unwrap_or_else(|| SessionId::new("")))
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
                end_prompt(&shared, job.id, failed(FailureKind::AgentFailed, why)).await;
                return Err(e);
            }
            Err(_) => {
                end_prompt(&shared, job.id, failed(FailureKind::TimedOut, late)).await;
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
            // Its caller went away (ccctl was interrupted): no one wants the answer. (The
            // supervisor's stream ending is not that: the agent's end answers then.)
            () = async {
                if job.caller_gone.wait_for(|gone| *gone).await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => None,
        };
        let Some(answer) = answered else {
            // The prompt is cancelled, as ACP has a client do, and its permission
            // requests still waiting on the gate are answered "cancelled". What the
            // agent says until it answers still reaches the caller, who then hears of
            // the timeout; an agent that does not answer soon is let go (the
            // connection ends with this loop). The run's next prompt waits for this.
            let _ = cx.send_notification(CancelNotification::new(sid));
            shared.cancelling.send_replace(true);
            let stopped = tokio::time::timeout(CANCEL_GRACE, &mut asked).await.is_ok();
            shared.cancelling.send_replace(false);
            end_prompt(&shared, job.id, failed(FailureKind::TimedOut, late)).await;
            if !stopped {
                return Err(refused("the agent did not answer its cancelled prompt"));
            }
            continue;
        };
        match answer {
            Ok(response) => {
                let stop = response.stop_reason;
                let reason = serde_json::to_value(stop).ok().and_then(|v| v.as_str().map(str::to_owned));
                let reason = reason.unwrap_or_else(|| "unknown".into());
                shared.flush_text().await;
                shared.emit(Step::Stop(rn::AgentStop { stop_reason: reason.clone() })).await;
                let end = rn::acp_prompt_end::End::StopReason(if stop == StopReason::EndTurn {
                    "end_turn".to_owned()
                } else {
                    reason
                });
                end_prompt(&shared, job.id, end).await;
            }
            // The agent answered the prompt with an error and lives on: the prompt
            // failed, the agent and its session did not. The connection's own end is
            // told apart by a marker the library sets and a peer cannot send, and the
            // agent's by the end of its output, noted before the connection sees it.
            Err(e) if !connection_lost(&e) && !shared.agent_ended() => {
                let why = format!("the ACP agent answered the prompt with an error: {} ({})", e.message, e.code);
                end_prompt(&shared, job.id, failed(FailureKind::AgentFailed, why)).await;
            }
            Err(e) => {
                let why = if shared.agent_ended() {
                    shared.agent_gone()
                } else {
                    format!("{} ({})", shared.agent_gone(), e.message)
                };
                end_prompt(&shared, job.id, failed(FailureKind::AgentFailed, why)).await;
                return Err(e);
            }
        }
    }
    Ok(())
}

fn failed(kind: FailureKind, message: String) -> rn::acp_prompt_end::End {
    rn::acp_prompt_end::End::Failed(rn::AcpPromptFailure { kind: kind as i32, message })
}

fn connection_lost(e: &Error) -> bool {
    agent_client_protocol::is_incoming_transport_closed(e) || agent_client_protocol::is_connection_terminated(e)
}

/// Ends the prompt in flight with `end`, its gathered text first; nothing of the
/// agent's belongs to it after this.
async fn end_prompt(shared: &Shared, id: u64, end: rn::acp_prompt_end::End) {
    shared.prompt.lock().unwrap_or_else(|p| p.into_inner()).take();
    shared.flush_text().await;
    shared.send(Output::PromptEnd(rn::AcpPromptEnd { id, end: Some(end) })).await;
}

async fn start_session(cx: &ConnectionTo<Agent>, shared: &Shared, mcp: &McpServerStdio) -> Result<SessionId, Error> {
    let capabilities = ClientCapabilities::new()
        .fs(FileSystemCapabilities::new().read_text_file(true).write_text_file(true))
        .terminal(true);
    let init = InitializeRequest::new(ProtocolVersion::V1).client_capabilities(capabilities);
    let agent = cx.send_request(init).block_task().await?;
    let new = NewSessionRequest::new(shared.cwd.clone()).mcp_servers(vec![McpServer::Stdio(mcp.clone())]);
    let session = cx.send_request(new).block_task().await?;
    let info = agent.agent_info.map(|i| i.name).unwrap_or_default();
    shared
        .emit(Step::Init(rn::AgentInit {
            session_id: clipped_id(&session.session_id.to_string()),
            model: clipped_id(&info),
            cwd: clipped_id(&shared.cwd.to_string_lossy()),
            permission_mode: "asked through session/request_permission".into(),
            tools: vec![],
            mcp_servers: vec![],
        }))
        .await;
    Ok(session.session_id)
}
