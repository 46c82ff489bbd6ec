//! Where everything lives under the data directory (DESIGN.md §3).

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("no data directory given and neither XDG_DATA_HOME nor HOME is set: pass --data-dir")]
    NoDefault,
    #[error("cannot use {path} as the data directory: {source}; choose another with --data-dir")]
    Unusable { path: PathBuf, source: io::Error },
    #[error("{path} is not a directory; choose another with --data-dir")]
    NotADirectory { path: PathBuf },
    #[error(
        "the data directory's path {0:?} is not UTF-8 (the helpers are told it in JSON): choose another with --data-dir"
    )]
    NotUtf8(PathBuf),
    #[error(
        "data directory {path} is owned by uid {owner}, not by us (uid {us}): refusing to use it; choose another with --data-dir"
    )]
    NotOurs { path: PathBuf, owner: u32, us: u32 },
    #[error("data directory {path} is not writable: {source}; choose another with --data-dir")]
    NotWritable { path: PathBuf, source: io::Error },
}

/// The data directory and the well-known paths inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// `explicit`, or as root [`ROOT_DATA_DIR`], or `$XDG_DATA_HOME/control-center`, or
    /// `~/.local/share/control-center`, made absolute (helpers and sockets must not depend on our working directory).
    pub fn locate(explicit: Option<&Path>) -> Result<Self, DataDirError> {
        let root = match explicit {
            Some(p) => p.to_owned(),
            None => default_root().ok_or(DataDirError::NoDefault)?,
        };
        let root =
            std::path::absolute(&root).map_err(|source| DataDirError::Unusable { path: root.clone(), source })?;
        if root.to_str().is_none() {
            return Err(DataDirError::NotUtf8(root));
        }
        Ok(Self { root })
    }

    /// Creates the directory (0700) when missing, and checks that it is a directory we
    /// own that nobody else can write: its config names programs we run. A directory of
    /// ours that others can read or write is tightened to 0700. Writability is proven by the lock.
    pub fn prepare(&self) -> Result<(), DataDirError> {
        let unusable = |source| DataDirError::Unusable { path: self.root.clone(), source };
        if !self.root.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root).map_err(unusable)?;
        }
        let meta = std::fs::metadata(&self.root).map_err(unusable)?;
        if !meta.is_dir() {
            return Err(DataDirError::NotADirectory { path: self.root.clone() });
        }
        let us = nix::unistd::geteuid().as_raw();
        if meta.uid() != us {
            return Err(DataDirError::NotOurs { path: self.root.clone(), owner: meta.uid(), us });
        }
        // Search permission for others is allowed: as root, runs' envelopes (launched as
        // the service user) must reach their directories inside.
        if meta.mode() & 0o066 != 0 {
            std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
                .map_err(|source| DataDirError::NotWritable { path: self.root.clone(), source })?;
        }
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The audit trail's directory (`cc-audit`).
    pub fn audit_dir(&self) -> PathBuf {
        self.root.join("audit")
    }

    pub fn state_db(&self) -> PathBuf {
        self.root.join("state.db")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("supervisor.lock")
    }
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn sock_dir(&self) -> PathBuf {
        self.root.join("sock")
    }
    pub fn api_socket(&self) -> PathBuf {
        self.sock_dir().join("api.sock")
    }
    pub fn helper_socket(&self, helper: &str) -> PathBuf {
        self.sock_dir().join(format!("{helper}.sock"))
    }
    pub fn conversations_dir(&self) -> PathBuf {
        self.root.join("conversations")
    }
    /// `conversations/<id>`; the id is one we generated.
    pub fn conversation_dir(&self, id: &str) -> PathBuf {
        self.conversations_dir().join(id)
    }
    /// `gateway/runs/<run>`: the directory of the run's gateway sockets, bound into its
    /// envelopes (the directory, so that a socket made again by a restarted gateway is
    /// seen there). The run id is one we generated.
    pub fn gateway_run_dir(&self, run: &str) -> PathBuf {
        self.root.join("gateway").join("runs").join(run)
    }
    /// `workspaces/<ws>/attachments`, read-only to agents.
    pub fn attachments_dir(&self, workspace: &str) -> PathBuf {
        self.root.join("workspaces").join(workspace).join("attachments")
    }
}

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};

/// root's data directory, whatever HOME says: runs execute as the service user, which
/// cannot enter /root, and the system unit (and the Debian package) use it too, so that
/// `sudo ccctl status` finds the service.
pub const ROOT_DATA_DIR: &str = "/var/lib/control-center";

fn default_root() -> Option<PathBuf> {
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from(ROOT_DATA_DIR));
    }
    let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = nonempty("XDG_DATA_HOME").or_else(|| nonempty("HOME").map(|h| h.join(".local/share")))?;
    Some(base.join("control-center"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let d = DataDir::locate(Some(Path::new("/srv/cc"))).unwrap();
        assert_eq!(d.api_socket(), Path::new("/srv/cc/sock/api.sock"));
        assert_eq!(d.helper_socket("broker"), Path::new("/srv/cc/sock/broker.sock"));
        assert_eq!(d.state_db(), Path::new("/srv/cc/state.db"));
    }

    #[test]
    fn relative_paths_become_absolute() {
        let d = DataDir::locate(Some(Path::new("rel/dir"))).unwrap();
        assert!(d.root().is_absolute());
    }

    #[test]
    fn a_non_utf8_data_dir_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/srv/\xff"));
        assert!(matches!(DataDir::locate(Some(p)), Err(DataDirError::NotUtf8(_))));
    }

    #[test]
    fn a_file_is_not_a_data_dir() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let d = DataDir::locate(Some(f.path())).unwrap();
        assert!(matches!(d.prepare(), Err(DataDirError::NotADirectory { .. })));
    }
}
