//! One tool call of a run: the gate first, then the runner (file tools) or sandboxd's
//! harness_bash envelope (bash). Nothing is done for a call the gate did not allow.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cc_policy::roots::{Misplaced, Root, check_write};
use cc_policy::{Action, Decision, Effect, Scope};
use cc_proto::common::v1::EnvelopeKind;
use cc_proto::runner::v1 as rn;
use cc_proto::runner::v1::call_tool_request::Tool as RunnerTool;
use cc_proto::sandboxd::v1 as sb;
use cc_proto::sandboxd::v1::launch_response::Event as LaunchEvent;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_proto::supervisor::v1::call_tool_response::Event;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::launch::is_reason;
use super::{LiveRun, RunError, RunManager};
use crate::gate::Request as GateRequest;
use crate::ids::RunId;

/// What the gate is told about a call: the tool, the paths it names, its command line.
#[derive(Debug, PartialEq, Eq)]
pub struct Described {
    pub tool: &'static str,
    pub paths: Vec<String>,
    pub command_line: Option<String>,
    /// The host a web_fetch reaches, as the URL parser spells it.
    pub domains: Vec<String>,
}

fn shown(bytes: &[u8]) -> String {
    Path::new(OsStr::from_bytes(bytes)).to_string_lossy().into_owned()
}

/// The file names a unified diff touches, as its `---`/`+++` lines give them. A
/// quoted name (git's C-style escapes) is refused: the runner's parser would decode it
/// and the gate's rules would see it still quoted, so the two must not disagree.
fn patch_paths(patch: &str) -> Result<Vec<String>, RunError> {
    let names: Vec<&str> = patch
        .lines()
        .filter_map(|l| l.strip_prefix("+++ ").or_else(|| l.strip_prefix("--- ")))
        .map(|name| name.split('\t').next().unwrap_or(name).trim_end())
        .collect();
    if names.iter().any(|n| n.starts_with('"')) {
        return Err(RunError::BadRequest(
            "a quoted file name in the patch: quoted names are not supported; rename the file with bash".into(),
        ));
    }
    let mut paths: Vec<String> = names
        .into_iter()
        .filter(|name| *name != "/dev/null")
        .map(|name| name.strip_prefix("a/").or_else(|| name.strip_prefix("b/")).unwrap_or(name).to_owned())
        .collect();
    paths.sort();
    paths.dedup();
    Ok(paths)
}

pub use cc_policy::paths::gate_path;

pub fn describe(tool: Option<&Tool>, work_dir: &Path) -> Result<Described, RunError> {
    let d = |tool, paths: Vec<String>| Described {
        tool,
        paths: paths.iter().map(|p| gate_path(p, work_dir)).collect(),
        command_line: None,
        domains: vec![],
    };
    let start = |p: &[u8]| if p.is_empty() { vec![".".to_owned()] } else { vec![shown(p)] };
    Ok(match tool.ok_or_else(|| RunError::BadRequest("the call names no tool".into()))? {
        Tool::Read(r) => d("read", vec![shown(&r.path)]),
        Tool::Write(w) => d("write", vec![shown(&w.path)]),
        Tool::Edit(e) => d("edit", vec![shown(&e.path)]),
        Tool::ApplyPatch(p) => d("apply_patch", patch_paths(&p.patch)?),
        Tool::Search(s) => d("search", start(&s.path)),
        Tool::Find(f) => d("find", start(&f.path)),
        Tool::SearchFiles(f) => d("search_files", start(&f.path)),
        Tool::Bash(b) => {
            Described { tool: "bash", paths: vec![], command_line: Some(b.command.clone()), domains: vec![] }
        }
        Tool::WebFetch(f) => {
            Described { tool: "web_fetch", paths: vec![], command_line: None, domains: vec![url_host(&f.url)?] }
        }
    })
}

