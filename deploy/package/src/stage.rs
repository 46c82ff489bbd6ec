//! The tree `cargo deb` packs, laid out as it installs: the binaries together under
//! /usr/lib/control-center (each finds the others next to itself), symlinks on PATH,
//! the system unit filled in for those paths, the man pages and the completions.

use std::io;
use std::path::{Path, PathBuf};

use cc_client::install::{self, Target};

/// Where the package puts the binaries, and the data directory the unit names.
pub const LIB_DIR: &str = "/usr/lib/control-center";
pub const DATA_DIR: &str = "/var/lib/control-center";

/// Every binary the service runs. cc-vm-agent is not here: it runs inside a microVM's
/// image, which `deploy/microvm/build-image` makes.
pub const BINARIES: [&str; 9] =
    ["ccctl", "cc-supervisor", "cc-sandboxd", "cc-init", "cc-broker", "cc-gateway", "cc-runner", "cc-hook", "cc-mcp"];

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("cannot strip {path} ({why}); install binutils")]
    Strip { path: PathBuf, why: String },
    #[error("{path}: {source}; build the release binaries first (cargo build-product)")]
    MissingBinary { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Unit(#[from] install::InstallError),
    #[error(transparent)]
    Man(#[from] crate::man::ManError),
}

/// Fills `root` (emptied first) from the binaries in `bins`.
pub fn stage(bins: &Path, root: &Path) -> Result<(), StageError> {
    let write = |path: &Path| {
        let path = path.to_owned();
        move |source| StageError::Write { path, source }
    };
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(write(root))?;
    }
    let lib = root.join(LIB_DIR.trim_start_matches('/'));
    std::fs::create_dir_all(&lib).map_err(write(&lib))?;
    for name in BINARIES {
        let from = bins.join(name);
        let to = lib.join(name);
        std::fs::copy(&from, &to).map_err(|source| StageError::MissingBinary { path: from, source })?;
        strip(&to)?;
    }
    for (dir, name) in [("usr/bin", "ccctl"), ("usr/sbin", "cc-supervisor")] {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).map_err(write(&dir))?;
        // Relative, so that it resolves in this tree too (cargo deb reads through it).
        let link = dir.join(name);
        std::os::unix::fs::symlink(Path::new("../lib/control-center").join(name), &link).map_err(write(&link))?;
    }
    let unit =
        install::render(Target::SystemdSystem, &Path::new(LIB_DIR).join("cc-supervisor"), Path::new(DATA_DIR), None)?;
    let units = root.join("lib/systemd/system");
    std::fs::create_dir_all(&units).map_err(write(&units))?;
    let unit_path = units.join(install::SYSTEMD_UNIT_NAME);
    std::fs::write(&unit_path, unit.contents).map_err(write(&unit_path))?;
    crate::man::write_all(&root.join("usr/share/man"))?;
    for (shell, dir, file) in [
        (clap_complete::Shell::Bash, "usr/share/bash-completion/completions", "ccctl"),
        (clap_complete::Shell::Zsh, "usr/share/zsh/vendor-completions", "_ccctl"),
        (clap_complete::Shell::Fish, "usr/share/fish/vendor_completions.d", "ccctl.fish"),
    ] {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).map_err(write(&dir))?;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cc_client::cli::command(), "ccctl", &mut script);
        let path = dir.join(file);
        std::fs::write(&path, script).map_err(write(&path))?;
    }
    Ok(())
}

/// The release profile keeps line tables (for backtraces in development); the package
/// ships without them (symbol names stay, for backtraces): 600 MB of binaries become a
/// fifth of that.
fn strip(path: &Path) -> Result<(), StageError> {
    let failed = |why: String| StageError::Strip { path: path.to_owned(), why };
    let status = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg(path)
        .status()
        .map_err(|e| failed(e.to_string()))?;
    if status.success() { Ok(()) } else { Err(failed(status.to_string())) }
}
