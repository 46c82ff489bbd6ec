//! The acp adapter's link: the run's agent, launched through sandboxd, and its ACP
//! client, which is the run's runner (`cc.runner.v1.DriveAcpAgent`): the agent's
//! JSON-RPC is hostile input, read only in the run's own envelope (DESIGN.md §2,
//! trust rule 8). The supervisor relays the agent's stdio between the two unread,
//! sends the runner the prompts, records the typed steps it reads, and answers what
//! the client asks in typed requests: the gate and its approvers, the file tools, and
//! terminals in the harness_bash envelope.
//!
//! The agent is started at the run's first prompt, in the run's overlay envelope with
//! the sanitized environment, through sandboxd's LaunchInteractive. It lives for the
//! run; a later prompt finds it, and one that finds it dead (or its runner dead)
//! starts a new one, with a new session: an agent keeps its conversation in its own
//! memory. The link ending, for whatever reason, drops the launch: sandboxd kills the
//! agent, and its terminals go with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_proto::common::v1::EnvelopeKind;
use cc_proto::runner::v1 as rn;
use cc_proto::runner::v1::acp_answer::Answer;
use cc_proto::runner::v1::acp_prompt_failure::Kind as FailureKind;
use cc_proto::runner::v1::acp_request::Ask;
use cc_proto::runner::v1::drive_acp_agent_request::Input as ToRunner;
use cc_proto::runner::v1::drive_acp_agent_response::Output as FromRunner;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_interactive_request::Input;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_response::Event as ToolEvent;
use cc_proto::supervisor::v1::prompt_run_response::Event;
use cc_proto::tools::v1 as tools;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::acp;
use super::acp_terminal::Terminals;
use super::agent_events::{AgentEvent, PromptBudget};
use super::prompt::Prompts;
use super::tools::{Described, ToolCalls, gate_path};
use super::{LiveRun, RunError};
use crate::events::PromptScope;
use crate::ids::RunId;

/// The runner's requests answered at once; past it, one is refused at once (the
/// runner bounds its agent's to 32).
const MAX_REQUESTS: usize = 64;
/// The most paths one permission may name (as the runner bounds them).
const MAX_PERMISSION_PATHS: usize = 64;
/// The longest terminal command line the gate is asked to judge.
const MAX_TERMINAL_LINE: usize = 64 * 1024;
/// The agent's error output passed on per prompt, at most.
const MAX_STDERR_BYTES: u64 = 1 << 20;
/// The most a `fs/read_text_file` returns.
const MAX_READ_BYTES: usize = 8 << 20;
/// How long past a prompt's timeout the runner may take to end it (it cancels, waits
/// 10 s for the agent, then lets it go) before the link gives up on both.
const END_GRACE: Duration = Duration::from_secs(20);

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
    /// How the agent ended, once the link took the prompt: what a prompt the link
    /// dropped tells its caller.
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
    /// A prompt the link dropped, queued or in flight, as it ended: its caller hears
    /// so rather than seeing its stream end without a word.
    fn drop(&mut self) {
        let ended = self.agent_end.as_ref().and_then(|e| e.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let why = match ended {
            Some(how) => format!("the ACP agent {how} before it answered; send the prompt again, to a new agent"),
            None => "the ACP agent's connection ended before it answered; send it again".to_owned(),
        };
        self.answer(Err(Status::from(RunError::AgentFailed(why))));
    }
}

/// Why a link ends when its run does: nothing to record then.
const RUN_ENDED: &str = "the run ended";

/// The prompt in flight, as the link holds it.
struct Current {
    id: u64,
    job: PromptJob,
    budget: PromptBudget,
    stderr_sent: u64,
    caller_gone_told: bool,
    deadline: tokio::time::Instant,
    _records: PromptScope,
}