/// The host of a web_fetch URL as the gate's domain rules see it (the URL parser's
/// spelling, as the runner's own; the proxy decides on its canonical form again).
fn url_host(url: &str) -> Result<String, RunError> {
    let bad =
        |why: &str| RunError::BadRequest(format!("web_fetch: {:?} {why}", url.chars().take(200).collect::<String>()));
    let parsed = url::Url::parse(url).map_err(|_| bad("is not a URL"))?;
    match parsed.host() {
        Some(url::Host::Domain(name)) => Ok(name.to_owned()),
        Some(url::Host::Ipv4(ip)) => Ok(ip.to_string()),
        Some(url::Host::Ipv6(ip)) => Ok(ip.to_string()),
        None => Err(bad("names no host")),
    }
}

/// A file tool's call as the runner takes it; bash is never the runner's.
fn for_runner(tool: Tool) -> Result<RunnerTool, pb::BashArgs> {
    Ok(match tool {
        Tool::Read(a) => RunnerTool::Read(a),
        Tool::Write(a) => RunnerTool::Write(a),
        Tool::Edit(a) => RunnerTool::Edit(a),
        Tool::ApplyPatch(a) => RunnerTool::ApplyPatch(a),
        Tool::Search(a) => RunnerTool::Search(a),
        Tool::Find(a) => RunnerTool::Find(a),
        Tool::SearchFiles(a) => RunnerTool::SearchFiles(a),
        Tool::WebFetch(a) => RunnerTool::WebFetch(a),
        Tool::Bash(bash) => return Err(bash),
    })
}

type Events = ReceiverStream<Result<pb::CallToolResponse, Status>>;

fn one(event: Event) -> Events {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Ok(pb::CallToolResponse { event: Some(event) }));
    ReceiverStream::new(rx)
}

/// A launch's stream that broke off: sandboxd died or restarted under the call (the
/// transport's words, "h2 protocol error", name nobody), unless sandboxd said why.
fn died_in_flight(status: Status) -> RunError {
    if cc_proto::reasons::reason_of(&status).is_some() {
        return RunError::Helper(status);
    }
    RunError::HelperGone { helper: "sandboxd", detail: status.message().to_owned() }
}

/// Where a write an agent asks about would land, judged from its names against the
/// run's roots and its registered checkouts (`cc_policy::roots`). Only tools that
/// write are judged: an agent reading the system's files is ordinary work, which the
/// envelope shows read-only.
fn placed(run: &LiveRun, described: &Described) -> Result<(), Misplaced> {
    if !cc_policy::tools::writes(described.tool) {
        return Ok(());
    }
    let path = |bytes: &[u8]| Path::new(OsStr::from_bytes(bytes)).to_path_buf();
    let policy = &run.policy;
    let owned: Vec<(std::path::PathBuf, bool)> =
        [(&policy.repos, true), (&policy.agent_work, true), (&policy.work_dir, true), (&policy.attachments, false)]
            .into_iter()
            .filter(|(bytes, _)| !bytes.is_empty())
            .map(|(bytes, writable)| (path(bytes), writable))
            .collect();
    let roots: Vec<Root> = owned.iter().map(|(p, writable)| Root { path: p, writable: *writable }).collect();
    let checkouts: Vec<std::path::PathBuf> = policy.write_deny.iter().map(|b| path(b)).collect();
    let checkouts: Vec<&Path> = checkouts.iter().map(std::path::PathBuf::as_path).collect();
    check_write(&described.paths, &run.record.work_dir, &roots, &checkouts)
}

/// A run's tool calls, each judged by the gate before anything runs: the harness's
/// own (bash in sandboxd's harness_bash envelope, the file tools in the runner), an
/// agent's hook asking about its agent's (`hook.rs`), the product's tools
/// (`product_tools.rs`), and an ACP agent's terminals. The runs themselves, and how a
/// process of theirs is launched, are [`RunManager`]'s.
#[derive(Clone)]
pub struct ToolCalls {
    pub(super) runs: Arc<RunManager>,
}

