//! `ccctl`, the command-line client. Every command has `--help` and `--json`; every
//! error is one line, `ccctl: …`, with a non-zero exit code.

mod approvals;
mod args;
mod audit;
mod diagnose;
mod errors;
mod exec;
mod gate;
mod limits;
mod models;
mod progress;
mod render;
mod rig;
mod runs;
mod terminal;
mod timings;
mod words;

pub use args::Cli;
use args::{
    Command, ConfigAction, ConversationAction, EgressAction, HelpersAction, InstallArgs, RepoAction, SandboxAction,
    WorkspaceAction,
};
pub(crate) use errors::{ExitWith, rpc_error};
use errors::{fail, say_error};

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use cc_proto::client::ConnectError;
use cc_proto::supervisor::v1 as pb;
use clap::Parser;
use tokio_stream::StreamExt;

use crate::install::{self, Target};
use crate::{Client, Gate, Runs};
use cc_proto::paths::DataDir;

/// ccctl's command line as clap sees it: for completions and the man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn print_completions(shell: clap_complete::Shell) {
    // Made whole first: clap_complete panics on a failed write.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "ccctl", &mut script);
    print!("{}", String::from_utf8_lossy(&script));
}

/// The status a shell reports for a process killed by SIGPIPE.
const EXIT_BROKEN_PIPE: i32 = 141;

/// `ccctl … | head`: when the reader goes away, end quietly as `cat` would, not with a
/// panic and a backtrace. Rust ignores SIGPIPE (restoring its default would also kill us
/// on a write to a closed gRPC socket), so `println!` panics on EPIPE instead; this hook
/// turns exactly that panic into the shell's SIGPIPE status and leaves every other to
/// the default hook.
fn end_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        default(info);
    }));
}

