//! A prompt to a run's agent (adapter claude-code): the `claude` CLI in the run's
//! overlay envelope, its stream-json output relayed unread to the run's own process,
//! which reads it into typed steps (`cc.runner.v1.ParseAgentOutput`); the steps are
//! recorded as the run's events and streamed back. One prompt at a time per run; a
//! later one resumes the session the first began.

use std::io::Write;
use std::path::Path;

use cc_proto::common::v1::EnvelopeKind;
use cc_proto::runner::v1 as rn;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::prompt_run_response::Event;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::agent_events::{AgentEvent, AgentEventKind};
use super::claude_code;
use super::{RunError, RunManager};
use crate::ids::RunId;
use cc_proto::common::v1::Adapter;

/// The most a prompt may hold.
pub const MAX_PROMPT_BYTES: usize = 256 * 1024;
/// The agent's error output passed on, at most; the rest is dropped.
const MAX_STDERR_BYTES: u64 = 1 << 20;

/// The run's agent session: the session id its first prompt began, held locked while
/// a prompt runs.
#[derive(Default)]
pub struct AgentSession(pub(super) std::sync::Arc<tokio::sync::Mutex<Option<String>>>);

/// Writes the agent's settings and MCP config into its config directory, which the
/// overlay envelope shows read-only. The directory is the run user's (as root, the
/// service user's, whom an unconfined agent runs as), so it is reached by handle from
/// `/` with no link on the way, and each file is made anew in it, never through a link.
pub fn write_agent_config(dir: &Path, settings: &serde_json::Value, mcp: &serde_json::Value) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use nix::unistd::{UnlinkatFlags, unlinkat};
    let dir = cc_host::beneath::open_dir_no_links(dir).map_err(std::io::Error::from)?;
    for (name, value) in [(claude_code::SETTINGS_FILE, settings), (claude_code::MCP_CONFIG_FILE, mcp)] {
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Err(nix::errno::Errno::ENOENT) | Ok(()) => {}
            Err(e) => return Err(e.into()),
        }
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&dir, name, flags, Mode::from_bits_truncate(0o644))?;
        // Readable by the agent whatever our umask (077).
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o644))?;
        std::fs::File::from(fd).write_all(value.to_string().as_bytes())?;
    }
    Ok(())
}

/// The environment a claude-code-nosandbox launch inherits: the supervisor's own (the
/// host's). When the run's user is not the supervisor's (a root supervisor runs agents
/// as its service user), HOME is the agent's home, since the CLI must write there.
fn host_environment(run: &super::LiveRun) -> std::collections::HashMap<String, String> {
    let mut env: std::collections::HashMap<String, String> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    if run.uid != nix::unistd::geteuid().as_raw() {
        env.insert("HOME".into(), String::from_utf8_lossy(&run.policy.agent_work).into_owned());
    }
    env
}

type Events = ReceiverStream<Result<pb::PromptRunResponse, Status>>;

/// A run's prompts to its agent: Claude Code's, launched per prompt with its output
/// read by the run's runner, and an ACP agent's, over its link (`acp_link.rs`). The
/// runs themselves are [`RunManager`]'s; a prompt's tool calls are [`ToolCalls`]'.
///
/// [`ToolCalls`]: super::tools::ToolCalls
#[derive(Clone)]
pub struct Prompts {
    pub(super) runs: std::sync::Arc<RunManager>,
}

impl RunManager {
    pub fn prompts(self: &std::sync::Arc<Self>) -> Prompts {
        Prompts { runs: self.clone() }
    }
}

