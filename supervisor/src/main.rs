#![forbid(unsafe_code)]

use std::process::ExitCode;

use cc_proto::helper::Shutdown;
use cc_proto::logging;
use cc_supervisor::cli::Args;
use cc_supervisor::daemon::{self, DaemonOptions};
use clap::Parser;

fn main() -> ExitCode {
    // Before anything of ours is open: what our parent leaked stays with it.
    cc_proto::hardening::close_inherited_descriptors();
    // 022 whoever started us: runs (the service user, as root) must reach what the
    // supervisor and its helpers make for them (copies, configs, sockets' directories),
    // and a service manager's UMask=0077 broke every run. What is private is made
    // private on purpose (the data directory 0700, state.db and its side files 0600).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let args = Args::parse();
    logging::init(args.log_format, "info");
    // The supervisor holds every helper's secret: no same-uid process may ptrace it.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("cc-supervisor: cannot make the process non-dumpable: {e}");
        return ExitCode::FAILURE;
    }
    if args.exit_with_parent {
        let parent = nix::unistd::getppid();
        if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
            eprintln!("cc-supervisor: cannot ask to stop with the parent: {e}");
            return ExitCode::FAILURE;
        }
        // A parent that died before PDEATHSIG was set has been replaced by init.
        if nix::unistd::getppid() != parent || parent.as_raw() == 1 {
            eprintln!("cc-supervisor: the process that started us is gone: exiting");
            return ExitCode::FAILURE;
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cc-supervisor: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = DaemonOptions {
        data_dir: args.data_dir,
        config: args.config,
        sandbox: args.sandbox,
        log_format: args.log_format,
        helper_dir: args.helper_dir,
    };
    let result = runtime.block_on(async {
        // Installed first: a SIGTERM at any point of start-up is a clean stop.
        let shutdown = match Shutdown::install() {
            Ok(s) => s,
            Err(e) => return Err(format!("cannot install signal handlers: {e}")),
        };
        daemon::run(options, shutdown.wait()).await.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cc-supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}