/// Runs ccctl with the process's arguments.
pub fn main() -> ExitCode {
    timings::started();
    end_quietly_on_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid usage").trim_start_matches("error: ");
            // Not parsed, so --json is looked for by hand.
            let json = std::env::args().skip(1).take_while(|a| a != "--").any(|a| a == "--json");
            say_error(&format!("{} (see ccctl --help)", render::one_line(first)), None, 2, json);
            return ExitCode::from(2);
        }
    };
    // Needs no data directory, no supervisor and no runtime: it works before set-up.
    if let Command::Completions { shell } = cli.command {
        print_completions(shell);
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(anyhow!("cannot start the async runtime: {e}"), cli.json),
    };
    let json = cli.json;
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e, json),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // With --socket, no data directory needs to be found (HOME may be unset).
    let data = match (&cli.socket, &cli.data_dir) {
        (Some(socket), None) => DataDir::locate(Some(socket.parent().and_then(|p| p.parent()).unwrap_or(socket)))?,
        _ => DataDir::locate(cli.data_dir.as_deref())?,
    };
    let explicit_data_dir = cli.data_dir.is_some();
    let socket = cli.socket.clone().unwrap_or_else(|| data.api_socket());
    match cli.command {
        Command::Status { wait } => {
            let status = match wait {
                None => connect(&socket, &data)
                    .await?
                    .system
                    .get_status(pb::GetStatusRequest {})
                    .await
                    .map_err(rpc_error)?,
                Some(seconds) => wait_for_serving(&socket, &data, Duration::from_secs(seconds)).await?,
            };
            render::status(&status.into_inner(), cli.json);
        }
        Command::Helpers { action: None } => {
            let list = connect(&socket, &data)
                .await?
                .system
                .list_helpers(pb::ListHelpersRequest {})
                .await
                .map_err(rpc_error)?;
            render::helpers(&list.into_inner().helpers, cli.json);
        }
        Command::Helpers { action: Some(HelpersAction::Restart { name }) } => {
            let reply = connect(&socket, &data)
                .await?
                .system
                .restart_helper(pb::RestartHelperRequest { name })
                .await
                .map_err(rpc_error)?;
            render::restarted(&reply.into_inner(), cli.json);
        }
        Command::Events { follow, since } => {
            let mut stream = connect(&socket, &data)
                .await?
                .system
                .watch_events(pb::WatchEventsRequest { since, follow })
                .await
                .map_err(rpc_error)?
                .into_inner();
            while let Some(event) = stream.next().await {
                if let Some(event) = event.map_err(rpc_error)?.event {
                    render::event(&event, cli.json);
                }
            }
        }
        Command::Install(args) => install_unit(&args, &data, explicit_data_dir, cli.json)?,
        Command::Workspace { action } => {
            let mut client = connect(&socket, &data).await?;
            match action {
                WorkspaceAction::New { name } => {
                    let request = pb::CreateWorkspaceRequest { workspace_id: name };
                    let w = client.workspaces.create_workspace(request).await.map_err(rpc_error)?.into_inner();
                    render::workspaces(&w.workspace.into_iter().collect::<Vec<_>>(), cli.json);
                }
                WorkspaceAction::List => {
                    let list =
                        client.workspaces.list_workspaces(pb::ListWorkspacesRequest {}).await.map_err(rpc_error)?;
                    render::workspaces(&list.into_inner().workspaces, cli.json);
                }
                WorkspaceAction::LinkRepo { workspace, github_repository } => {
                    let request = pb::LinkGitHubRepositoryRequest { workspace_id: workspace, github_repository };
                    let w = client.workspaces.link_git_hub_repository(request).await.map_err(rpc_error)?.into_inner();
                    render::workspaces(&w.workspace.into_iter().collect::<Vec<_>>(), cli.json);
                }
                WorkspaceAction::UnlinkRepo { workspace, github_repository } => {
                    let request = pb::UnlinkGitHubRepositoryRequest { workspace_id: workspace, github_repository };
                    let w = client.workspaces.unlink_git_hub_repository(request).await.map_err(rpc_error)?.into_inner();
                    render::workspaces(&w.workspace.into_iter().collect::<Vec<_>>(), cli.json);
                }
                WorkspaceAction::Egress { workspace, action } => {
                    let w = match action {
                        EgressAction::Add { entry } => {
                            let request = pb::AddEgressEntryRequest { workspace_id: workspace, entry };
                            client.workspaces.add_egress_entry(request).await.map_err(rpc_error)?.into_inner().workspace
                        }
                        EgressAction::Rm { entry } => {
                            let request = pb::RemoveEgressEntryRequest { workspace_id: workspace, entry };
                            client
                                .workspaces
                                .remove_egress_entry(request)
                                .await
                                .map_err(rpc_error)?
                                .into_inner()
                                .workspace
                        }
                        EgressAction::List => {
                            let list = client.workspaces.list_workspaces(pb::ListWorkspacesRequest {}).await;
                            let found = list.map_err(rpc_error)?.into_inner().workspaces;
                            let w = found.into_iter().find(|w| w.workspace_id == workspace);
                            Some(w.with_context(|| format!("no workspace named {workspace:?}"))?)
                        }
                    };
                    let entries = w.map(|w| w.egress_allowlist).unwrap_or_default();
                    if cli.json {
                        println!("{}", serde_json::json!(entries));
                    } else {
                        entries.iter().for_each(|e| println!("{e}"));
                    }
                }
            }
        }
        Command::Repo { action } => {
            let mut client = connect(&socket, &data).await?;
            match action {
                RepoAction::Add { path, name, workspace } => {
                    // The supervisor does not share our working directory.
                    let path =
                        std::path::absolute(&path).with_context(|| format!("cannot resolve {}", path.display()))?;
                    let request = pb::CreateRepositoryRequest {
                        workspace_id: workspace,
                        path: path.as_os_str().as_encoded_bytes().to_vec(),
                        name: name.unwrap_or_default(),
                    };
                    let repo = client.repositories.create_repository(request).await.map_err(rpc_error)?.into_inner();
                    render::repos(&repo.repository.into_iter().collect::<Vec<_>>(), cli.json);
                }
                RepoAction::List { workspace } => {
                    let request = pb::ListRepositoriesRequest { workspace_id: workspace };
                    let list = client.repositories.list_repositories(request).await.map_err(rpc_error)?;
                    render::repos(&list.into_inner().repositories, cli.json);
                }
                RepoAction::Rm { name, workspace } => {
                    client
                        .repositories
                        .delete_repository(pb::DeleteRepositoryRequest { workspace_id: workspace, name: name.clone() })
                        .await
                        .map_err(rpc_error)?;
                    render::done(&format!("unregistered {name}"), cli.json);
                }
            }
        }
        Command::Sandbox { action } => {
            let mut client = connect(&socket, &data).await?;
            match action {
                SandboxAction::Probe => {
                    let probe = client.sandbox.get_probe(pb::GetProbeRequest {}).await.map_err(rpc_error)?.into_inner();
                    render::sandbox_probe(&probe, cli.json);
                }
                SandboxAction::Explain { conversation, run, agent, kind, command } => {
                    let request = pb::ExplainEnvelopeRequest {
                        conversation_id: conversation.unwrap_or_default(),
                        run_id: run.unwrap_or_default(),
                        agent,
                        kind: words::envelope_kind(&kind) as i32,
                        argv: command.iter().map(|a| a.as_encoded_bytes().to_vec()).collect(),
                    };
                    let explained = client.sandbox.explain_envelope(request).await.map_err(rpc_error)?.into_inner();
                    render::sandbox_explain(&explained, cli.json);
                }
            }
        }
        Command::Diagnose { run } => diagnose::diagnose(connect(&socket, &data).await?, run, cli.json).await?,
        Command::Completions { shell } => print_completions(shell),
        Command::Adapters => {
            let mut client = connect(&socket, &data).await?;
            let matrix =
                client.sandbox.list_adapters(pb::ListAdaptersRequest {}).await.map_err(rpc_error)?.into_inner();
            render::adapters(&matrix, cli.json);
        }
        Command::Config { action: ConfigAction::Reload } => {
            let mut client = connect(&socket, &data).await?;
            let reloaded =
                client.system.reload_config(pb::ReloadConfigRequest {}).await.map_err(rpc_error)?.into_inner();
            render::reloaded(&reloaded, cli.json);
        }
        Command::Policy { action } => gate::policy(connect_gate(&socket, &data).await?, action, cli.json).await?,
        Command::Audit { action } => audit::audit(&data.audit_dir(), action, cli.json)?,
        Command::Approvals { action } => {
            approvals::approvals(connect_gate(&socket, &data).await?, action, cli.json).await?
        }
        Command::Tools(args) => gate::tools(connect_gate(&socket, &data).await?, args, cli.json).await?,
        Command::Run { action: runs::RunAction::Events { id, follow } } => {
            let mut client = connect(&socket, &data).await?;
            // An unknown run is an error, not an empty log that looks like a quiet run.
            client.runs.get_run(pb::GetRunRequest { run_id: id.clone() }).await.map_err(rpc_error)?;
            let mut stream = client
                .system
                .watch_events(pb::WatchEventsRequest { since: 0, follow })
                .await
                .map_err(rpc_error)?
                .into_inner();
            let subject = format!("run:{id}");
            while let Some(event) = stream.next().await {
                match event.map_err(rpc_error)?.event {
                    Some(e) if e.subject == subject => render::run_event(&e, cli.json),
                    _ => {}
                }
            }
        }
        Command::Run { action } => runs::run(connect_runs(&socket, &data).await?, action, cli.json).await?,
        Command::Tool { run, action } => runs::tool(connect_runs(&socket, &data).await?, run, action, cli.json).await?,
        Command::Rig { action } => rig::rig(connect(&socket, &data).await?.rigs, action, cli.json).await?,
        Command::Terminal { action } => {
            terminal::terminal(connect(&socket, &data).await?.terminals, action, cli.json).await?
        }
        Command::Exec(args) => {
            let socket = cli.socket.is_some().then_some(socket);
            exec::exec(args, socket, cli.data_dir.is_some().then_some(data)).await?
        }
        Command::Conversation { action } => {
            let mut client = connect(&socket, &data).await?;
            match action {
                ConversationAction::New { repos, worktree_backend, workspace } => {
                    let backend = words::worktree_backend(&worktree_backend) as i32;
                    let request =
                        pb::CreateConversationRequest { workspace_id: workspace, repository_names: repos, backend };
                    let stream =
                        client.conversations.create_conversation(request).await.map_err(rpc_error)?.into_inner();
                    let conversation = progress::follow(stream).await?;
                    render::created(&conversation, cli.json);
                }
                ConversationAction::List { workspace } => {
                    let request = pb::ListConversationsRequest { workspace_id: workspace.unwrap_or_default() };
                    let list = client.conversations.list_conversations(request).await.map_err(rpc_error)?.into_inner();
                    render::conversations(&list.conversations, cli.json);
                    if !cli.json && !list.conversations.is_empty() {
                        eprintln!("ccctl: {}", crate::handback::AGENT_CONTROLLED);
                    }
                }
                ConversationAction::Diff { id, repo, base } => {
                    let repo = conversation_repo(&mut client, &id, repo.as_deref()).await?;
                    let (copy, checkout) = (path_of(&repo.path), path_of(&repo.source_resolved));
                    let diff =
                        tokio::task::spawn_blocking(move || crate::handback::diff(&copy, &checkout, base.as_deref()))
                            .await??;
                    use std::io::Write;
                    std::io::stdout().write_all(&diff)?;
                }
                ConversationAction::Fetch { id, repo, into, branch } => {
                    let conversation = find_conversation(&mut client, &id).await?;
                    if words::is_git_worktree(conversation.backend) {
                        anyhow::bail!(
                            "conversation {id} is a git worktree of the registered repository: its commits are \
                             already there, on its cc/ branch"
                        );
                    }
                    let repo = conversation_repo(&mut client, &id, repo.as_deref()).await?;
                    let branch = branch.unwrap_or_else(|| format!("cc/{}", conversation.conversation_id));
                    let copy = path_of(&repo.path);
                    let fetched =
                        tokio::task::spawn_blocking(move || crate::handback::fetch(&copy, &into, &branch)).await??;
                    render::done(&format!("fetched {} into branch {}", fetched.commit, fetched.branch), cli.json);
                }
                ConversationAction::Rm { id } => {
                    let request = pb::DeleteConversationRequest { conversation_id: id };
                    let removed = client.conversations.delete_conversation(request).await.map_err(rpc_error)?;
                    let removed = removed.into_inner().conversation.unwrap_or_default();
                    let kept = if words::is_git_worktree(removed.backend) {
                        " (its cc/ branch is kept in the registered repository)"
                    } else {
                        ""
                    };
                    render::done(&format!("removed conversation {}{kept}", removed.conversation_id), cli.json);
                }
            }
        }
    }
    Ok(())
}

