//! `ccctl run …` and `ccctl tool RUN …`: runs and their tool calls.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, anyhow};
use cc_proto::reasons;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_proto::supervisor::v1::call_tool_response::Event;
use cc_proto::tools::v1 as rn;
use cc_proto::tools::v1::tool_result::Result as Outcome;
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use tokio_stream::StreamExt;

use super::gate::ModeArg;
use super::render::one_line;
use super::{ExitWith, rpc_error};
use crate::Runs;
use cc_proto::supervisor::v1::sandbox_client::SandboxClient;
use tonic::transport::Channel;

/// A command denied by the gate, or a path refused by confinement (documented).
pub const EXIT_DENIED: u8 = 125;
/// bash ran past its timeout and was killed (as timeout(1) says it).
pub const EXIT_TIMED_OUT: u8 = 124;
/// Most content `write` and `apply-patch` read from stdin.
const MAX_STDIN_BYTES: u64 = 16 << 20;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Network {
    Off,
    On,
}

#[derive(Subcommand)]
pub enum RunAction {
    /// Start a run in a conversation and print its id
    Start {
        #[arg(long)]
        conversation: String,
        #[arg(long, default_value = "default")]
        agent: String,
        #[arg(long, value_enum, default_value = "chat")]
        mode: ModeArg,
        /// `harness` (the runner's tools, called one by one), `claude-code` (the
        /// claude CLI in the run's overlay envelope, prompted with `ccctl run prompt`),
        /// `claude-code-nosandbox`, or `acp` (an ACP agent, with --agent-command)
        #[arg(long, default_value = "harness")]
        adapter: String,
        /// With --adapter acp: the command that starts the ACP agent over stdio, split
        /// into words as a shell would (no expansion), e.g. "my-agent --acp"
        #[arg(long, default_value = "")]
        agent_command: String,
        /// `on`: through the run's proxies, to its allowlist (`[egress]`); needs an envelope
        #[arg(long, value_enum, default_value = "off")]
        network: Network,
        #[command(flatten)]
        limits: super::limits::LimitArgs,
        /// The model tokens (input, output and cache) the run may use through its
        /// model door; 0: `[runs] model_budget_tokens`
        #[arg(long, default_value_t = 0)]
        model_budget_tokens: u64,
        /// A host loopback port (a database on this machine) to bridge into the run's
        /// envelopes at the same port; a rule must allow access_network to
        /// localhost:PORT. Repeatable
        #[arg(long = "forward", value_name = "PORT")]
        forwards: Vec<u32>,
    },
    /// List runs, newest first
    List {
        #[arg(long)]
        conversation: Option<String>,
    },
    /// One run
    Show { id: String },
    /// The credentials the broker issued to a run (never their secrets)
    Credentials { id: String },
    /// Stop a run: everything of it is killed
    Stop { id: String },
    /// A run's events, oldest first: its agent's steps (agent_*), its gate decisions,
    /// egress refusals, violations
    Events {
        id: String,
        /// Keep running and print new events as they are recorded
        #[arg(long)]
        follow: bool,
    },
    /// Give a claude-code run's agent a prompt and follow its steps until it answers
    /// (a later prompt continues the same session)
    Prompt {
        id: String,
        prompt: String,
        /// Seconds [default: the configured default]
        #[arg(long, default_value_t = 0)]
        timeout: u32,
    },
}

