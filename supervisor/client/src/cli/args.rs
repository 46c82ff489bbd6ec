//! ccctl's command line: what each command and option accepts, as clap parses it.
//! What each command does is `super::run`'s.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Control Center client: talks to cc-supervisor over $DATA/sock/api.sock.
#[derive(Parser)]
#[command(name = "ccctl", version, propagate_version = true)]
pub struct Cli {
    /// The supervisor's API socket [default: $DATA/sock/api.sock]
    #[arg(long, global = true, env = "CC_SOCKET")]
    pub(super) socket: Option<PathBuf>,
    /// The data directory [default: /var/lib/control-center as root, else $XDG_DATA_HOME/control-center]
    #[arg(long, global = true, env = "CC_DATA_DIR")]
    pub(super) data_dir: Option<PathBuf>,
    /// Print machine-readable JSON instead of text
    #[arg(long, global = true)]
    pub(super) json: bool,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// The supervisor, its sandbox backend, and a live check of every helper
    Status {
        /// Wait up to this many seconds for a supervisor whose helpers all serve
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
    },
    /// The helpers as the supervisor tracks them
    Helpers {
        #[command(subcommand)]
        action: Option<HelpersAction>,
    },
    /// The event log
    Events {
        /// Keep running and print new events as they are recorded
        #[arg(long)]
        follow: bool,
        /// Only events after this id
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// Write the service unit for systemd or launchd
    Install(InstallArgs),
    /// Workspaces group registered repositories ("default" always exists)
    Workspace {
        #[command(subcommand)]
        action: WorkspaceAction,
    },
    /// Registered checkouts: the person's repositories, which agents never work in directly
    Repo {
        #[command(subcommand)]
        action: RepoAction,
    },
    /// Conversations: copy-on-write copies of registered repositories for agents to work in
    Conversation {
        #[command(subcommand)]
        action: ConversationAction,
    },
    /// The OS sandbox: what sandboxd found, and the envelopes it builds
    Sandbox {
        #[command(subcommand)]
        action: SandboxAction,
    },
    /// The gate's rules, and what it would decide for a command line
    Policy {
        #[command(subcommand)]
        action: super::gate::PolicyAction,
    },
    /// Answer the gate's questions (an ask with no approver connected is a deny)
    Approvals {
        #[command(subcommand)]
        action: super::approvals::ApprovalsAction,
    },
    /// The audit trail in the data directory: verify it, print its head, export it
    Audit {
        #[command(subcommand)]
        action: super::audit::AuditAction,
    },
    /// The tools a run has in a mode
    Tools(super::gate::ToolsArgs),
    /// Runs: an agent's execution in a conversation, with its runner and tools
    Run {
        #[command(subcommand)]
        action: super::runs::RunAction,
    },
    /// Call one of a run's tools (a refusal exits 125: `ccctl: denied: …` or `ccctl: refused: …`)
    Tool {
        /// The run's id
        run: String,
        #[command(subcommand)]
        action: super::runs::ToolAction,
    },
    /// Rigs: microVMs that stay up for a conversation, reached by gated commands
    Rig {
        #[command(subcommand)]
        action: super::rig::RigAction,
    },
    /// Terminals the supervisor hosts: they outlive their clients (detach with `~.`)
    Terminal {
        #[command(subcommand)]
        action: super::terminal::TerminalAction,
    },
    /// The main job: run CMD on a copy of a repository, confined and gated, and exit with its status
    Exec(super::exec::ExecArgs),
    /// Which of the product's layers reach each adapter on this host (from the live
    /// probe), and the test that tries each claim
    Adapters,
    /// The supervisor's configuration
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The checks a person can verify by hand, each with the command that verifies
    /// it: the host's, and with a run's id, probes inside that run's envelope (exits 1
    /// when one fails)
    Diagnose {
        /// A live run to probe
        run: Option<String>,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell) on stdout
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
pub(super) enum SandboxAction {
    /// What sandboxd's probe found (a real test launch of bubblewrap)
    Probe,
    /// Print the envelope (the bubblewrap argv) a run of a conversation would get, or
    /// the one a live run's launches get
    Explain {
        #[arg(long, required_unless_present = "run", conflicts_with = "run")]
        conversation: Option<String>,
        /// A live run: its own registered policy, exactly as its launches see it
        #[arg(long)]
        run: Option<String>,
        #[arg(long, default_value = "default")]
        agent: String,
        /// overlay (Claude Code, ACP) or harness-bash
        #[arg(long, default_value = "harness-bash", value_parser = ["overlay", "harness-bash"])]
        kind: String,
        /// The command inside [default: sh]
        #[arg(last = true)]
        command: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand)]
pub(super) enum WorkspaceAction {
    /// Create a workspace
    New { name: String },
    /// List workspaces, with the GitHub repositories linked to each
    List,
    /// Link a GitHub repository (OWNER/NAME): runs of the workspace may push to it
    LinkRepo { workspace: String, github_repository: String },
    /// Unlink a GitHub repository
    UnlinkRepo { workspace: String, github_repository: String },
    /// The network allowlist of the workspace's runs (on top of the curated base)
    Egress {
        workspace: String,
        #[command(subcommand)]
        action: EgressAction,
    },
}

#[derive(Subcommand)]
pub(super) enum EgressAction {
    /// Add an entry: a name, *.name for the names under it, or an address; :port optional
    Add { entry: String },
    /// Remove an entry
    Rm { entry: String },
    /// List the workspace's entries
    List,
}

#[derive(Subcommand)]
pub(super) enum RepoAction {
    /// Register a checkout (its top level)
    Add {
        path: PathBuf,
        /// [default: the checkout directory's name]
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// List registered checkouts
    List {
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// Unregister a checkout (nothing on disk is touched)
    Rm {
        name: String,
        #[arg(long, default_value = "default")]
        workspace: String,
    },
}

#[derive(Subcommand)]
pub(super) enum ConfigAction {
    /// Read config.toml and the rules files again without ending a run (what
    /// `systemctl reload` and SIGHUP do); an invalid file changes nothing and exits 1
    Reload,
}

#[derive(Subcommand)]
pub(super) enum ConversationAction {
    /// Provision a conversation and print its id
    New {
        /// A registered repository (repeat for several)
        #[arg(long = "repo", required = true)]
        repos: Vec<String>,
        /// reflink (default; refuses filesystems that cannot reflink), copy (full byte
        /// copy), or git-worktree (shares the checkout's objects and refs)
        #[arg(long, default_value = "reflink", value_parser = ["reflink", "copy", "git-worktree"])]
        worktree_backend: String,
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// List conversations
    List {
        /// Only this workspace [default: all]
        #[arg(long)]
        workspace: Option<String>,
    },
    /// Remove a conversation's copies (never the registered checkout)
    Rm { id: String },
    /// Show the agent's changes in a copy (its commits and uncommitted work) without
    /// running anything the agent wrote
    Diff {
        id: String,
        /// The repository, when the conversation has several
        #[arg(long)]
        repo: Option<String>,
        /// Compare with this revision [default: where the copy and the checkout's HEAD part]
        #[arg(long)]
        base: Option<String>,
    },
    /// Fetch the copy's HEAD into a checkout as a branch, without running anything the
    /// agent wrote
    Fetch {
        id: String,
        #[arg(long)]
        repo: Option<String>,
        /// The checkout to fetch into (normally the registered one)
        #[arg(long)]
        into: std::path::PathBuf,
        /// The branch to create or move forward [default: cc/<conversation>]
        #[arg(long)]
        branch: Option<String>,
    },
}

#[derive(Subcommand)]
pub(super) enum HelpersAction {
    /// Stop one helper and start it again; the others are untouched
    Restart {
        /// sandboxd, broker or gateway
        name: String,
    },
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("manager").required(true).args(["systemd", "launchd"])))]
pub(super) struct InstallArgs {
    /// A systemd unit (system-wide, or with --user for this user)
    #[arg(long)]
    pub(super) systemd: bool,
    /// A launchd agent plist (macOS)
    #[arg(long)]
    pub(super) launchd: bool,
    /// With --systemd: a user unit (systemctl --user)
    #[arg(long, requires = "systemd")]
    pub(super) user: bool,
    /// Print the unit and where it would go; write nothing
    #[arg(long)]
    pub(super) dry_run: bool,
}