/// What the link's tasks share.
struct Shared {
    tools: ToolCalls,
    run_id: RunId,
    subject: String,
    current: Mutex<Option<Current>>,
    terminals: Terminals,
    /// How the agent's process ended, once it has.
    ended: Arc<Mutex<Option<String>>>,
    /// Set once the link is over or its agent has ended: the next prompt starts anew.
    gone: watch::Sender<bool>,
}

/// A refusal of the gate's or the supervisor's, as the agent hears it.
pub(super) fn run_error(e: RunError) -> String {
    match e {
        RunError::GateDenied { for_agent, .. } | RunError::NoApprover { for_agent, .. } => for_agent,
        other => format!("Control Center: {}", Status::from(other).message()),
    }
}

impl Shared {
    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_ended(&self, how: String) {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(how);
    }

    /// Records one of the agent's steps (up to the prompt's cap) and streams it to the
    /// prompt's caller, who may have stopped reading: then it is dropped for them.
    fn emit(&self, event: AgentEvent) {
        let mut current = self.lock_current();
        match current.as_mut() {
            Some(current) => {
                current.budget.record(self.tools.runs.events(), &self.subject, &event);
                let step = Some(Event::AgentEvent(event.to_wire()));
                let _ = current.job.out.try_send(Ok(pb::PromptRunResponse { event: step }));
            }
            // Between prompts (an idle agent's words): the run's budget still counts.
            None => self.tools.runs.events().record(event.kind.name(), &self.subject, event.payload),
        }
    }

    fn stderr(&self, chunk: &[u8]) {
        let mut current = self.lock_current();
        let Some(current) = current.as_mut() else { return };
        if current.stderr_sent >= MAX_STDERR_BYTES {
            return;
        }
        let keep = chunk.len().min((MAX_STDERR_BYTES - current.stderr_sent) as usize);
        current.stderr_sent += keep as u64;
        let _ =
            current.job.out.try_send(Ok(pb::PromptRunResponse { event: Some(Event::Stderr(chunk[..keep].to_vec())) }));
    }

    /// Ends the prompt in flight with `last`.
    fn end_prompt(&self, id: u64, last: Result<pb::PromptRunResponse, Status>) {
        let ended = {
            let mut current = self.lock_current();
            if current.as_ref().is_some_and(|c| c.id == id) { current.take() } else { None }
        };
        if let Some(mut ended) = ended {
            ended.job.answer(last);
        }
    }

    fn live(&self) -> Result<Arc<LiveRun>, String> {
        self.tools.runs.require_live(&self.run_id).map_err(run_error)
    }

    async fn call(&self, tool: pb::call_tool_request::Tool) -> Result<tools::ToolResult, String> {
        let mut events = self.tools.call_tool(&self.run_id, Some(tool)).await.map_err(run_error)?;
        match events.next().await {
            Some(Ok(pb::CallToolResponse { event: Some(ToolEvent::Result(result)) })) => Ok(result),
            Some(Err(status)) => Err(format!("Control Center: {}", status.message())),
            _ => Err("Control Center: the runner gave no result".into()),
        }
    }

    /// One request of the runner's, answered.
    async fn answer(self: Arc<Self>, ask: Ask) -> Answer {
        let answered = match ask {
            Ask::Read(read) => self.read(read).await.map(Answer::Text),
            Ask::Write(write) => {
                let write = tools::WriteArgs { path: write.path, content: write.content.into_bytes() };
                self.call(pb::call_tool_request::Tool::Write(write)).await.map(|_| Answer::Done(true))
            }
            Ask::Gate(asked) => self.permission(asked).await.map(Answer::Gate),
            Ask::TerminalCreate(create) if create.command_line.len() > MAX_TERMINAL_LINE => {
                Err(format!("Control Center: a terminal's command line is over {MAX_TERMINAL_LINE} bytes"))
            }
            Ask::TerminalCreate(create) => self
                .terminals
                .create(&self.tools, &self.run_id, create.command_line, create.output_byte_limit)
                .await
                .map(Answer::TerminalId),
            Ask::TerminalOutput(id) => self.terminals.output(&id).map(Answer::TerminalOutput),
            Ask::TerminalWait(id) => self.terminals.wait_for_exit(&id).await.map(Answer::TerminalExit),
            Ask::TerminalKill(id) => self.terminals.kill(&id).map(|()| Answer::Done(true)),
            Ask::TerminalRelease(id) => self.terminals.release(&id).map(|()| Answer::Done(true)),
        };
        answered.unwrap_or_else(Answer::Refused)
    }

