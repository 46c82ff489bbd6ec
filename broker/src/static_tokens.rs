//! The `static` provider: tokens and the scopes they were declared with, from the
//! configuration, for development. A token is handed out only for a scope its
//! declaration covers. It cannot revoke, and the broker says so when it starts.

use crate::credentials::{Issued, ProviderError, Scope};
use crate::secret::Secret;

#[derive(Debug, Clone, serde::Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StaticToken {
    pub token: String,
    pub repositories: Vec<String>,
    /// `contents = "write"`, `pull_requests = "write"`…
    pub permissions: std::collections::BTreeMap<String, String>,
}

pub struct StaticTokens {
    tokens: Vec<StaticToken>,
}

impl StaticTokens {
    pub fn new(tokens: Vec<StaticToken>) -> StaticTokens {
        StaticTokens { tokens }
    }

    pub fn issue(&self, scope: &Scope) -> Result<Issued, ProviderError> {
        let rank = |level: &str| match level {
            "read" => 1,
            "write" => 2,
            "admin" => 3,
            _ => 0,
        };
        let covers = |t: &StaticToken| {
            scope.repositories.iter().all(|r| t.repositories.contains(r))
                && scope.permissions.iter().all(|(k, v)| t.permissions.get(k).is_some_and(|have| rank(have) >= rank(v)))
        };
        self.tokens
            .iter()
            .find(|t| covers(t))
            .map(|t| Issued { secret: Secret::new(t.token.clone()), expires_at: None })
            .ok_or_else(|| ProviderError::NoStaticToken(describe(scope)))
    }
}

fn describe(scope: &Scope) -> String {
    let permissions: Vec<String> = scope.permissions.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{} with {}", scope.repositories.join(", "), permissions.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_token_is_handed_out_only_within_its_declared_scope() {
        let tokens = StaticTokens::new(vec![StaticToken {
            token: "dev-read".into(),
            repositories: vec!["o/r".into()],
            permissions: [("contents".into(), "read".into()), ("pull_requests".into(), "write".into())].into(),
        }]);
        assert_eq!(tokens.issue(&Scope::read(vec!["o/r".into()])).unwrap().secret.expose(), "dev-read");
        let err = tokens.issue(&Scope::write("o/r".into())).unwrap_err().to_string();
        assert_eq!(err, "no static token covers o/r with contents: write");
        assert!(tokens.issue(&Scope::read(vec!["o/other".into()])).is_err());
    }
}