impl RunManager {
    pub fn tools(self: &Arc<Self>) -> ToolCalls {
        ToolCalls { runs: self.clone() }
    }
}

impl ToolCalls {
    /// Asks the gate; `Ok` only for an allow. A tool with no effect classes (the
    /// read-only ones) is evaluated without an event when allowed, so a thousand reads
    /// do not write a thousand rows; every other decision is recorded by the gate.
    /// `hooked`: an agent's own call, asked by its hook, whose pushes are judged by the
    /// refs its command line names as well (the gateway judges them again as they are).
    pub(super) async fn ask_gate(&self, run: &LiveRun, described: &Described, hooked: bool) -> Result<(), RunError> {
        // An agent's own write (its hook, its permission request) lands where its names
        // say, as the harness's would in the runner: judged first, whatever a rule says.
        if hooked && let Err(misplaced) = placed(run, described) {
            let reason = misplaced.reason();
            let write = Action {
                tool: Some(described.tool.to_owned()),
                scope: Scope { paths: described.paths.clone(), ..Default::default() },
                mode: run.record.mode,
                ..Default::default()
            };
            let for_agent = cc_policy::denial::misplaced(&write, &reason);
            let payload = json!({
                "tool": described.tool, "paths": described.paths, "reason": reason,
                "blocked_by": "gate: where the write lands (the run's roots)",
            });
            self.runs.events().record("tool_refused", &format!("run:{}", run.record.id), payload);
            return Err(RunError::GateDenied {
                reason,
                effect: Effect::WriteFile.as_str().to_owned(),
                origin: "roots".into(),
                decided_by: "gate".into(),
                for_agent,
            });
        }
        let effects = cc_policy::tools::TOOLS
            .iter()
            .find(|t| t.name == described.tool)
            .map(|t| t.effects.iter().copied().collect())
            .unwrap_or_default();
        let action = Action {
            effects,
            scope: Scope {
                repo: run.repo.clone(),
                paths: described.paths.clone(),
                domains: described.domains.clone(),
                ..Default::default()
            },
            mode: run.record.mode,
            tool: Some(described.tool.to_owned()),
            command_line: described.command_line.clone(),
            egress: run.record.network,
            // In an envelope a push leaves only through the gateway, which asks the gate
            // about each ref as it really is (force and deletion included). An agent's
            // hook is asked too, so that the agent hears a refusal as its tool's result
            // rather than as git's error.
            pushes_through_gateway: !hooked && self.runs.env.enveloped && run.gateway_bridged(),
        };
        let quiet = action.effects.is_empty() && action.command_line.is_none();
        // What a denial names when no single effect's own verdict decided (the command
        // policy or the mode did): the call's first effect.
        let first_effect = action.effects.first().copied();
        if quiet && self.runs.gate().evaluate(&action, &run.record.workspace).decision == Decision::Allow {
            return Ok(());
        }
        let summary = match &described.command_line {
            Some(line) => format!("bash: {}", line.chars().take(200).collect::<String>()),
            None => format!("{} {}", described.tool, [&described.paths[..], &described.domains[..]].concat().join(" ")),
        };
        let asked = action.clone();
        let request =
            GateRequest { action, workspace: run.record.workspace.clone(), run_id: run.record.id.clone(), summary };
        let decided = self.runs.gate().decide(request).await;
        let evaluation = &decided.evaluation;
        match decided.decision {
            Decision::Allow => Ok(()),
            _ if decided.unanswered => {
                Err(RunError::NoApprover { for_agent: decided.for_agent(&asked), reason: decided.reason })
            }
            _ => {
                // The effect whose decision was the verdict's (the first, when several were).
                let effect = evaluation.effects.iter().find(|v| v.decision == evaluation.decision).map(|v| v.effect);
                let effect = effect.or(first_effect);
                Err(RunError::GateDenied {
                    for_agent: decided.for_agent(&asked),
                    reason: decided.reason,
                    effect: effect.map(|e| e.as_str().to_owned()).unwrap_or_default(),
                    origin: evaluation.source.clone(),
                    decided_by: decided.decided_by,
                })
            }
        }
    }

