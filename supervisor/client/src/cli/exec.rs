//! `ccctl exec`: the one-shot main job. A supervisor (the running one, or one started
//! for this command and stopped after it), the repository registered, a conversation
//! provisioned, a harness run started, CMD through the run's bash tool (or, with
//! `--adapter claude-code`, a claude-code run given CMD as its prompt), and everything
//! but the registered checkout removed again. The exit status is CMD's; a denial is
//! [`runs::EXIT_DENIED`].

use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow};
use cc_proto::client::ConnectError;
use cc_proto::supervisor::v1 as pb;
use clap::Args;

use super::gate::ModeArg;
use super::runs::{self, Network};
use super::{ExitWith, progress, rpc_error, wait_for_serving};
use crate::{Client, Runs};
use cc_proto::paths::DataDir;
use cc_proto::reasons;

/// How long an embedded supervisor may take until every helper serves.
const EMBEDDED_START: Duration = Duration::from_secs(30);
/// Exit status when Ctrl-C stopped the command (as a shell reports SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Args)]
pub struct ExecArgs {
    /// The repository (any directory inside its checkout) [default: the current directory]
    #[arg(long)]
    repo: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "chat")]
    mode: ModeArg,
    /// `on`: through the run's proxies, to its allowlist (`[egress]`) [default: off for
    /// harness, on for claude-code, whose agent must reach its model]
    #[arg(long, value_enum)]
    network: Option<Network>,
    /// harness: CMD runs in the run's bash; claude-code (or claude-code-nosandbox, or
    /// acp with --agent-command): CMD is the prompt, and the agent works on it in the
    /// run until it answers
    #[arg(long, default_value = "harness")]
    adapter: String,
    /// With --adapter acp: the command that starts the ACP agent over stdio
    #[arg(long, default_value = "")]
    agent_command: String,
    /// reflink (default; refuses a filesystem that cannot reflink), copy (a full byte
    /// copy, for ext4 and the like), or git-worktree
    #[arg(long, default_value = "reflink", value_parser = ["reflink", "copy", "git-worktree"])]
    worktree_backend: String,
    /// Keep the conversation afterwards and print its id
    #[arg(long)]
    keep: bool,
    /// Seconds before the command is killed [default: the supervisor's bash default]
    #[arg(long, default_value_t = 0)]
    timeout: u32,
    #[command(flatten)]
    limits: super::limits::LimitArgs,
    /// The command, run by bash in the envelope (arguments are quoted, not re-split)
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The checkout's top level, resolved. `given`: the person named it with `--repo`
/// (telling them to pass --repo would be no help).
fn checkout_root(path: &Path, given: bool) -> anyhow::Result<PathBuf> {
    let path = std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let fix = if given { "name a directory inside a checkout" } else { "pass --repo" };
    let repo = git2::Repository::discover(&path)
        .map_err(|e| anyhow!("{} is not inside a git checkout ({}): {fix}", path.display(), e.message()))?;
    let top =
        repo.workdir().ok_or_else(|| anyhow!("{} is a bare repository: exec needs a checkout", path.display()))?;
    std::fs::canonicalize(top).with_context(|| format!("cannot resolve {}", top.display()))
}

fn device(path: &Path) -> Option<u64> {
    path.ancestors().find_map(|p| std::fs::metadata(p).ok()).map(|m| m.dev())
}

/// A data dir on the repository's volume, so that reflink copies can work: the default
/// one when it is there, else `.control-center-<uid>` at the top of that volume.
fn data_dir_for(repo: &Path) -> anyhow::Result<DataDir> {
    let default = DataDir::locate(None)?;
    let repo_dev = device(repo);
    if device(default.root()) == repo_dev {
        return Ok(default);
    }
    let top = repo.ancestors().take_while(|p| device(p) == repo_dev).last().unwrap_or(repo);
    let uid = nix::unistd::geteuid().as_raw();
    Ok(DataDir::locate(Some(&top.join(format!(".control-center-{uid}"))))?)
}

/// A supervisor started for this command: it stops when we stop it, or when we die.
struct Embedded {
    child: tokio::process::Child,
}

impl Embedded {
    async fn start(data: &DataDir) -> anyhow::Result<Self> {
        data.prepare()?;
        let exe = std::env::current_exe().context("cannot tell where ccctl is")?;
        let program = exe.with_file_name("cc-supervisor");
        let log_path = data.root().join("exec-supervisor.log");
        // Only ours to read: the data directory is searchable by the service user.
        let log = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let child = tokio::process::Command::new(&program)
            .arg("--data-dir")
            .arg(data.root())
            .arg("--exit-with-parent")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let mut embedded = Embedded { child };
        let api = data.api_socket();
        let serving = tokio::select! {
            status = wait_for_serving(&api, data, EMBEDDED_START) => status.ok(),
            _ = embedded.child.wait() => None,
        };
        match serving {
            Some(s) if s.get_ref().helpers.iter().all(|h| h.serving) => Ok(embedded),
            _ => {
                embedded.stop().await;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
                Err(anyhow!("the embedded supervisor did not come up (see {}): {last}", log_path.display()))
            }
        }
    }

