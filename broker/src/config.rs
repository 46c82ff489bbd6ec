//! The `[credentials]` table of the supervisor's config.toml, handed to the broker in its
//! bootstrap (stdin, never argv or env: static tokens are secrets).
//!
//! ```toml
//! [credentials]
//! provider = "github-app"          # or "static"; absent: no credentials at all
//! [credentials.github_app]
//! app_id = "123456"
//! installation_id = 7890
//! private_key = "github-app.pem"   # relative to the data directory; 0600
//! api_base = "https://api.github.com"
//! [[credentials.static]]           # development only: cannot be revoked
//! token = "…"
//! repositories = ["owner/name"]
//! permissions = { contents = "write", pull_requests = "write" }
//! ```

use std::path::Path;

use crate::credentials::{Provider, ProviderError};
use crate::github_app::{GitHubApp, GitHubAppConfig};
use crate::static_tokens::{StaticToken, StaticTokens};

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CredentialsConfig {
    pub provider: Option<String>,
    pub github_app: Option<GitHubAppConfig>,
    #[serde(rename = "static", default)]
    pub static_tokens: Vec<StaticToken>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("[credentials] in config.toml: {0}")]
    Parse(String),
    #[error("[credentials] provider {0:?} is unknown (known: github-app, static)")]
    UnknownProvider(String),
    #[error("[credentials] provider = \"github-app\" needs a [credentials.github_app] table")]
    NoGitHubApp,
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// The provider the configuration names, or None when it names none.
pub fn provider(text: Option<&str>, data_dir: &Path) -> Result<Option<Provider>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    let config: CredentialsConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(one_line(&e.to_string())))?;
    match config.provider.as_deref() {
        None => Ok(None),
        Some("static") => Ok(Some(Provider::Static(StaticTokens::new(config.static_tokens)))),
        Some("github-app") => {
            let mut app = config.github_app.ok_or(ConfigError::NoGitHubApp)?;
            if app.private_key.is_relative() {
                app.private_key = data_dir.join(&app.private_key);
            }
            Ok(Some(Provider::GitHubApp(GitHubApp::new(&app)?)))
        }
        Some(other) => Err(ConfigError::UnknownProvider(other.to_owned())),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_are_read_from_the_table() {
        let dir = std::path::Path::new("/nonexistent");
        assert!(provider(None, dir).unwrap().is_none());
        assert!(provider(Some(""), dir).unwrap().is_none());
        let p = provider(Some("provider = \"static\"\n[[static]]\ntoken = \"t\"\nrepositories = [\"o/r\"]\npermissions = { contents = \"read\" }\n"), dir)
            .unwrap()
            .unwrap();
        assert_eq!(p.name(), "static");
        let err = provider(Some("provider = \"vault\""), dir).err().unwrap().to_string();
        assert_eq!(err, "[credentials] provider \"vault\" is unknown (known: github-app, static)");
        assert!(matches!(provider(Some("provider = \"github-app\""), dir), Err(ConfigError::NoGitHubApp)));
        let err = provider(Some("provider = \"github-app\"\n[github_app]\napp_id = \"1\"\ninstallation_id = 2\nprivate_key = \"k.pem\"\n"), dir)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/nonexistent/k.pem") && err.contains("cannot be read"), "{err}");
        assert!(
            provider(Some("provider = \"static\"\nbogus = 1"), dir)
                .err()
                .unwrap()
                .to_string()
                .contains("unknown field")
        );
    }
}