impl Prompts {
    pub async fn prompt(&self, run_id: &RunId, prompt: String, timeout_seconds: u32) -> Result<Events, RunError> {
        let run = self.runs.require_live(run_id)?;
        // The adapters with an agent to prompt: Claude Code in the run's overlay
        // envelope, the same CLI on the host (of our layers only its hook and the
        // product's MCP tools reach it), and an ACP agent.
        let acp = run.record.adapter == Adapter::Acp;
        if !run.record.adapter.has_agent() {
            return Err(RunError::NoAgent(run.record.adapter));
        }
        let on_host = run.record.adapter == Adapter::ClaudeCodeNosandbox;
        if prompt.is_empty() || prompt.len() > MAX_PROMPT_BYTES || prompt.contains('\0') {
            return Err(RunError::BadRequest(format!("a prompt must be 1 to {MAX_PROMPT_BYTES} bytes, with no NUL")));
        }
        let config = self.runs.config();
        let config = &config.claude_code;
        let timeout = match timeout_seconds {
            0 => config.prompt_timeout_seconds,
            t if t > config.prompt_max_timeout_seconds => {
                return Err(RunError::BadRequest(format!(
                    "a timeout of {t} s is over the configured maximum of {} s",
                    config.prompt_max_timeout_seconds
                )));
            }
            t => t,
        };
        if acp {
            return self.prompt_acp(&run, prompt, timeout).await;
        }
        // Without a provider the CLI has no door to reach and would wait out the whole
        // prompt timeout. On the host (nosandbox) it may have a key of its own.
        if !on_host && !self.runs.env.models.contains_key(&config.model) {
            return Err(RunError::Precondition(format!(
                "claude-code has no model API key: add [models.{}] with api, base_url and key_file to config.toml \
                 (docs/guides/agents.md), then restart the supervisor",
                config.model
            )));
        }
        let session = run.agent.0.clone().try_lock_owned().map_err(|_| RunError::AgentBusy(run_id.clone()))?;
        let config_dir = String::from_utf8_lossy(&run.policy.agent_config).into_owned();
        let argv = claude_code::argv(&config.program, &prompt, &config_dir, session.as_deref());
        let request = sb::LaunchRequest {
            run_id: run.record.id.clone(),
            kind: EnvelopeKind::Overlay as i32,
            argv: argv.into_iter().map(String::into_bytes).collect(),
            timeout_seconds: timeout,
            host: on_host.then(|| sb::HostLaunch { env: host_environment(&run) }),
            ..Default::default()
        };
        let deadline_after = std::time::Duration::from_secs(u64::from(timeout)) + self.runs.deadlines().launch_grace();
        let deadline = tokio::time::Instant::now() + deadline_after;
        // The run's process reads the output; its reading opens before the agent
        // starts, so a runner that cannot serve fails the prompt with no agent run.
        let reading = self.read_in_runner(&run).await?;
        let limits = run.watch_limits();
        let launched = self.runs.launch(&run, request, "claude-code").await?;
        // Room for bursts of a reading client; at most 256 events of at most 16 KiB held.
        let (tx, rx) = mpsc::channel(256);
        let relay = Relay {
            events: self.runs.events().clone(),
            subject: format!("run:{}", run.record.id),
            run_id: run.record.id.clone(),
            on_host,
            limits,
            out: tx,
            deadline,
            deadline_after,
        };
        tokio::spawn(relay.run(launched, reading, session));
        Ok(ReceiverStream::new(rx))
    }

    /// Opens the run's process's reading of one prompt's output, for the adapter of
    /// the run.
    async fn read_in_runner(&self, run: &super::LiveRun) -> Result<Reading, RunError> {
        use rn::parse_agent_output_request::Input;
        let mut runner = run.ready_runner(self.runs.deadlines().runner_call()).await?;
        let (input, input_rx) = mpsc::channel(RELAYED_CHUNKS);
        let first = rn::ParseAgentOutputRequest { input: Some(Input::Adapter(run.record.adapter as i32)) };
        let _ = input.send(first).await;
        let opened = runner.parse_agent_output(ReceiverStream::new(input_rx));
        let steps = crate::channels::within("runner", "ParseAgentOutput", self.runs.deadlines().runner_call(), opened)
            .await
            .map_err(RunError::Helper)?
            .into_inner();
        Ok(Reading { input, steps })
    }
}

/// The agent's stdout chunks relayed to the run's process and not yet taken: when it
/// reads slower than the agent writes, the agent waits.
const RELAYED_CHUNKS: usize = 16;

/// A prompt's output on its way to the run's process, and the steps coming back.
struct Reading {
    input: mpsc::Sender<rn::ParseAgentOutputRequest>,
    steps: tonic::Streaming<rn::ParseAgentOutputResponse>,
}