    /// [`Self::ask_gate`] for a harness call that arrived at `arrived`, timed for its
    /// [`pb::BashTimings`].
    async fn ask_gate_timed(
        &self,
        run: &LiveRun,
        described: &Described,
        arrived: Instant,
    ) -> Result<CallClock, RunError> {
        let asked = Instant::now();
        self.ask_gate(run, described, false).await?;
        Ok(CallClock { arrived, gate: asked.elapsed() })
    }

    /// Judges `command_line` as a bash call of the run (a rig's command): the gate's
    /// rules, the command policy and the mode, and its approvers; `Ok` only for an allow.
    pub async fn judge_command(&self, run_id: &RunId, command_line: &str) -> Result<Arc<LiveRun>, RunError> {
        let run = self.runs.require_live(run_id)?;
        let call = pb::BashArgs { command: command_line.to_owned(), timeout_seconds: 0 };
        let described = describe(Some(&Tool::Bash(call)), &run.record.work_dir)?;
        self.ask_gate(&run, &described, false).await?;
        Ok(run)
    }

    pub async fn call_tool(&self, run_id: &RunId, tool: Option<Tool>) -> Result<Events, RunError> {
        let arrived = Instant::now();
        let run = self.runs.require_live(run_id)?;
        let described = describe(tool.as_ref(), &run.record.work_dir)?;
        let clock = self.ask_gate_timed(&run, &described, arrived).await?;
        let tool = match tool.map(for_runner) {
            Some(Ok(tool)) => tool,
            Some(Err(bash)) => {
                return self.bash(&run, bash, Some(self.runs.config().bash_output_cap_bytes), clock).await;
            }
            None => return Err(RunError::BadRequest("the call names no tool".into())),
        };
        let mut runner = run.ready_runner(self.runs.deadlines().runner_call()).await?;
        let runner_pid = run.runner_pid();
        let deadline = self.runs.deadlines().runner_call();
        let called = runner.call_tool(rn::CallToolRequest { tool: Some(tool) });
        match crate::channels::within("runner", "CallTool", deadline, called).await {
            Ok(response) => Ok(one(Event::Result(response.into_inner().result.unwrap_or_default()))),
            Err(status) if status.code() == tonic::Code::PermissionDenied => {
                self.runs.events().record(
                    "tool_refused",
                    &format!("run:{run_id}"),
                    json!({ "tool": described.tool, "paths": described.paths, "reason": status.message() }),
                );
                Err(RunError::Helper(status))
            }
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument | tonic::Code::DeadlineExceeded
                ) =>
            {
                Err(RunError::Helper(status))
            }
            // The runner died under the call (HELPER_RESTARTING): a new one is started.
            // Said once the run's task knows, so that a retry waits for the new one
            // instead of meeting the dead one again.
            Err(status) if is_reason(&status, cc_proto::reasons::HELPER_RESTARTING) => {
                run.runner_replaced(runner_pid, deadline).await;
                Err(RunError::Helper(cc_proto::reasons::helper_restarting(
                    "the run's runner died during the call and is being started again; retry",
                    "runner",
                )))
            }
            Err(status) => Err(RunError::RunnerUnavailable(format!(
                "the run's runner did not answer ({}); if it died, it is being started again: retry",
                status.message()
            ))),
        }
    }

    /// An ACP agent's terminal: a bash command judged by the gate as `call_tool`'s, run
    /// for up to the longest timeout a call may ask, its output not capped (the
    /// terminal keeps only its tail).
    pub(super) async fn terminal_command(&self, run_id: &RunId, command: String) -> Result<Events, RunError> {
        let arrived = Instant::now();
        let run = self.runs.require_live(run_id)?;
        let call = pb::BashArgs { command, timeout_seconds: self.runs.config().bash_max_timeout_seconds };
        let described = describe(Some(&Tool::Bash(call.clone())), &run.record.work_dir)?;
        let clock = self.ask_gate_timed(&run, &described, arrived).await?;
        self.bash(&run, call, None, clock).await
    }

    /// bash: in the run's harness_bash envelope, with the configured timeout and, when
    /// `cap` is given, output cap. Over the cap, the rest is dropped and closing
    /// sandboxd's stream kills the command's whole process group.
    async fn bash(
        &self,
        run: &LiveRun,
        call: pb::BashArgs,
        cap: Option<u64>,
        clock: CallClock,
    ) -> Result<Events, RunError> {
        let config = self.runs.config();
        let timeout = match call.timeout_seconds {
            0 => config.bash_timeout_seconds,
            t if t > config.bash_max_timeout_seconds => {
                return Err(RunError::BadRequest(format!(
                    "a timeout of {t} s is over the configured maximum of {} s",
                    config.bash_max_timeout_seconds
                )));
            }
            t => t,
        };
        let cap = cap.unwrap_or(u64::MAX);
        let request = sb::LaunchRequest {
            run_id: run.record.id.clone(),
            kind: EnvelopeKind::HarnessBash as i32,
            argv: vec![b"bash".to_vec(), b"-c".to_vec(), call.command.into_bytes()],
            timeout_seconds: timeout,
            host: None,
            ..Default::default()
        };
        let events = self.runs.events().clone();
        let subject = format!("run:{}", run.record.id);
        // The run's limit counters before the command, to tell one it reached.
        let limits = run.watch_limits();
        // sandboxd ends the command at its timeout; past that and a grace, sandboxd
        // itself is given up on (the stream is dropped, which kills the command if
        // sandboxd still can).
        let deadline_after = std::time::Duration::from_secs(u64::from(timeout)) + self.runs.deadlines().launch_grace();
        let deadline = tokio::time::Instant::now() + deadline_after;
        let launching = Instant::now();
        let mut launched = self.runs.launch(run, request, "bash").await?;
        let launch = launching.elapsed();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let send = |event| {
                let tx = tx.clone();
                async move { tx.send(Ok(pb::CallToolResponse { event: Some(event) })).await.is_ok() }
            };
            let mut written: u64 = 0;
            let mut exited = false;
            loop {
                let next = tokio::select! {
                    next = launched.next() => next,
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep_until(deadline) => {
                        let what = "the command's end (its timeout passed)";
                        let late = cc_proto::reasons::helper_timeout("sandboxd", what, deadline_after);
                        let _ = tx.send(Err(late)).await;
                        return;
                    }
                };
                let event = match next {
                    None if exited => break,
                    // The stream ended before the command's exit: sandboxd is gone.
                    None => {
                        let detail = "its stream ended before the command's exit".to_owned();
                        let gone = RunError::HelperGone { helper: "sandboxd", detail };
                        let _ = tx.send(Err(Status::from(gone))).await;
                        return;
                    }
                    Some(Err(status)) => {
                        let _ = tx.send(Err(Status::from(died_in_flight(status)))).await;
                        return;
                    }
                    Some(Ok(e)) => e.event,
                };
                let forwarded = match event {
                    Some(LaunchEvent::Stdout(chunk)) | Some(LaunchEvent::Stderr(chunk))
                        if written.saturating_add(chunk.len() as u64) > cap =>
                    {
                        let keep = (cap - written) as usize;
                        let _ = send(Event::Stderr(chunk[..keep].to_vec())).await;
                        let _ = send(Event::Exit(pb::BashExit {
                            code: None,
                            signal: Some(9),
                            timed_out: false,
                            truncated: true,
                            timings: None,
                        }))
                        .await;
                        // Dropping the stream kills the command.
                        return;
                    }
                    Some(LaunchEvent::Stdout(chunk)) => {
                        written += chunk.len() as u64;
                        send(Event::Stdout(chunk)).await
                    }
                    Some(LaunchEvent::Stderr(chunk)) => {
                        written += chunk.len() as u64;
                        send(Event::Stderr(chunk)).await
                    }
                    Some(LaunchEvent::Envelope(kind)) => send(Event::Envelope(kind)).await,
                    // Ours to know, not the caller's.
                    Some(LaunchEvent::ProcessId(_)) => true,
                    Some(LaunchEvent::Violation(v)) => {
                        events.record(
                            "sandbox_violation",
                            &subject,
                            json!({ "attempted": v.attempted, "blocked_by": v.blocked_by, "line": v.line, "tool": "bash" }),
                        );
                        true
                    }
                    Some(LaunchEvent::Exit(exit)) => {
                        exited = true;
                        // A limit the run reached during the call says so, as the
                        // command's last output and as an event naming the limit.
                        for (limit, message) in limits.reached() {
                            events.record("limit_reached", &subject, json!({ "limit": limit, "message": message }));
                            let _ = send(Event::Stderr(format!("cc: {message}\n").into_bytes())).await;
                        }
                        let timings = clock.timings(launch, exit.timings.unwrap_or_default());
                        send(Event::Exit(pb::BashExit {
                            code: exit.code,
                            signal: exit.signal,
                            timed_out: exit.timed_out,
                            truncated: false,
                            timings: Some(timings),
                        }))
                        .await
                    }
                    None => true,
                };
                if !forwarded {
                    return;
                }
            }
        });
        Ok(ReceiverStream::new(rx))
    }
}