async fn find_conversation(client: &mut Client, id: &str) -> anyhow::Result<pb::Conversation> {
    let request = pb::ListConversationsRequest { workspace_id: String::new() };
    let list = client.conversations.list_conversations(request).await.map_err(rpc_error)?.into_inner();
    list.conversations
        .into_iter()
        .find(|c| c.conversation_id == id)
        .ok_or_else(|| anyhow::anyhow!("no conversation {:?}", id.chars().take(64).collect::<String>()))
}

/// The conversation's repository named `name`, or its only one.
async fn conversation_repo(
    client: &mut Client,
    id: &str,
    name: Option<&str>,
) -> anyhow::Result<pb::ConversationRepository> {
    let repos = find_conversation(client, id).await?.repositories;
    let names: Vec<String> = repos.iter().map(|r| r.name.clone()).collect();
    match name {
        Some(name) => repos.into_iter().find(|r| r.name == name).ok_or_else(|| {
            anyhow::anyhow!("conversation {id} has no repository {name:?} (it has {})", names.join(", "))
        }),
        None if repos.len() == 1 => Ok(repos.into_iter().next().expect("one")),
        None => {
            anyhow::bail!("conversation {id} has several repositories ({}): name one with --repo", names.join(", "))
        }
    }
}

fn path_of(bytes: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)).to_owned()
}