#[derive(Subcommand)]
pub enum ToolAction {
    /// Print a file's lines
    Read {
        path: std::path::PathBuf,
        /// First line, 0-based
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Lines [default: 2000]
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
    /// Write a whole file from stdin
    Write { path: std::path::PathBuf },
    /// Replace one exact string (it must occur exactly once)
    Edit {
        path: std::path::PathBuf,
        #[arg(long)]
        old: String,
        #[arg(long)]
        new: String,
    },
    /// Apply a unified diff from stdin, all or nothing
    ApplyPatch,
    /// Regex over file contents (gitignore-aware)
    Search {
        pattern: String,
        #[arg(long)]
        path: Option<std::path::PathBuf>,
    },
    /// Glob over paths
    Find {
        glob: String,
        #[arg(long)]
        path: Option<std::path::PathBuf>,
    },
    /// Fuzzy file-name search
    SearchFiles {
        query: String,
        #[arg(long)]
        path: Option<std::path::PathBuf>,
    },
    /// Fetch a URL through the run's egress proxy (runs with their network on)
    WebFetch {
        url: String,
        /// Bytes of the body read at most [default: 1 MiB; at most 2 MiB]
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// The body as it came, rather than HTML turned into Markdown
        #[arg(long)]
        text: bool,
    },
    /// Run a command line in the run's envelope
    Bash {
        /// Seconds [default: the configured default]
        #[arg(long, default_value_t = 0)]
        timeout: u32,
        /// Print where the call's time went, on stderr, after the command's output
        #[arg(long)]
        timings: bool,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The tools this run has
    List,
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stdin_text(what: &str) -> anyhow::Result<Vec<u8>> {
    let mut content = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut content)
        .with_context(|| format!("cannot read the {what} from stdin"))?;
    if content.len() as u64 > MAX_STDIN_BYTES {
        return Err(anyhow!("the {what} on stdin is over {} MiB", MAX_STDIN_BYTES >> 20));
    }
    Ok(content)
}

/// A tool's refusal, told apart by its reason (the gate's denial, no approver, the
/// runner's confinement): `ccctl: denied: …` / `ccctl: refused: …` and [`EXIT_DENIED`].
pub fn tool_error(status: tonic::Status) -> anyhow::Error {
    let denied = [reasons::GATE_DENIED, reasons::NO_APPROVER, reasons::CONFINEMENT_REFUSED];
    if let Some(reason) = crate::refusal::reason(&status).filter(|r| denied.contains(&r.as_str())) {
        return ExitWith::refusal(EXIT_DENIED, status.message(), reason);
    }
    rpc_error(status)
}

pub fn state_name(state: i32) -> &'static str {
    match pb::RunState::try_from(state) {
        Ok(pb::RunState::Starting) => "starting",
        Ok(pb::RunState::Running) => "running",
        Ok(pb::RunState::Stopped) => "stopped",
        Ok(pb::RunState::Failed) => "failed",
        _ => "unknown",
    }
}

fn run_json(r: &pb::Run) -> serde_json::Value {
    json!({
        "id": r.run_id, "conversation": r.conversation_id, "workspace": r.workspace_id, "agent": r.agent,
        "mode": super::render::mode_name(r.mode), "adapter": super::words::adapter_name(r.adapter), "agent_command": r.agent_command,
        "network": r.network,
        "state": state_name(r.state), "runner_pid": r.runner_pid,
        "started": super::render::json_time(r.start_time.as_ref()),
        "ended": super::render::json_time(r.end_time.as_ref()), "end_reason": r.end_reason, "tools": r.tools,
        "work_dir": lossy(&r.work_dir),
        "resources": super::limits::resources_json(r.resources.as_ref()),
        "git_gateway_bridged": r.git_gateway_bridged, "git_gateway_port": r.git_gateway_port,
        "egress_traffic": r.egress_traffic.iter().map(|t| json!({
            "host": t.host, "port": t.port, "connections": t.connections,
            "bytes_sent": t.bytes_sent, "bytes_received": t.bytes_received, "denied": t.denied,
        })).collect::<Vec<_>>(),
        "model": super::models::usage_json(r),
        "forwards": r.forwards,
    })
}

/// The run's egress per destination, one line each (hosts were escaped by the supervisor).
fn print_egress(r: &pb::Run) {
    if !r.network && r.egress_traffic.is_empty() {
        println!("network: off");
        return;
    }
    let state = if r.network { "on" } else { "off" };
    if r.egress_traffic.is_empty() {
        println!("network: {state}; no connection yet");
        return;
    }
    println!("network: {state}; per destination:");
    for t in &r.egress_traffic {
        let host = if t.host.contains(':') { format!("[{}]", t.host) } else { t.host.clone() };
        println!(
            "  {host}:{}  {} connection{}  {} sent  {} received  {} denied",
            t.port,
            t.connections,
            if t.connections == 1 { "" } else { "s" },
            super::limits::bytes(t.bytes_sent),
            super::limits::bytes(t.bytes_received),
            t.denied
        );
    }
}

fn print_run(r: &pb::Run) {
    let ended = if r.end_reason.is_empty() { String::new() } else { format!(" ({})", one_line(&r.end_reason)) };
    println!(
        "{}  {}{}  conversation {}  agent {}  adapter {}  mode {}  runner pid {}",
        r.run_id,
        state_name(r.state),
        ended,
        r.conversation_id,
        r.agent,
        super::words::adapter_name(r.adapter),
        super::render::mode_name(r.mode),
        r.runner_pid
    );
    if r.adapter == cc_proto::common::v1::Adapter::ClaudeCodeNosandbox as i32 {
        println!(
            "  NO ENVELOPE: the agent runs on the host, unconfined, with the host's environment; only its hook \
             (Bash, file writes) and the product's tools are gated (ccctl adapters)"
        );
    }
    if !r.agent_command.is_empty() {
        println!("  agent command: {}", one_line(&r.agent_command));
    }
    if let Some(resources) = &r.resources {
        println!("  {}", super::limits::resources_line(resources));
        for port in &r.forwards {
            println!("  forward: 127.0.0.1:{port} in its envelopes is 127.0.0.1:{port} on the host");
        }
        if r.git_gateway_bridged {
            println!("  git gateway: bridged as 127.0.0.1:{} (GitHub remotes go through it)", r.git_gateway_port);
        } else {
            println!("  git gateway: not bridged (the gateway has not been told this run yet; see ccctl helpers)");
        }
    }
}

pub async fn run(mut client: Runs, action: RunAction, json: bool) -> anyhow::Result<()> {
    match action {
        RunAction::Start {
            conversation,
            agent,
            mode,
            adapter,
            agent_command,
            network,
            limits,
            model_budget_tokens,
            forwards,
        } => {
            let request = pb::StartRunRequest {
                conversation_id: conversation,
                agent,
                mode: mode.wire(),
                adapter: super::words::adapter(&adapter)? as i32,
                agent_command,
                network: network == Network::On,
                limits: limits.to_proto(),
                model_budget_tokens,
                forwards,
            };
            let run = client.start_run(request).await.map_err(rpc_error)?.into_inner().run.unwrap_or_default();
            if json {
                println!("{}", run_json(&run));
            } else {
                println!("{}", run.run_id);
            }
        }
        RunAction::List { conversation } => {
            let request = pb::ListRunsRequest { conversation_id: conversation.unwrap_or_default() };
            let runs = client.list_runs(request).await.map_err(rpc_error)?.into_inner().runs;
            if json {
                println!("{}", serde_json::Value::Array(runs.iter().map(run_json).collect()));
            } else {
                runs.iter().for_each(print_run);
            }
        }
        RunAction::Credentials { id } => {
            let request = pb::ListRunCredentialsRequest { run_id: id };
            let leases = client.list_run_credentials(request).await.map_err(rpc_error)?.into_inner().leases;
            print_leases(&leases, json);
        }
        RunAction::Show { id } => {
            let run = client.get_run(pb::GetRunRequest { run_id: id }).await.map_err(rpc_error)?.into_inner();
            let run = run.run.unwrap_or_default();
            if json {
                println!("{}", run_json(&run));
            } else {
                print_run(&run);
                println!("work dir: {}", lossy(&run.work_dir));
                println!("tools: {}", run.tools.join(", "));
                print_egress(&run);
                super::models::print_usage(&run);
            }
        }
        // Served from the event log by the caller, which holds the System client.
        RunAction::Events { .. } => return Err(anyhow!("ccctl run events needs the event log's client")),
        RunAction::Prompt { id, prompt, timeout } => {
            let request = pb::PromptRunRequest { run_id: id, prompt, timeout_seconds: timeout };
            let stream = client.prompt_run(request).await.map_err(rpc_error)?.into_inner();
            let outcome = follow_prompt(stream, json).await?;
            let status = outcome.status()?;
            if status != 0 {
                return Err(ExitWith::error(status, &format!("the agent exited with status {status}")));
            }
        }
        RunAction::Stop { id } => {
            let run = client.stop_run(pb::StopRunRequest { run_id: id }).await.map_err(rpc_error)?.into_inner();
            let run = run.run.unwrap_or_default();
            if json {
                println!("{}", run_json(&run));
            } else {
                print_run(&run);
            }
        }
    }
    Ok(())
}

/// Prints a prompt's steps as they come (JSON lines with `--json`); its exit.
pub(super) async fn follow_prompt(
    mut stream: tonic::Streaming<pb::PromptRunResponse>,
    json: bool,
) -> anyhow::Result<BashOutcome> {
    use cc_proto::supervisor::v1::prompt_run_response::Event as Step;
    let mut exit = None;
    while let Some(next) = stream.next().await {
        match next.map_err(rpc_error)?.event {
            Some(Step::AgentEvent(e)) => {
                let payload: serde_json::Value = serde_json::from_str(&e.payload_json).unwrap_or_default();
                if json {
                    println!("{}", json!({ "kind": e.kind, "payload": payload }));
                } else {
                    println!("{}", super::render::agent_step(&e.kind, &payload));
                }
            }
            Some(Step::Stderr(chunk)) => {
                let _ = std::io::stderr().write_all(&chunk);
            }
            Some(Step::Envelope(backend)) if !json && backend == cc_proto::common::v1::SandboxBackend::None as i32 => {
                eprintln!("ccctl: the agent runs without an envelope on this host");
            }
            Some(Step::Envelope(_)) | None => {}
            Some(Step::Exit(e)) => exit = Some(e),
        }
    }
    Ok(BashOutcome { exit })
}

/// What a bash call ended with, for the caller to turn into an exit status.
pub struct BashOutcome {
    pub exit: Option<pb::BashExit>,
}

impl BashOutcome {
    /// The command's status as a shell gives it: its code, or 128 + the signal.
    pub fn status(&self) -> anyhow::Result<u8> {
        let Some(exit) = &self.exit else {
            return Err(anyhow!("the command's stream ended without an exit status"));
        };
        if exit.truncated {
            return Err(ExitWith::error(
                128 + 9,
                "the output went over the configured cap: the rest was dropped and the command killed",
            ));
        }
        if exit.timed_out {
            return Err(ExitWith::error(EXIT_TIMED_OUT, "the command ran past its timeout and was killed"));
        }
        match (exit.code, exit.signal) {
            (Some(code), _) => Ok(code.clamp(0, 255) as u8),
            (None, Some(signal)) => Ok((128 + signal.clamp(0, 127)) as u8),
            (None, None) => Err(anyhow!("the command ended without a status")),
        }
    }
}

/// The line bash is given: one argument as it stands (so `'a | b'` is a pipeline),
/// several quoted so that none is re-split.
pub fn command_line(command: &[String]) -> anyhow::Result<String> {
    match command {
        [line] => Ok(line.clone()),
        _ => shlex::try_join(command.iter().map(String::as_str)).context("the command cannot be quoted for bash"),
    }
}

/// Runs one bash call, streaming its output to ours. A command that runs without an
/// envelope says so first, with the probe's reason when `sandbox` can ask for it.
pub async fn bash(
    client: &mut Runs,
    sandbox: Option<SandboxClient<Channel>>,
    run_id: &str,
    command: String,
    timeout: u32,
) -> anyhow::Result<BashOutcome> {
    let tool = Tool::Bash(pb::BashArgs { command, timeout_seconds: timeout });
    let request = pb::CallToolRequest { run_id: run_id.to_owned(), tool: Some(tool) };
    let mut stream = client.call_tool(request).await.map_err(tool_error)?.into_inner();
    let mut outcome = BashOutcome { exit: None };
    while let Some(event) = stream.next().await {
        match event.map_err(tool_error)?.event {
            Some(Event::Stdout(chunk)) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&chunk);
                let _ = out.flush();
            }
            Some(Event::Stderr(chunk)) => {
                let _ = std::io::stderr().lock().write_all(&chunk);
            }
            Some(Event::Exit(exit)) => outcome.exit = Some(exit),
            Some(Event::Envelope(kind)) if super::words::envelope_name(kind) != "native" => {
                let why = match sandbox.clone() {
                    Some(sandbox) => why_unwrapped(sandbox).await,
                    None => "`ccctl sandbox probe` says why".to_owned(),
                };
                eprintln!(
                    "ccctl: note: this command runs {} (no OS sandbox: {why})",
                    super::words::envelope_name(kind)
                );
            }
            _ => {}
        }
    }
    Ok(outcome)
}