/// When a call arrived, and what its gate took: the start of its [`pb::BashTimings`].
#[derive(Clone, Copy)]
struct CallClock {
    arrived: Instant,
    gate: Duration,
}

impl CallClock {
    /// The call's stages, at its exit: `launch`, the launch asked of sandboxd until its
    /// events began; `sandboxd`, what sandboxd measured of it.
    fn timings(&self, launch: Duration, sandboxd: sb::LaunchTimings) -> pb::BashTimings {
        use cc_proto::time::micros;
        pb::BashTimings {
            total_micros: micros(self.arrived.elapsed()),
            gate_micros: micros(self.gate),
            launch_micros: micros(launch),
            sandboxd_prepare_micros: sandboxd.prepare_micros,
            command_micros: sandboxd.run_micros,
            sandboxd_report_micros: sandboxd.report_micros,
            warm_envelope: sandboxd.warm_envelope,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_sees_every_path_a_call_names() {
        use cc_proto::tools::v1 as tools;
        let w = Path::new("/d/conversations/c/repos/demo");
        let patch = "--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/new.txt\t2024\n";
        let d = describe(Some(&Tool::ApplyPatch(tools::ApplyPatchArgs { patch: patch.into() })), w).unwrap();
        assert_eq!((d.tool, d.paths), ("apply_patch", vec!["new.txt".to_owned(), "src/x.rs".to_owned()]));
        let d = describe(Some(&Tool::Find(tools::FindArgs { glob: "*.rs".into(), path: vec![] })), w).unwrap();
        assert_eq!(d.paths, vec!["."]);
        let d = describe(Some(&Tool::Bash(pb::BashArgs { command: "ls".into(), timeout_seconds: 0 })), w).unwrap();
        assert_eq!((d.tool, d.command_line.as_deref()), ("bash", Some("ls")));
        assert!(describe(None, w).is_err());
        let quoted = "--- /dev/null\n+++ \"b/secret/x\"\n@@ -0,0 +1 @@\n+x\n";
        let err = describe(Some(&Tool::ApplyPatch(tools::ApplyPatchArgs { patch: quoted.into() })), w).err().unwrap();
        assert_eq!(Status::from(err).code(), tonic::Code::InvalidArgument);
        let d = describe(Some(&Tool::Write(tools::WriteArgs { path: b"./secret//x/".to_vec(), content: vec![] })), w);
        assert_eq!(d.unwrap().paths, vec!["secret/x"]);
    }
}