    async fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

async fn register(client: &mut Client, repo: &Path) -> anyhow::Result<String> {
    let path = repo.as_os_str().as_encoded_bytes().to_vec();
    let request = pb::ListRepositoriesRequest { workspace_id: "default".into() };
    let list = client.repositories.list_repositories(request).await.map_err(rpc_error)?;
    if let Some(known) = list.into_inner().repositories.into_iter().find(|r| r.resolved_path == path || r.path == path)
    {
        return Ok(known.name);
    }
    let base: String = repo
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
                .collect()
        })
        .filter(|n: &String| !n.is_empty())
        .unwrap_or_else(|| "repo".into());
    for attempt in 1..=20 {
        let name = if attempt == 1 { base.clone() } else { format!("{base}-{attempt}") };
        let request = pb::CreateRepositoryRequest { workspace_id: "default".into(), path: path.clone(), name };
        match client.repositories.create_repository(request).await {
            Ok(r) => return Ok(r.into_inner().repository.unwrap_or_default().name),
            // The name is another checkout's: try the next one.
            Err(s) if crate::refusal::is(&s, reasons::NAME_TAKEN) => continue,
            Err(s) => return Err(rpc_error(s)),
        }
    }
    Err(anyhow!("cannot find a free name for {} among registered repositories", repo.display()))
}

/// Everything exec made, to be undone whatever happens.
#[derive(Default)]
struct Made {
    conversation: Option<String>,
    run: Option<String>,
}

async fn main_job(
    args: &ExecArgs,
    adapter: cc_proto::common::v1::Adapter,
    client: &mut Client,
    runs_client: &mut Runs,
    repo: &Path,
    made: &mut Made,
) -> anyhow::Result<u8> {
    let name = register(client, repo).await?;
    let backend = super::words::worktree_backend(&args.worktree_backend) as i32;
    let request =
        pb::CreateConversationRequest { workspace_id: "default".into(), repository_names: vec![name], backend };
    let stream = client.conversations.create_conversation(request).await.map_err(rpc_error)?.into_inner();
    let conversation = progress::follow(stream).await?;
    made.conversation = Some(conversation.conversation_id.clone());
    let request = pb::StartRunRequest {
        conversation_id: conversation.conversation_id,
        agent: "default".into(),
        mode: args.mode.wire(),
        adapter: adapter as i32,
        agent_command: args.agent_command.clone(),
        network: args.network.unwrap_or(if adapter.has_agent() { Network::On } else { Network::Off }) == Network::On,
        limits: args.limits.to_proto(),
        model_budget_tokens: 0,
        forwards: vec![],
    };
    let run = runs_client.start_run(request).await.map_err(rpc_error)?.into_inner().run.unwrap_or_default();
    made.run = Some(run.run_id.clone());
    if adapter.has_agent() {
        let prompt = pb::PromptRunRequest {
            run_id: run.run_id.clone(),
            prompt: args.command.join(" "),
            timeout_seconds: args.timeout,
        };
        let outcome = tokio::select! {
            stream = runs_client.prompt_run(prompt) => {
                runs::follow_prompt(stream.map_err(rpc_error)?.into_inner(), false).await?
            }
            _ = tokio::signal::ctrl_c() => return Err(ExitWith::error(EXIT_INTERRUPTED, "interrupted: the agent was stopped")),
        };
        return outcome.status();
    }
    let line = runs::command_line(&args.command)?;
    let outcome = tokio::select! {
        outcome = runs::bash(runs_client, Some(client.sandbox.clone()), &run.run_id, line, args.timeout) => outcome?,
        _ = tokio::signal::ctrl_c() => return Err(ExitWith::error(EXIT_INTERRUPTED, "interrupted: the command was killed")),
    };
    outcome.status()
}

async fn clean_up(args: &ExecArgs, client: &mut Client, runs_client: &mut Runs, made: &Made) -> anyhow::Result<()> {
    if let Some(run) = &made.run {
        let _ = runs_client.stop_run(pb::StopRunRequest { run_id: run.clone() }).await;
    }
    if let Some(id) = &made.conversation {
        if args.keep {
            eprintln!("ccctl: kept conversation {id}");
            eprintln!("ccctl: {}", crate::handback::AGENT_CONTROLLED);
        } else {
            let request = pb::DeleteConversationRequest { conversation_id: id.clone() };
            client.conversations.delete_conversation(request).await.map_err(rpc_error)?;
        }
    }
    Ok(())
}

pub async fn exec(args: ExecArgs, socket: Option<PathBuf>, data: Option<DataDir>) -> anyhow::Result<()> {
    // Refused before anything is registered or made.
    let adapter = super::words::adapter(&args.adapter)?;
    let repo = checkout_root(args.repo.as_deref().unwrap_or(Path::new(".")), args.repo.is_some())?;
    let data = match data {
        Some(d) => d,
        None if socket.is_some() => DataDir::locate(None)?,
        None => match DataDir::locate(None) {
            // The running supervisor, when there is one at the default place.
            Ok(d) if std::os::unix::net::UnixStream::connect(d.api_socket()).is_ok() => d,
            _ => data_dir_for(&repo)?,
        },
    };
    let socket = socket.unwrap_or_else(|| data.api_socket());
    let (channel, mut embedded) = match cc_proto::client::connect(&socket).await {
        Ok(channel) => (channel, None),
        Err(ConnectError::NotListening { .. }) => {
            let embedded = Embedded::start(&data).await?;
            (cc_proto::client::connect(&socket).await?, Some(embedded))
        }
        Err(e) => return Err(e.into()),
    };
    let mut supervisor = Client::new(channel);
    let mut runs_client = supervisor.runs.clone();
    let mut made = Made::default();
    let outcome = main_job(&args, adapter, &mut supervisor, &mut runs_client, &repo, &mut made).await;
    let cleaned = clean_up(&args, &mut supervisor, &mut runs_client, &made).await;
    if let Some(embedded) = embedded.as_mut() {
        embedded.stop().await;
    }
    let code = outcome?;
    cleaned?;
    match code {
        0 => Ok(()),
        code => Err(ExitWith::silent(code)),
    }
}