/// The probe's one line on why there is no envelope, or where to read it.
async fn why_unwrapped(mut sandbox: SandboxClient<Channel>) -> String {
    let asked = sandbox.get_probe(pb::GetProbeRequest {});
    match tokio::time::timeout(std::time::Duration::from_secs(2), asked).await {
        Ok(Ok(probe)) => one_line(&probe.into_inner().detail),
        _ => "`ccctl sandbox probe` says why".to_owned(),
    }
}

pub async fn tool(mut client: Runs, run_id: String, action: ToolAction, json: bool) -> anyhow::Result<()> {
    let start = |p: &Option<std::path::PathBuf>| p.as_deref().map(bytes).unwrap_or_default();
    let call = match action {
        ToolAction::List => {
            let run = client.get_run(pb::GetRunRequest { run_id }).await.map_err(rpc_error)?.into_inner();
            let run = run.run.unwrap_or_default();
            if json {
                println!("{}", json!(run.tools));
            } else {
                run.tools.iter().for_each(|t| println!("{t}"));
            }
            return Ok(());
        }
        ToolAction::Bash { timeout, timings, command } => {
            let line = command_line(&command)?;
            let called = std::time::Instant::now();
            let outcome = bash(&mut client, None, &run_id, line, timeout).await?;
            if timings {
                let timings = outcome.exit.as_ref().and_then(|e| e.timings).unwrap_or_default();
                super::timings::print(&super::timings::Client::measured(called), &timings, json);
            }
            return match outcome.status()? {
                0 => Ok(()),
                code => Err(ExitWith::silent(code)),
            };
        }
        ToolAction::Read { path, offset, limit } => Tool::Read(rn::ReadArgs { path: bytes(&path), offset, limit }),
        ToolAction::Write { path } => {
            Tool::Write(rn::WriteArgs { path: bytes(&path), content: stdin_text("content")? })
        }
        ToolAction::Edit { path, old, new } => Tool::Edit(rn::EditArgs { path: bytes(&path), old, new }),
        ToolAction::ApplyPatch => {
            let patch =
                String::from_utf8(stdin_text("patch")?).map_err(|_| anyhow!("the patch on stdin is not UTF-8"))?;
            Tool::ApplyPatch(rn::ApplyPatchArgs { patch })
        }
        ToolAction::Search { pattern, path } => Tool::Search(rn::SearchArgs { pattern, path: start(&path) }),
        ToolAction::Find { glob, path } => Tool::Find(rn::FindArgs { glob, path: start(&path) }),
        ToolAction::SearchFiles { query, path } => Tool::SearchFiles(rn::SearchFilesArgs { query, path: start(&path) }),
        ToolAction::WebFetch { url, max_bytes, text } => {
            let format = if text { rn::WebFetchFormat::Text } else { rn::WebFetchFormat::Markdown };
            Tool::WebFetch(rn::WebFetchArgs { url, max_bytes, format: format as i32 })
        }
    };
    let request = pb::CallToolRequest { run_id, tool: Some(call) };
    let mut stream = client.call_tool(request).await.map_err(tool_error)?.into_inner();
    while let Some(event) = stream.next().await {
        if let Some(Event::Result(result)) = event.map_err(tool_error)?.event {
            print_result(result.result, json);
        }
    }
    Ok(())
}

