//! The model providers' API keys (`[models.NAME] key_file`), and each run's
//! placeholder for them. A run's agent holds only its placeholder: the gateway's
//! model door exchanges it here for the real key on each request, and nothing else
//! accepts it. A key is read from its file at each exchange, so a rotated key is used
//! from the next request on.
//!
//! A key file must be a regular file of ours that no one else may read: it is a secret.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::secret::Secret;

/// A key is a line of text; anything longer is not one.
const MAX_KEY_BYTES: u64 = 4096;

pub use cc_proto::secret::MODEL_PLACEHOLDER_PREFIX as PLACEHOLDER_PREFIX;

/// Each provider's key file, by provider name: the bootstrap option `model_keys`
/// (JSON), from the supervisor's `[models]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelKeys(BTreeMap<String, PathBuf>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelKeyError {
    #[error("no model provider is configured ([models.NAME] with a key_file in config.toml)")]
    NotConfigured,
    #[error("no model provider {0:?} is configured ([models.{0}] in config.toml)")]
    UnknownProvider(String),
    #[error("the model_keys option is not a JSON object of provider names and paths: {0}")]
    BadOption(String),
    #[error("the model API key file {path} cannot be read: {why}")]
    Unreadable { path: String, why: String },
    #[error("the model API key file {0} may be read by others (chmod 600 it)")]
    Exposed(String),
    #[error("the model API key file {0} holds no key (one line of text, at most 4 KiB)")]
    NoKey(String),
}

impl ModelKeys {
    /// From the bootstrap option; key files relative to `data_dir` are resolved there.
    pub fn from_option(option: Option<&str>, data_dir: &Path) -> Result<ModelKeys, ModelKeyError> {
        let Some(text) = option else { return Ok(ModelKeys::default()) };
        let files: BTreeMap<String, PathBuf> =
            serde_json::from_str(text).map_err(|e| ModelKeyError::BadOption(e.to_string()))?;
        Ok(ModelKeys(files.into_iter().map(|(name, file)| (name, data_dir.join(file))).collect()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key of `provider`, read now.
    pub fn read(&self, provider: &str) -> Result<Secret, ModelKeyError> {
        if self.0.is_empty() {
            return Err(ModelKeyError::NotConfigured);
        }
        let path = self.0.get(provider).ok_or_else(|| ModelKeyError::UnknownProvider(provider.to_owned()))?;
        read_file(path)
    }
}

/// A fresh placeholder: 128 random bits, hex, after [`PLACEHOLDER_PREFIX`].
pub fn mint_placeholder() -> Result<Secret, cc_proto::secret::SecretError> {
    let random = cc_proto::secret::PeerSecret::generate()?;
    Ok(Secret::new(format!("{PLACEHOLDER_PREFIX}{}", random.expose())))
}

/// Reads one key file: ours, private, one line.
fn read_file(path: &Path) -> Result<Secret, ModelKeyError> {
    let shown = path.display().to_string();
    let unreadable = |why: String| ModelKeyError::Unreadable { path: shown.clone(), why };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
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

    fn keys(dir: &Path, content: &str, mode: u32) -> ModelKeys {
        let path = dir.join("model.key");
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        ModelKeys::from_option(Some(r#"{"anthropic": "model.key"}"#), dir).unwrap()
    }

    #[test]
    fn a_key_is_read_from_a_private_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let k = keys(dir.path(), "sk-test-1\n", 0o600);
        assert_eq!(k.read("anthropic").unwrap().expose(), "sk-test-1");
        assert_eq!(k.read("openai"), Err(ModelKeyError::UnknownProvider("openai".into())));
        assert_eq!(ModelKeys::default().read("anthropic"), Err(ModelKeyError::NotConfigured));
        let k = keys(dir.path(), "sk-test-1\n", 0o640);
        assert!(matches!(k.read("anthropic"), Err(ModelKeyError::Exposed(_))));
        for bad in ["", "  \n", "a\nb", &"k".repeat(5000)] {
            let k = keys(dir.path(), bad, 0o600);
            assert!(matches!(k.read("anthropic"), Err(ModelKeyError::NoKey(_))), "{bad:?}");
        }
        // Never through a link.
        std::fs::remove_file(dir.path().join("model.key")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("model.key")).unwrap();
        assert!(matches!(k.read("anthropic"), Err(ModelKeyError::Unreadable { .. })));
        assert!(matches!(ModelKeys::from_option(Some("[1]"), dir.path()), Err(ModelKeyError::BadOption(_))));
    }

    #[test]
    fn placeholders_are_distinct_and_say_what_they_are() {
        let (a, b) = (mint_placeholder().unwrap(), mint_placeholder().unwrap());
        assert_ne!(a, b);
        assert!(cc_proto::secret::is_model_placeholder(a.expose()));
        assert!(!cc_proto::secret::is_model_placeholder(&format!("{}x", a.expose())));
    }
}
