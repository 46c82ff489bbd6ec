//! The ids the supervisor mints: one function makes them all, each kind with its own
//! prefix and length, from the system's random source (not from a peer secret).

use std::fmt;

/// Why no id could be made: the system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot make an id: the system's random source failed ({0})")]
pub struct MintError(getrandom::Error);

/// A kind of id: its prefix and how many hex digits follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// `r` and 15 hex digits.
    Run,
    /// `c` and 16 hex digits.
    Conversation,
    /// `explain-` and 12 hex digits: a throw-away registration with sandboxd.
    Explanation,
    /// `t` and 12 hex digits: a hosted terminal.
    Terminal,
}

impl IdKind {
    fn prefix_and_digits(self) -> (&'static str, usize) {
        match self {
            IdKind::Run => ("r", 15),
            IdKind::Conversation => ("c", 16),
            IdKind::Explanation => ("explain-", 12),
            IdKind::Terminal => ("t", 12),
        }
    }
}

/// An id type: a string that says which kind of thing it names, so that a run's id is
/// never passed where a conversation's is wanted.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A new id.
            pub fn mint() -> Result<Self, MintError> {
                Ok(Self(mint($kind)?))
            }
            /// An id as a client or the store gives it (unchecked: lookups of an unknown
            /// id simply find nothing).
            pub fn from_wire(id: impl Into<String>) -> Self {
                Self(id.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
            /// As it is shown in a message: at most 64 characters of it.
            pub fn shown(&self) -> String {
                self.0.chars().take(64).collect()
            }
        }

        /// Read as the string it is (paths, SQL, messages); only a function that takes
        /// the type itself insists on the kind.
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A run's id.
    RunId,
    IdKind::Run
);
id_type!(
    /// A conversation's id.
    ConversationId,
    IdKind::Conversation
);

id_type!(
    /// A hosted terminal's id (its name is `terminals/{id}`).
    TerminalId,
    IdKind::Terminal
);

/// A new id of `kind`.
pub fn mint(kind: IdKind) -> Result<String, MintError> {
    let (prefix, digits) = kind.prefix_and_digits();
    let mut bytes = vec![0u8; digits.div_ceil(2)];
    getrandom::fill(&mut bytes).map_err(MintError)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}{}", &hex[..digits]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_prefix_and_length_and_differ() {
        for (kind, prefix, len) in
            [(IdKind::Run, "r", 16), (IdKind::Conversation, "c", 17), (IdKind::Explanation, "explain-", 20)]
        {
            let (a, b) = (mint(kind).unwrap(), mint(kind).unwrap());
            assert!(a.starts_with(prefix) && a.len() == len, "{a}");
            assert!(a[prefix.len()..].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
            assert_ne!(a, b);
        }
    }
}
