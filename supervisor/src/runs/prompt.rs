//! A prompt to a run's agent (adapter claude-code): the `claude` CLI in the run's
//! overlay envelope, its stream-json output read line by line into the run's events
//! ([`super::claude_code::events`]) and streamed back. One prompt at a time per run; a
//! later one resumes the session the first began.

use std::io::Write;
use std::path::Path;

use cc_proto::common::v1::EnvelopeKind;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::prompt_run_response::Event;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::claude_code;
use super::{RunError, RunManager};
use crate::ids::RunId;
use cc_proto::common::v1::Adapter;

/// The most a prompt may hold.
pub const MAX_PROMPT_BYTES: usize = 256 * 1024;
/// A stream-json line longer than this is dropped (and said so): one message of the
/// agent's, a tool result with a whole file in it, fits well within.
const MAX_LINE_BYTES: usize = 8 << 20;
/// The agent's error output passed on, at most; the rest is dropped.
const MAX_STDERR_BYTES: u64 = 1 << 20;
/// The events one prompt records at most: an agent that loops for hours must not fill
/// the event log. Past it one `agent_events_suppressed` says so; its steps still
/// stream to the client.
const MAX_EVENTS_PER_PROMPT: u32 = 10_000;

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

impl RunManager {
    pub async fn prompt(
        self: &std::sync::Arc<Self>,
        run_id: &RunId,
        prompt: String,
        timeout_seconds: u32,
    ) -> Result<Events, RunError> {
        let run = self.require_live(run_id)?;
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
        let config = self.config();
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
        // Without a key the CLI prints its apiKeyHelper's error and then waits out the
        // whole prompt timeout. On the host (nosandbox) it may have a key of its own.
        if !on_host && !config.model_key {
            return Err(RunError::Precondition(
                "claude-code has no model API key: add [credentials.model] with api_key_file to config.toml \
                 (docs/reference/config.md), then restart the supervisor"
                    .into(),
            ));
        }
        let mut session = run.agent.0.clone().try_lock_owned().map_err(|_| RunError::AgentBusy(run_id.clone()))?;
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
        let deadline_after = std::time::Duration::from_secs(u64::from(timeout)) + self.deadlines().launch_grace();
        let deadline = tokio::time::Instant::now() + deadline_after;
        let mut launched = self.launch(&run, request, "claude-code").await?;
        let events = self.events().clone();
        let subject = format!("run:{}", run.record.id);
        // Room for bursts of a reading client; at most 256 events of at most 16 KiB held.
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(async move {
            // A client that stops reading must not stall the agent: its steps are in the
            // event log either way, so what it does not take in time is dropped for it.
            // The last message, the exit, waits for it up to the deadline.
            let send = |event| {
                let tx = tx.clone();
                async move {
                    let _ = tx.try_send(Ok(pb::PromptRunResponse { event: Some(event) }));
                }
            };
            let mut pending: Vec<u8> = Vec::new();
            let mut overlong = false;
            let mut stderr_sent = 0u64;
            let mut recorded = 0u32;
            loop {
                let next = tokio::select! {
                    next = launched.next() => next,
                    _ = tokio::time::sleep_until(deadline) => {
                        let what = "the agent's end (its timeout passed)";
                        let _ = tx.send(Err(cc_proto::reasons::helper_timeout("sandboxd", what, deadline_after))).await;
                        return;
                    }
                };
                // The client going away does not stop the agent: its steps are still
                // the run's events, and the prompt's end is awaited.
                match next {
                    None => {
                        let detail = "its stream ended before the agent's exit".to_owned();
                        let gone = RunError::HelperGone { helper: "sandboxd", detail };
                        let _ = tx.send(Err(Status::from(gone))).await;
                        return;
                    }
                    Some(Err(status)) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stdout(chunk)) })) => {
                        pending.extend_from_slice(&chunk);
                        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = pending.drain(..=end).collect();
                            if std::mem::take(&mut overlong) {
                                continue;
                            }
                            for mut event in claude_code::events(&String::from_utf8_lossy(&line)) {
                                if on_host {
                                    event.payload["unsandboxed"] = serde_json::Value::Bool(true);
                                }
                                if event.kind == "agent_init"
                                    && let Some(id) = event.payload["session_id"].as_str().filter(|s| !s.is_empty())
                                {
                                    *session = Some(id.to_owned());
                                }
                                recorded += 1;
                                if recorded <= MAX_EVENTS_PER_PROMPT {
                                    events.record(event.kind, &subject, event.payload.clone());
                                } else if recorded == MAX_EVENTS_PER_PROMPT + 1 {
                                    let note = serde_json::json!({ "after": MAX_EVENTS_PER_PROMPT });
                                    events.record("agent_events_suppressed", &subject, note);
                                }
                                let payload_json = event.payload.to_string();
                                send(Event::AgentEvent(pb::AgentEvent { kind: event.kind.into(), payload_json })).await;
                            }
                        }
                        if pending.len() > MAX_LINE_BYTES {
                            pending.clear();
                            overlong = true;
                            let note =
                                format!("cc: a line of the agent's output over {MAX_LINE_BYTES} bytes was dropped\n");
                            send(Event::Stderr(note.into_bytes())).await;
                        }
                    }
                    Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Stderr(chunk)) })) => {
                        if stderr_sent < MAX_STDERR_BYTES {
                            let keep = chunk.len().min((MAX_STDERR_BYTES - stderr_sent) as usize);
                            stderr_sent += keep as u64;
                            send(Event::Stderr(chunk[..keep].to_vec())).await;
                        }
                    }
                    Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Envelope(kind)) })) => {
                        send(Event::Envelope(kind)).await;
                    }
                    Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Violation(v)) })) => {
                        let payload = serde_json::json!({
                            "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "claude-code",
                        });
                        events.record("sandbox_violation", &subject, payload);
                    }
                    Some(Ok(sb::LaunchResponse { event: Some(LaunchEvent::Exit(exit)) })) => {
                        let exit = pb::BashExit {
                            code: exit.code,
                            signal: exit.signal,
                            timed_out: exit.timed_out,
                            truncated: false,
                        };
                        let mut payload = serde_json::json!({ "code": exit.code, "signal": exit.signal, "timed_out": exit.timed_out });
                        if on_host {
                            payload["unsandboxed"] = serde_json::Value::Bool(true);
                        }
                        events.record("agent_exited", &subject, payload);
                        let last = tx.send(Ok(pb::PromptRunResponse { event: Some(Event::Exit(exit)) }));
                        let _ = tokio::time::timeout_at(deadline, last).await;
                        return;
                    }
                    Some(Ok(_)) => {}
                }
            }
        });
        Ok(ReceiverStream::new(rx))
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