/// One claude-code prompt in flight: the agent's stdout relayed unread to the run's
/// process, the steps it reads recorded and streamed, everything else of the launch
/// passed on.
struct Relay {
    events: std::sync::Arc<crate::events::EventLog>,
    subject: String,
    run_id: String,
    on_host: bool,
    /// The run's limits when the agent started: an agent the kernel ended at one is
    /// told so, with the limit's name.
    limits: super::LimitWatch,
    out: mpsc::Sender<Result<pb::PromptRunResponse, Status>>,
    deadline: tokio::time::Instant,
    deadline_after: std::time::Duration,
}

/// What the launch said besides its stdout, in order; its end last.
enum LaunchNews {
    Event(LaunchEvent),
    Ended(Result<sb::Exit, Status>),
}

impl Relay {
    async fn run(
        self,
        launched: tonic::Streaming<sb::LaunchResponse>,
        reading: Reading,
        mut session: tokio::sync::OwnedMutexGuard<Option<String>>,
    ) {
        let Reading { input, mut steps } = reading;
        let _records = self.events.prompt_scope(&self.run_id);
        let (news, mut news_rx) = mpsc::channel(64);
        // The launch is read by a task of its own, so that relaying a chunk to the run's
        // process never waits on the steps this task has yet to take.
        let forwarding = tokio::spawn(forward_launch(launched, input, news));
        let _forwarding = AbortOnDrop(forwarding);
        let mut budget = super::agent_events::PromptBudget::default();
        let mut stderr_sent = 0u64;
        let mut ended: Option<Result<sb::Exit, Status>> = None;
        let mut read_all = false;
        // The prompt ends when the launch has ended and the run's process has read all
        // it was given; its exit comes last.
        while !(read_all && ended.is_some()) {
            tokio::select! {
                step = steps.message(), if !read_all => match step {
                    Ok(Some(step)) => self.step(step, &mut budget, &mut session),
                    Ok(None) => read_all = true,
                    Err(status) => {
                        // The runner died (a kill, its memory limit): the agent's output
                        // has no one to read it, so the prompt ends and the agent with it.
                        let detail = format!("it ended mid-prompt: {}", status.message());
                        self.events.record("agent_output_unread", &self.subject, json!({ "reason": detail }));
                        let _ = self.out.send(Err(Status::from(RunError::HelperGone { helper: "runner", detail }))).await;
                        return;
                    }
                },
                news = news_rx.recv(), if ended.is_none() => match news {
                    Some(LaunchNews::Event(event)) => self.launch_event(event, &mut stderr_sent),
                    Some(LaunchNews::Ended(end)) => ended = Some(end),
                    None => ended = Some(Err(gone("its stream ended before the agent's exit"))),
                },
                _ = tokio::time::sleep_until(self.deadline) => {
                    let what = "the agent's end (its timeout passed)";
                    let _ = self.out.send(Err(cc_proto::reasons::helper_timeout("sandboxd", what, self.deadline_after))).await;
                    return;
                }
            }
        }
        match ended {
            Some(Ok(exit)) => self.exited(exit).await,
            Some(Err(status)) => {
                let _ = self.out.send(Err(status)).await;
            }
            None => {}
        }
    }

    /// A client that stops reading must not stall the agent: its steps are in the
    /// event log either way, so what it does not take in time is dropped for it.
    fn send(&self, event: Event) {
        let _ = self.out.try_send(Ok(pb::PromptRunResponse { event: Some(event) }));
    }

    fn step(
        &self,
        step: rn::ParseAgentOutputResponse,
        budget: &mut super::agent_events::PromptBudget,
        session: &mut Option<String>,
    ) {
        use rn::parse_agent_output_response::Output;
        match step.output {
            Some(Output::Event(event)) => {
                let Some(mut event) = AgentEvent::from_step(event) else { return };
                if self.on_host {
                    event.payload["unsandboxed"] = serde_json::Value::Bool(true);
                }
                if event.kind == AgentEventKind::Init
                    && let Some(id) = event.payload["session_id"].as_str().filter(|s| !s.is_empty())
                {
                    *session = Some(id.to_owned());
                }
                budget.record(&self.events, &self.subject, &event);
                self.send(Event::AgentEvent(event.to_wire()));
            }
            Some(Output::Dropped(why)) => self.send(Event::Stderr(format!("cc: {why}\n").into_bytes())),
            None => {}
        }
    }

