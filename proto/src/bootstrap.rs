//! The bootstrap message: what the supervisor tells a helper at spawn.
//!
//! It travels as one JSON document on the helper's stdin, which the supervisor then
//! closes. Secrets never go in argv or the environment, where `/proc/<pid>/cmdline`
//! and `/proc/<pid>/environ` would show them.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::logging::LogFormat;
use crate::secret::PeerSecret;

/// More than any real bootstrap; a bigger one is an error, not an allocation.
pub const MAX_BOOTSTRAP_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Bootstrap {
    /// The helper's name, e.g. "broker".
    pub name: String,
    /// The socket the helper must serve.
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    pub log_format: LogFormat,
    /// Peer name → the secret that peer presents on this helper's socket.
    pub peers: BTreeMap<String, PeerSecret>,
    /// The supervisor's pid: a helper whose parent is not this process exits. 0: the
    /// helper runs inside an envelope, whose init is its parent (the envelope itself
    /// dies with the supervisor: bubblewrap's --die-with-parent).
    pub supervisor_pid: u32,
    /// Helper-specific settings (sandboxd: "sandbox" = auto|native|off, "bwrap" = path).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Peer name → the secret this helper presents when it calls that peer's socket
    /// (the gateway calls the broker).
    #[serde(default)]
    pub calls: BTreeMap<String, PeerSecret>,
}

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read the bootstrap message on stdin: {0}")]
    Read(#[from] std::io::Error),
    #[error("the bootstrap message is over {MAX_BOOTSTRAP_BYTES} bytes")]
    TooLarge,
    #[error("the bootstrap message is not valid: {0}")]
    Invalid(#[from] serde_json::Error),
    #[error("the bootstrap message names no peer: nobody could call this helper")]
    NoPeers,
    #[error("the bootstrap message is for helper {found:?}, but this is {expected:?}")]
    WrongHelper { expected: String, found: String },
}

impl Bootstrap {
    /// Reads one bootstrap message (until EOF) and checks it is meant for `expected_name`.
    pub fn read_from(reader: impl Read, expected_name: &str) -> Result<Self, BootstrapError> {
        let mut text = Vec::new();
        reader.take(MAX_BOOTSTRAP_BYTES + 1).read_to_end(&mut text)?;
        if text.len() as u64 > MAX_BOOTSTRAP_BYTES {
            return Err(BootstrapError::TooLarge);
        }
        let bootstrap: Bootstrap = serde_json::from_slice(&text)?;
        if bootstrap.name != expected_name {
            return Err(BootstrapError::WrongHelper { expected: expected_name.to_owned(), found: bootstrap.name });
        }
        if bootstrap.peers.is_empty() {
            return Err(BootstrapError::NoPeers);
        }
        Ok(bootstrap)
    }

    pub fn to_json_line(&self) -> Vec<u8> {
        // Paths are the only fields that could fail (non-UTF-8); the supervisor refuses a
        // data directory whose path is not UTF-8, and every path here is under it.
        let mut line = serde_json::to_vec(self).expect("a bootstrap of UTF-8 paths always serializes");
        line.push(b'\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bootstrap {
        Bootstrap {
            name: "broker".into(),
            socket: "/d/sock/broker.sock".into(),
            data_dir: "/d".into(),
            log_format: LogFormat::Json,
            peers: BTreeMap::from([("supervisor".to_owned(), PeerSecret::generate().unwrap())]),
            supervisor_pid: 1,
            options: BTreeMap::new(),
            calls: BTreeMap::from([("gateway".to_owned(), PeerSecret::generate().unwrap())]),
        }
    }

    #[test]
    fn round_trips() {
        let b = sample();
        assert_eq!(Bootstrap::read_from(&b.to_json_line()[..], "broker").unwrap(), b);
    }

    #[test]
    fn rejects_bad_messages() {
        let b = sample();
        assert!(matches!(
            Bootstrap::read_from(&b.to_json_line()[..], "gateway"),
            Err(BootstrapError::WrongHelper { .. })
        ));
        assert!(matches!(Bootstrap::read_from(&b"not json"[..], "broker"), Err(BootstrapError::Invalid(_))));
        assert!(matches!(Bootstrap::read_from(&b""[..], "broker"), Err(BootstrapError::Invalid(_))));
        let huge = vec![b' '; MAX_BOOTSTRAP_BYTES as usize + 1];
        assert!(matches!(Bootstrap::read_from(&huge[..], "broker"), Err(BootstrapError::TooLarge)));
        let mut no_peers = sample();
        no_peers.peers.clear();
        assert!(matches!(Bootstrap::read_from(&no_peers.to_json_line()[..], "broker"), Err(BootstrapError::NoPeers)));
        let with_bad_secret =
            String::from_utf8(b.to_json_line()).unwrap().replace(b.peers["supervisor"].expose(), "short");
        assert!(Bootstrap::read_from(with_bad_secret.as_bytes(), "broker").is_err());
        let extra = String::from_utf8(b.to_json_line()).unwrap().replacen('{', "{\"extra\":1,", 1);
        assert!(Bootstrap::read_from(extra.as_bytes(), "broker").is_err());
    }
}
