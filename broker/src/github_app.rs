//! The `github-app` provider, GitHub's real App flow: the broker signs a short JWT with
//! the App's private key (RS256), trades it for an installation token scoped to
//! repositories and permissions (`POST /app/installations/{id}/access_tokens`), and
//! revokes a token with the token itself (`DELETE /installation/token`). The API base
//! is configurable (GitHub Enterprise, or the tests' stand-in).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};

use crate::credentials::{Issued, ProviderError, Scope};
use crate::secret::Secret;

/// Every call to GitHub has this long to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const API_VERSION: &str = "2022-11-28";

#[derive(Debug, Clone, serde::Deserialize)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GitHubAppConfig {
    pub app_id: String,
    pub installation_id: u64,
    /// PEM file of the App's private key; refused unless only its owner can read it.
    pub private_key: PathBuf,
    #[serde(default = "default_api_base")]
    pub api_base: String,
}

fn default_api_base() -> String {
    "https://api.github.com".into()
}

pub struct GitHubApp {
    app_id: String,
    installation_id: u64,
    key: EncodingKey,
    api: String,
    client: reqwest::Client,
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    iat: u64,
    exp: u64,
    iss: &'a str,
}

#[derive(serde::Deserialize)]
struct AccessToken {
    token: String,
    expires_at: Option<String>,
}

impl GitHubApp {
    pub fn new(config: &GitHubAppConfig) -> Result<GitHubApp, ProviderError> {
        let path = config.private_key.display().to_string();
        let refuse = |why: String| ProviderError::PrivateKey { path: path.clone(), why };
        let file = std::fs::File::open(&config.private_key).map_err(|e| refuse(format!("cannot be read ({e})")))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(|e| refuse(e.to_string()))?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(refuse(format!(
                    "is readable by others (mode {:o}); make it 0600 with chmod 600",
                    mode & 0o777
                )));
            }
        }
        let pem = std::fs::read(&config.private_key).map_err(|e| refuse(format!("cannot be read ({e})")))?;
        let key =
            EncodingKey::from_rsa_pem(&pem).map_err(|e| refuse(format!("is not an RSA private key in PEM ({e})")))?;
        let client = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .user_agent("cc-broker")
            .build()
            .map_err(|e| ProviderError::Unreachable { what: "a client", why: e.to_string() })?;
        Ok(GitHubApp {
            app_id: config.app_id.clone(),
            installation_id: config.installation_id,
            key,
            api: config.api_base.trim_end_matches('/').to_owned(),
            client,
        })
    }

    /// The App's JWT: issued a minute in the past (clock skew), valid nine minutes
    /// (GitHub allows ten).
    fn jwt(&self) -> Result<String, ProviderError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = Claims { iat: now.saturating_sub(60), exp: now + 540, iss: &self.app_id };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key).map_err(|e| {
            ProviderError::PrivateKey { path: "the configured key".into(), why: format!("cannot sign ({e})") }
        })
    }

    pub async fn issue(&self, scope: &Scope) -> Result<Issued, ProviderError> {
        const WHAT: &str = "an installation token";
        // GitHub names repositories of the installation without their owner.
        let repositories: Vec<&str> = scope.repositories.iter().map(|r| r.rsplit('/').next().unwrap_or(r)).collect();
        let permissions: serde_json::Map<String, serde_json::Value> =
            scope.permissions.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        let body = serde_json::json!({ "repositories": repositories, "permissions": permissions });
        let url = format!("{}/app/installations/{}/access_tokens", self.api, self.installation_id);
        let response = self
            .client
            .post(url)
            .bearer_auth(self.jwt()?)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION)
            .json(&body)
            .send()
            .await
            .map_err(|e| ProviderError::Unreachable { what: WHAT, why: e.without_url().to_string() })?;
        let status = response.status();
        if !status.is_success() {
            return Err(refused(WHAT, response).await);
        }
        let token: AccessToken = response.json().await.map_err(|e| ProviderError::Refused {
            what: WHAT,
            status: status.as_u16(),
            message: e.to_string(),
        })?;
        let expires_at = token.expires_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
        Ok(Issued { secret: Secret::new(token.token), expires_at })
    }

    /// Revokes `secret`. A token GitHub no longer accepts (401) is as good as revoked.
    pub async fn revoke(&self, secret: &Secret) -> Result<(), ProviderError> {
        const WHAT: &str = "revoking a token";
        let response = self
            .client
            .delete(format!("{}/installation/token", self.api))
            .bearer_auth(secret.expose())
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION)
            .send()
            .await
            .map_err(|e| ProviderError::Unreachable { what: WHAT, why: e.without_url().to_string() })?;
        match response.status().as_u16() {
            204 | 401 => Ok(()),
            _ => Err(refused(WHAT, response).await),
        }
    }
}

/// GitHub's refusal, with its `message` when it sent one; never a token.
async fn refused(what: &'static str, response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(200).collect());
    let message: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    ProviderError::Refused { what, status, message }
}