    fn launch_event(&self, event: LaunchEvent, stderr_sent: &mut u64) {
        match event {
            LaunchEvent::Stderr(chunk) if *stderr_sent < MAX_STDERR_BYTES => {
                let keep = chunk.len().min((MAX_STDERR_BYTES - *stderr_sent) as usize);
                *stderr_sent += keep as u64;
                self.send(Event::Stderr(chunk[..keep].to_vec()));
            }
            LaunchEvent::Envelope(kind) => self.send(Event::Envelope(kind)),
            LaunchEvent::Violation(v) => {
                let payload = json!({
                    "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "claude-code",
                });
                self.events.record("sandbox_violation", &self.subject, payload);
            }
            _ => {}
        }
    }

    /// The last message, the exit, waits for the client up to the deadline; a limit
    /// the run reached during the prompt says so first, as the agent's last error
    /// output and as an event naming the limit.
    async fn exited(&self, exit: sb::Exit) {
        for (limit, message) in self.limits.reached() {
            self.events.record("limit_reached", &self.subject, json!({ "limit": limit, "message": message }));
            let stderr = Event::Stderr(format!("cc: {message}\n").into_bytes());
            let _ = tokio::time::timeout_at(
                self.deadline,
                self.out.send(Ok(pb::PromptRunResponse { event: Some(stderr) })),
            )
            .await;
        }
        let exit = pb::BashExit {
            code: exit.code,
            signal: exit.signal,
            timed_out: exit.timed_out,
            truncated: false,
            timings: None,
        };
        let mut payload = json!({ "code": exit.code, "signal": exit.signal, "timed_out": exit.timed_out });
        if self.on_host {
            payload["unsandboxed"] = serde_json::Value::Bool(true);
        }
        self.events.record("agent_exited", &self.subject, payload);
        let last = self.out.send(Ok(pb::PromptRunResponse { event: Some(Event::Exit(exit)) }));
        let _ = tokio::time::timeout_at(self.deadline, last).await;
    }
}

fn gone(detail: &str) -> Status {
    Status::from(RunError::HelperGone { helper: "sandboxd", detail: detail.to_owned() })
}

/// Reads the launch: its stdout to the run's process, unread; the rest, and its end,
/// to the relay. Dropping the stdout's sender tells the run's process the output ended.
async fn forward_launch(
    mut launched: tonic::Streaming<sb::LaunchResponse>,
    input: mpsc::Sender<rn::ParseAgentOutputRequest>,
    news: mpsc::Sender<LaunchNews>,
) {
    use rn::parse_agent_output_request::Input;
    let end = loop {
        match launched.next().await {
            None => break Err(gone("its stream ended before the agent's exit")),
            Some(Err(status)) => break Err(status),
            Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stdout(chunk)) })) => {
                // A runner that is gone is the relay's to report, from its side.
                let _ = input.send(rn::ParseAgentOutputRequest { input: Some(Input::Stdout(chunk)) }).await;
            }
            Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Exit(exit)) })) => break Ok(exit),
            Some(Ok(sb::LaunchResponse { event: Some(event) })) => {
                if news.send(LaunchNews::Event(event)).await.is_err() {
                    return;
                }
            }
            Some(Ok(sb::LaunchResponse { event: None })) => {}
        }
    };
    drop(input);
    let _ = news.send(LaunchNews::Ended(end)).await;
}

/// Ends the launch's reading (and so the agent) with the prompt that owns it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_config_is_written_anew_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (config, outside) = (root.join("config"), root.join("outside"));
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(&outside, "untouched").unwrap();
        // A link planted where the settings go: replaced, its target untouched.
        std::os::unix::fs::symlink(&outside, config.join(claude_code::SETTINGS_FILE)).unwrap();
        write_agent_config(&config, &serde_json::json!({ "a": 1 }), &serde_json::json!({})).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
        let written = config.join(claude_code::SETTINGS_FILE);
        assert!(std::fs::symlink_metadata(&written).unwrap().is_file());
        assert_eq!(std::fs::read_to_string(written).unwrap(), r#"{"a":1}"#);
        // A directory on the way swapped for a link: refused, nothing written there.
        std::os::unix::fs::symlink(&root, root.join("swapped")).unwrap();
        assert!(
            write_agent_config(&root.join("swapped/config"), &serde_json::json!({}), &serde_json::json!({})).is_err()
        );
    }
}