fn print_result(result: Option<Outcome>, json: bool) {
    match result {
        Some(Outcome::Read(r)) if json => println!(
            "{}",
            json!({ "text": r.text, "first_line": r.first_line, "lines": r.lines, "more": r.more, "binary": r.binary, "bytes": r.bytes })
        ),
        Some(Outcome::Read(r)) if r.binary => println!("(a binary file of {} bytes: not shown)", r.bytes),
        Some(Outcome::Read(r)) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(r.text.as_bytes());
            if r.more {
                let next = r.first_line + r.lines - 1;
                eprintln!("ccctl: more lines follow; read on with --offset {next}");
            }
        }
        Some(Outcome::Write(w)) if json => println!("{}", json!({ "bytes": w.bytes })),
        Some(Outcome::Write(w)) => println!("wrote {} bytes", w.bytes),
        Some(Outcome::Edit(_)) if json => println!("{}", json!({ "edited": true })),
        Some(Outcome::Edit(_)) => println!("edited"),
        Some(Outcome::Patch(p)) if json => println!(
            "{}",
            serde_json::Value::Array(
                p.changes.iter().map(|c| json!({ "path": lossy(&c.path), "change": c.change })).collect()
            )
        ),
        Some(Outcome::Patch(p)) => p.changes.iter().for_each(|c| println!("{} {}", c.change, lossy(&c.path))),
        Some(Outcome::Search(s)) if json => println!(
            "{}",
            json!({ "hits": s.hits.iter().map(|h| json!({ "path": lossy(&h.path), "line": h.line, "text": h.text })).collect::<Vec<_>>(), "truncated": s.truncated })
        ),
        Some(Outcome::Search(s)) => {
            for h in &s.hits {
                println!("{}:{}:{}", lossy(&h.path), h.line, h.text.trim_end_matches('\n'));
            }
            if s.truncated {
                eprintln!("ccctl: more matches than shown; narrow the pattern or --path");
            }
        }
        Some(Outcome::Paths(p)) if json => {
            println!(
                "{}",
                json!({ "paths": p.paths.iter().map(|x| lossy(x)).collect::<Vec<_>>(), "truncated": p.truncated })
            )
        }
        Some(Outcome::Paths(p)) => {
            p.paths.iter().for_each(|x| println!("{}", lossy(x)));
            if p.truncated {
                eprintln!("ccctl: more paths than shown; narrow the query or --path");
            }
        }
        Some(Outcome::WebFetch(f)) if json => println!(
            "{}",
            json!({ "status": f.status, "content_type": f.content_type, "text": f.text, "bytes": f.bytes, "truncated": f.truncated, "location": f.location })
        ),
        Some(Outcome::WebFetch(f)) => {
            eprintln!("ccctl: {} {} ({} bytes)", f.status, f.content_type, f.bytes);
            if !f.location.is_empty() {
                eprintln!("ccctl: redirected to {} (not followed)", f.location);
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(f.text.as_bytes());
            if !f.text.is_empty() && !f.text.ends_with('\n') {
                let _ = out.write_all(b"\n");
            }
            if f.truncated {
                eprintln!("ccctl: the body went on past --max-bytes");
            }
        }
        None => {}
    }
}

