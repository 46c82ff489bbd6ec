//! Per-peer secrets: 256 random bits, hex-encoded, compared in constant time.

use std::fmt;

use serde::{Deserialize, Serialize};

const SECRET_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the system random source failed: {0}")]
    Random(getrandom::Error),
    #[error("a peer secret must be {} hex characters", SECRET_BYTES * 2)]
    Malformed,
}

/// What every run's model placeholder starts with (the broker mints them: this and
/// 64 hex digits). It says what it is to a person who finds one, and lets sandboxd
/// pass one under a key-looking name: it is worth nothing outside its run's door.
pub const MODEL_PLACEHOLDER_PREFIX: &str = "cc-placeholder-";

/// Whether `value` is a model placeholder as the broker mints them, and nothing else.
pub fn is_model_placeholder(value: &str) -> bool {
    value.strip_prefix(MODEL_PLACEHOLDER_PREFIX).is_some_and(|hex| {
        hex.len() == SECRET_BYTES * 2 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A shared secret that authenticates one peer to one helper socket.
///
/// `Debug` never prints it, so a secret cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PeerSecret(String);

impl PeerSecret {
    pub fn generate() -> Result<Self, SecretError> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::fill(&mut bytes).map_err(SecretError::Random)?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The hex text, for putting on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with what a peer presented.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        if presented.len() != expected.len() {
            return false;
        }
        expected.iter().zip(presented).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl TryFrom<String> for PeerSecret {
    type Error = SecretError;

    fn try_from(text: String) -> Result<Self, SecretError> {
        let well_formed =
            text.len() == SECRET_BYTES * 2 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if well_formed { Ok(Self(text)) } else { Err(SecretError::Malformed) }
    }
}

impl From<PeerSecret> for String {
    fn from(secret: PeerSecret) -> String {
        secret.0
    }
}

impl fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerSecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_are_distinct_and_well_formed() {
        let a = PeerSecret::generate().unwrap();
        let b = PeerSecret::generate().unwrap();
        assert_ne!(a, b);
        assert!(PeerSecret::try_from(a.expose().to_owned()).is_ok());
    }

    #[test]
    fn matches_only_the_exact_secret() {
        let s = PeerSecret::generate().unwrap();
        assert!(s.matches(s.expose().as_bytes()));
        assert!(!s.matches(b""));
        assert!(!s.matches(&s.expose().as_bytes()[1..]));
        let mut flipped = s.expose().as_bytes().to_vec();
        flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
        assert!(!s.matches(&flipped));
    }

    #[test]
    fn malformed_text_is_rejected() {
        for bad in ["", "zz", &"A".repeat(64), &"a".repeat(63), &"a".repeat(65)] {
            assert!(PeerSecret::try_from(bad.to_owned()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let s = PeerSecret::generate().unwrap();
        assert!(!format!("{s:?}").contains(s.expose()));
    }
}