    /// A file read whole, window by window, or from `line` for `limit` lines.
    async fn read(&self, request: rn::ReadTextFile) -> Result<String, String> {
        let shown = String::from_utf8_lossy(&request.path).into_owned();
        // ACP counts lines from 1; the runner from 0.
        let mut offset = u64::from(request.line.unwrap_or(1).max(1) - 1);
        let mut left = request.limit.map(u64::from);
        let mut text = String::new();
        loop {
            let read = tools::ReadArgs { path: request.path.clone(), offset, limit: left.unwrap_or(0) };
            let result = self.call(pb::call_tool_request::Tool::Read(read)).await?;
            let Some(tools::tool_result::Result::Read(window)) = result.result else {
                return Err("Control Center: the runner's answer was not a read".into());
            };
            if window.binary {
                return Err(format!("{shown} is a binary file"));
            }
            text.push_str(&window.text);
            offset += window.lines;
            if let Some(l) = &mut left {
                *l = l.saturating_sub(window.lines);
            }
            if !window.more || window.lines == 0 || left == Some(0) {
                return Ok(text);
            }
            if text.len() > MAX_READ_BYTES {
                return Err(format!("{shown} is over {MAX_READ_BYTES} bytes: read it with line and limit"));
            }
        }
    }

    /// The gate's answer to a permission the runner described, through its approvers
    /// when a rule asks. The description is the runner's: its tool must be one of the
    /// harness's, and its paths are spelled again as the rules see them.
    async fn permission(&self, asked: rn::GateAsk) -> Result<rn::GateAnswer, String> {
        let run = self.live()?;
        let Some(tool) = cc_policy::tools::TOOLS.iter().find(|t| t.name == asked.tool).map(|t| t.name) else {
            return Err(format!(
                "Control Center: {:?} is not a tool the gate judges",
                asked.tool.chars().take(40).collect::<String>()
            ));
        };
        let mut paths: Vec<String> = asked.paths.iter().map(|p| gate_path(p, &run.record.work_dir)).collect();
        paths.sort();
        paths.dedup();
        if paths.len() > MAX_PERMISSION_PATHS || asked.domains.len() > MAX_PERMISSION_PATHS {
            return Err(format!("Control Center: the {tool} request names over {MAX_PERMISSION_PATHS} paths"));
        }
        let described = Described { tool, paths, command_line: asked.command_line, domains: asked.domains };
        Ok(match self.tools.ask_gate(&run, &described, true).await {
            Ok(()) => rn::GateAnswer { allowed: true, reason: "allowed by Control Center".into() },
            Err(e) => rn::GateAnswer { allowed: false, reason: run_error(e) },
        })
    }
}

