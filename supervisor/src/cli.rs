//! cc-supervisor's command line, in the library so that the man page is made from the
//! same definition the binary parses with.

use std::path::PathBuf;

use cc_host::probe::SandboxChoice;
use cc_proto::logging::LogFormat;
use clap::Parser;

/// The Control Center supervisor: spawns and supervises cc-sandboxd, cc-broker and
/// cc-gateway, and serves the client API on $DATA/sock/api.sock.
#[derive(Parser)]
#[command(name = "cc-supervisor", version)]
pub struct Args {
    /// Data directory [default: /var/lib/control-center as root, else $XDG_DATA_HOME/control-center]
    #[arg(long, env = "CC_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Configuration file [default: $DATA/config.toml when it exists]
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// OS sandbox backend: auto (native when the probe passes), native (or refuse to start), off
    #[arg(long, default_value = "auto", value_parser = clap::value_parser!(SandboxChoice))]
    pub sandbox: SandboxChoice,
    /// Log format on stderr: text or json
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(LogFormat))]
    pub log_format: LogFormat,
    /// Directory holding cc-sandboxd, cc-broker and cc-gateway [default: next to this binary]
    #[arg(long)]
    pub helper_dir: Option<PathBuf>,
    /// Stop (as on SIGTERM) when the process that started us exits: `ccctl exec`'s
    /// embedded supervisor never outlives it.
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
}

/// The command line as clap sees it: for the man page.
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}