/// One line per lease, or a JSON array; a lease carries no secret to print.
fn print_leases(leases: &[cc_proto::common::v1::CredentialLease], json: bool) {
    let time = |t: Option<&cc_proto::Timestamp>| t.map(|t| super::render::time(Some(t)));
    if json {
        let items: Vec<serde_json::Value> = leases
            .iter()
            .map(|l| {
                serde_json::json!({
                    "lease": l.lease_id,
                    "provider": l.provider,
                    "kind": l.kind,
                    "repositories": l.repositories,
                    "permissions": l.permissions,
                    "issued": time(l.issue_time.as_ref()),
                    "expires": time(l.expire_time.as_ref()),
                    "revoked": time(l.revoke_time.as_ref()),
                    "revoke_attempts": l.revoke_attempts,
                    "revoke_note": l.revoke_note,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
        return;
    }
    if leases.is_empty() {
        println!("no credentials");
    }
    for l in leases {
        let revoked = match (time(l.revoke_time.as_ref()), l.revoke_note.as_str()) {
            (Some(t), "") => format!("revoked {t}"),
            (Some(t), note) => format!("revoked {t} ({note})"),
            (None, "") => "live".to_owned(),
            (None, note) => format!("live; last revoke failed: {note}"),
        };
        println!(
            "{} {} {} [{}] {} issued {} expires {}: {revoked}",
            l.lease_id,
            l.provider,
            l.kind,
            l.repositories.join(", "),
            l.permissions.join(","),
            time(l.issue_time.as_ref()).unwrap_or_default(),
            time(l.expire_time.as_ref()).unwrap_or_else(|| "never".into()),
        );
    }
}
