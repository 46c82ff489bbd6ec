//! The model provider's API key (`[credentials.model] api_key_file`): handed to the
//! gateway for a run's agent (Claude Code asks for it through its `apiKeyHelper`, the
//! run's cc-hook), never placed in an environment or a file the agent can read. Read
//! from its file at each request, so a rotated key is used from the next one on.
//!
//! The file must be a regular file of ours that no one else may read: it is a secret.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::secret::Secret;

/// A key is a line of text; anything longer is not one.
const MAX_KEY_BYTES: u64 = 4096;

#[derive(Debug, Clone, serde::Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelKeyConfig {
    /// Relative to the data directory.
    pub api_key_file: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelKeyError {
    #[error("no model API key is configured ([credentials.model] api_key_file in config.toml)")]
    NotConfigured,
    #[error("the model API key file {path} cannot be read: {why}")]
    Unreadable { path: String, why: String },
    #[error("the model API key file {0} may be read by others (chmod 600 it)")]
    Exposed(String),
    #[error("the model API key file {0} holds no key (one line of text, at most 4 KiB)")]
    NoKey(String),
}

/// Reads the key from `config`'s file, resolved against `data_dir`.
pub fn read(config: Option<&ModelKeyConfig>, data_dir: &Path) -> Result<Secret, ModelKeyError> {
    let config = config.ok_or(ModelKeyError::NotConfigured)?;
    let path = data_dir.join(&config.api_key_file);
    let shown = path.display().to_string();
    let unreadable = |why: String| ModelKeyError::Unreadable { path: shown.clone(), why };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| unreadable(e.to_string()))?;
    let meta = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if meta.mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(ModelKeyError::Exposed(shown));
    }
    let mut text = String::new();
    file.by_ref().take(MAX_KEY_BYTES + 1).read_to_string(&mut text).map_err(|e| unreadable(e.to_string()))?;
    let key = text.trim();
    if key.is_empty() || text.len() as u64 > MAX_KEY_BYTES || key.contains(['\n', '\r', '\0']) {
        return Err(ModelKeyError::NoKey(shown));
    }
    Ok(Secret::new(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(dir: &Path, content: &str, mode: u32) -> ModelKeyConfig {
        let path = dir.join("model.key");
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        ModelKeyConfig { api_key_file: "model.key".into() }
    }

    #[test]
    fn the_key_is_read_from_a_private_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let c = key_file(dir.path(), "sk-test-1\n", 0o600);
        assert_eq!(read(Some(&c), dir.path()).unwrap().expose(), "sk-test-1");
        assert_eq!(read(None, dir.path()), Err(ModelKeyError::NotConfigured));
        let c = key_file(dir.path(), "sk-test-1\n", 0o640);
        assert!(matches!(read(Some(&c), dir.path()), Err(ModelKeyError::Exposed(_))));
        for bad in ["", "  \n", "a\nb", &"k".repeat(5000)] {
            let c = key_file(dir.path(), bad, 0o600);
            assert!(matches!(read(Some(&c), dir.path()), Err(ModelKeyError::NoKey(_))), "{bad:?}");
        }
        // Never through a link.
        std::fs::remove_file(dir.path().join("model.key")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("model.key")).unwrap();
        let c = ModelKeyConfig { api_key_file: "model.key".into() };
        assert!(matches!(read(Some(&c), dir.path()), Err(ModelKeyError::Unreadable { .. })));
    }
}