/// The agent's launch: its stdout to the runner, unread; its stderr to the prompt's
/// caller; its violations recorded; its end told to the runner.
async fn pump(
    mut launched: tonic::Streaming<sb::LaunchInteractiveResponse>,
    to_runner: mpsc::Sender<rn::DriveAcpAgentRequest>,
    shared: Arc<Shared>,
    enveloped: bool,
) {
    let ended = loop {
        let event = match launched.next().await {
            Some(Ok(sb::LaunchInteractiveResponse { event: Some(sb::LaunchResponse { event }) })) => event,
            Some(Ok(_)) => continue,
            Some(Err(status)) => break format!("was lost with sandboxd ({})", status.message()),
            None => break "was lost: sandboxd's stream ended".to_owned(),
        };
        match event {
            Some(LaunchEvent::Stdout(chunk)) => {
                if to_runner.send(rn::DriveAcpAgentRequest { input: Some(ToRunner::Stdout(chunk)) }).await.is_err() {
                    return;
                }
            }
            Some(LaunchEvent::Stderr(chunk)) => shared.stderr(&chunk),
            Some(LaunchEvent::Violation(v)) => {
                let payload =
                    json!({ "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "acp" });
                shared.tools.runs.events().record("sandbox_violation", &shared.subject, payload);
            }
            Some(LaunchEvent::Exit(e)) => {
                let how = match acp::exit_of(e.code, e.signal, enveloped) {
                    (_, Some(signal)) => format!("signal {signal}"),
                    (Some(code), None) => format!("code {code}"),
                    (None, None) => "status unknown".into(),
                };
                let payload = json!({ "code": e.code, "signal": e.signal });
                shared.tools.runs.events().record("agent_exited", &shared.subject, payload);
                break format!("exited ({how})");
            }
            Some(LaunchEvent::Envelope(_) | LaunchEvent::ProcessId(_)) | None => {}
        }
    };
    shared.set_ended(ended.clone());
    shared.gone.send_replace(true);
    let _ = to_runner.send(rn::DriveAcpAgentRequest { input: Some(ToRunner::AgentEnded(ended)) }).await;
}

/// The link: the runner's messages acted on, prompts sent one at a time. Returns why
/// it ended, as what the agent did ("lost its client: …").
async fn link(
    shared: Arc<Shared>,
    mut from_runner: tonic::Streaming<rn::DriveAcpAgentResponse>,
    to_runner: mpsc::Sender<rn::DriveAcpAgentRequest>,
    agent_stdin: mpsc::Sender<sb::LaunchInteractiveRequest>,
    mut jobs: mpsc::Receiver<PromptJob>,
) -> String {
    let requests: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>> = Arc::default();
    let mut next_prompt = 0u64;
    let far = || tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
    loop {
        let (busy, deadline, caller_gone) = match shared.lock_current().as_ref() {
            Some(c) => (true, c.deadline, (!c.caller_gone_told).then(|| c.job.out.clone())),
            None => (false, far(), None),
        };
        let caller_left = async {
            match caller_gone {
                Some(out) => out.closed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = from_runner.message() => match message {
                Ok(Some(message)) => {
                    if let Some(why) = on_runner(&shared, &requests, &to_runner, &agent_stdin, message.output).await {
                        return why;
                    }
                }
                Ok(None) => return "lost its client: the run's runner ended the connection".into(),
                Err(status) => return format!("lost its client: the run's runner ended ({})", status.message()),
            },
            job = jobs.recv(), if !busy => {
                let Some(mut job) = job else { return RUN_ENDED.into() };
                next_prompt += 1;
                job.agent_end = Some(shared.ended.clone());
                let prompt = rn::AcpPrompt {
                    id: next_prompt,
                    text: std::mem::take(&mut job.text),
                    timeout_ms: u64::try_from(job.timeout.as_millis()).unwrap_or(u64::MAX),
                };
                let deadline = tokio::time::Instant::now() + job.timeout + END_GRACE;
                let records = shared.tools.runs.events().prompt_scope(shared.run_id.as_str());
                *shared.lock_current() = Some(Current {
                    id: next_prompt, job, budget: PromptBudget::default(), stderr_sent: 0,
                    caller_gone_told: false, deadline, _records: records,
                });
                if to_runner.send(rn::DriveAcpAgentRequest { input: Some(ToRunner::Prompt(prompt)) }).await.is_err() {
                    return "lost its client: the run's runner is gone".into();
                }
            }
            () = caller_left => {
                let id = {
                    let mut current = shared.lock_current();
                    current.as_mut().map(|c| { c.caller_gone_told = true; c.id })
                };
                if let Some(id) = id {
                    let _ = to_runner.send(rn::DriveAcpAgentRequest { input: Some(ToRunner::CallerGone(id)) }).await;
                }
            }
            _ = tokio::time::sleep_until(deadline), if busy => {
                return "was not stopped by its client in time after the prompt's timeout".into();
            }
        }
    }
}

/// One message of the runner's, acted on; `Some(why)` ends the link.
async fn on_runner(
    shared: &Arc<Shared>,
    requests: &Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
    to_runner: &mpsc::Sender<rn::DriveAcpAgentRequest>,
    agent_stdin: &mpsc::Sender<sb::LaunchInteractiveRequest>,
    output: Option<FromRunner>,
) -> Option<String> {
    match output? {
        FromRunner::Stdin(bytes) => {
            let input = sb::LaunchInteractiveRequest { input: Some(Input::Stdin(bytes)) };
            if agent_stdin.send(input).await.is_err() {
                return Some("had its input closed".into());
            }
        }
        FromRunner::Event(event) => {
            if let Some(event) = AgentEvent::from_step(event) {
                shared.emit(event);
            }
        }
        FromRunner::Request(request) => serve(shared, requests, to_runner, request),
        FromRunner::Withdraw(id) => {
            if let Some(request) = requests.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
                request.abort();
            }
        }
        FromRunner::PromptEnd(end) => prompt_ended(shared, end),
    }
    None
}

/// Starts answering one request of the runner's; past [`MAX_REQUESTS`] in flight it
/// is refused at once.
fn serve(
    shared: &Arc<Shared>,
    requests: &Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
    to_runner: &mpsc::Sender<rn::DriveAcpAgentRequest>,
    request: rn::AcpRequest,
) {
    let id = request.id;
    let reply = move |answer: Answer| rn::DriveAcpAgentRequest {
        input: Some(ToRunner::Answer(rn::AcpAnswer { request: id, answer: Some(answer) })),
    };
    let Some(ask) = request.ask else { return };
    let mut in_flight = requests.lock().unwrap_or_else(|p| p.into_inner());
    in_flight.retain(|_, task| !task.is_finished());
    if in_flight.len() >= MAX_REQUESTS {
        let refusal = reply(Answer::Refused(format!("Control Center: at most {MAX_REQUESTS} requests at once")));
        let to_runner = to_runner.clone();
        tokio::spawn(async move { to_runner.send(refusal).await });
        return;
    }
    let (shared, to_runner) = (shared.clone(), to_runner.clone());
    let task = tokio::spawn(async move {
        let answer = shared.answer(ask).await;
        let _ = to_runner.send(reply(answer)).await;
    });
    in_flight.insert(id, task.abort_handle());
}

/// The runner's end of a prompt, as its caller hears it.
fn prompt_ended(shared: &Shared, end: rn::AcpPromptEnd) {
    use rn::acp_prompt_end::End;
    let timeout = shared.lock_current().as_ref().filter(|c| c.id == end.id).map(|c| c.job.timeout);
    let last = match end.end {
        Some(End::StopReason(reason)) => {
            let code = if reason == "end_turn" { 0 } else { 1 };
            let exit =
                pb::BashExit { code: Some(code), signal: None, timed_out: false, truncated: false, timings: None };
            Ok(pb::PromptRunResponse { event: Some(Event::Exit(exit)) })
        }
        Some(End::Failed(failed)) if failed.kind == FailureKind::TimedOut as i32 => {
            Err(cc_proto::reasons::helper_timeout("the ACP agent", "the prompt's answer", timeout.unwrap_or_default()))
        }
        Some(End::Failed(failed)) => Err(Status::from(RunError::AgentFailed(failed.message))),
        None => Err(Status::from(RunError::AgentFailed("the run's runner ended the prompt without a word".into()))),
    };
    shared.end_prompt(end.id, last);
}

type Events = ReceiverStream<Result<pb::PromptRunResponse, Status>>;

impl Prompts {
    /// A prompt to the run's ACP agent, started first if it is not running.
    pub(super) async fn prompt_acp(&self, run: &Arc<LiveRun>, text: String, timeout: u32) -> Result<Events, RunError> {
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

    /// Opens the runner's client first (a runner that cannot serve fails the prompt
    /// with no agent started), then launches the agent.
    async fn start_acp(&self, run: &LiveRun) -> Result<AcpLink, RunError> {
        let argv = acp::agent_argv(&run.agent_command).map_err(RunError::Precondition)?;
        let mut runner = run.ready_runner(self.runs.deadlines().runner_call()).await?;
        let helpers = self.runs.agent_helpers(&run.record.id, false);
        let start = rn::AcpStart {
            cwd: run.record.work_dir.to_string_lossy().into_owned(),
            mcp_name: super::hook::MCP_SERVER_NAME.into(),
            mcp_command: helpers.mcp,
            mcp_args: helpers.agent.map(|a| vec!["--agent".to_owned(), a]).unwrap_or_default(),
        };
        let (to_runner, to_runner_rx) = mpsc::channel(16);
        let _ = to_runner.send(rn::DriveAcpAgentRequest { input: Some(ToRunner::Start(start)) }).await;
        let opened = runner.drive_acp_agent(ReceiverStream::new(to_runner_rx));
        let from_runner =
            crate::channels::within("runner", "DriveAcpAgent", self.runs.deadlines().runner_call(), opened)
                .await
                .map_err(RunError::Helper)?
                .into_inner();
        // Pointed at the run's model door, with the run's placeholder as its key.
        let env = if run.models.is_empty() {
            Default::default()
        } else {
            let placeholder = self.runs.model_placeholder(&run.record.id).await?;
            super::models::agent_env(&self.runs.env.models, super::models::MODEL_PORT, &placeholder)
                .into_iter()
                .collect()
        };
        let launch = sb::LaunchRequest {
            run_id: run.record.id.clone(),
            kind: EnvelopeKind::Overlay as i32,
            argv: argv.into_iter().map(String::into_bytes).collect(),
            // The agent lives for the run: sandboxd ends it with the run.
            timeout_seconds: 0,
            host: None,
            env,
            ..Default::default()
        };
        let (launched, agent_stdin) = self.runs.launch_interactive(run, launch, "acp").await?;
        let shared = Arc::new(Shared {
            tools: self.runs.tools(),
            run_id: run.run_id.clone(),
            subject: format!("run:{}", run.record.id),
            current: Mutex::default(),
            terminals: Terminals::default(),
            ended: Arc::default(),
            gone: watch::channel(false).0,
        });
        let gone = shared.gone.subscribe();
        let pumped = shared.clone();
        let pump = tokio::spawn(pump(launched, to_runner.clone(), pumped, self.runs.env.enveloped));
        let (jobs, jobs_rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let why = link(shared.clone(), from_runner, to_runner, agent_stdin, jobs_rx).await;
            // Whatever ended the link, the agent goes with it: dropping its launch's
            // stream makes sandboxd kill it; its terminals go with it too.
            pump.abort();
            shared.gone.send_replace(true);
            shared.terminals.release_all();
            let reason = {
                let ended = shared.ended.lock().unwrap_or_else(|p| p.into_inner()).clone();
                ended.map_or_else(|| why.clone(), |how| format!("the ACP agent {how}"))
            };
            shared.set_ended(why.clone());
            // The prompt in flight, if any, hears how: its job's drop says so.
            shared.lock_current().take();
            if why != RUN_ENDED {
                let payload = json!({ "reason": reason, "error": why });
                shared.tools.runs.events().record("agent_disconnected", &shared.subject, payload);
            }
        });
        Ok(AcpLink { jobs, gone })
    }
}
