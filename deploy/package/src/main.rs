#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Makes what the Debian package ships besides the binaries.
#[derive(Parser)]
#[command(name = "cc-package", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lay out the package's tree under ROOT from the release binaries in BINS
    Stage {
        /// Where the release binaries are
        #[arg(long, default_value = "target/release")]
        bins: PathBuf,
        /// The tree to fill (emptied first)
        #[arg(long, default_value = "target/release/package-root")]
        root: PathBuf,
    },
    /// Write the man pages into DIR/man1, DIR/man5 and DIR/man8
    Man { dir: PathBuf },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Stage { bins, root } => cc_package::stage::stage(&bins, &root).context("cannot stage the package"),
        Command::Man { dir } => cc_package::man::write_all(&dir).context("cannot write the man pages"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cc-package: {e:#}");
            ExitCode::FAILURE
        }
    }
}