async fn connect(socket: &std::path::Path, data: &DataDir) -> anyhow::Result<Client> {
    Ok(Client::new(connect_channel(socket, data).await?))
}

async fn connect_gate(socket: &std::path::Path, data: &DataDir) -> anyhow::Result<Gate> {
    Ok(connect(socket, data).await?.gate)
}

async fn connect_runs(socket: &std::path::Path, data: &DataDir) -> anyhow::Result<Runs> {
    Ok(connect(socket, data).await?.runs)
}

async fn connect_channel(socket: &std::path::Path, data: &DataDir) -> anyhow::Result<tonic::transport::Channel> {
    cc_proto::client::connect(socket).await.map_err(|e| match e {
        ConnectError::NotListening { path } => anyhow!(
            "no supervisor is listening on {}; start one with `cc-supervisor --data-dir {}`",
            path.display(),
            data.root().display()
        ),
        other => other.into(),
    })
}

/// Polls until a supervisor answers with every helper serving, or `limit` passes (then
/// the last status, or the connection error, is the answer).
async fn wait_for_serving(
    socket: &std::path::Path,
    data: &DataDir,
    limit: Duration,
) -> anyhow::Result<tonic::Response<pb::GetStatusResponse>> {
    let deadline = Instant::now() + limit;
    loop {
        let attempt =
            async { connect(socket, data).await?.system.get_status(pb::GetStatusRequest {}).await.map_err(rpc_error) };
        let result = attempt.await;
        let all_serving = result.as_ref().is_ok_and(|s| s.get_ref().helpers.iter().all(|h| h.serving));
        if all_serving || Instant::now() >= deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn install_unit(args: &InstallArgs, data: &DataDir, explicit_data_dir: bool, json: bool) -> anyhow::Result<()> {
    let target = match (args.systemd, args.user) {
        (true, false) => Target::SystemdSystem,
        (true, true) => Target::SystemdUser,
        (false, true) => anyhow::bail!("--user goes with --systemd (a launchd agent is always the user's)"),
        (false, false) => Target::Launchd,
    };
    let exe = std::env::current_exe().context("cannot tell where ccctl is")?;
    let supervisor = exe.with_file_name("cc-supervisor");
    if !supervisor.is_file() {
        return Err(install::InstallError::MissingSupervisor(supervisor).into());
    }
    let data_dir = match target {
        Target::SystemdSystem if !explicit_data_dir => PathBuf::from(cc_proto::paths::ROOT_DATA_DIR),
        Target::SystemdSystem => data.root().to_owned(),
        Target::SystemdUser | Target::Launchd => data.root().to_owned(),
    };
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let unit = install::render(target, &supervisor, &data_dir, home.as_deref())?;
    if !args.dry_run {
        install::write(&unit)?;
    }
    render::installed(&unit, args.dry_run, json);
    Ok(())
}
