//! Where credentials come from. Two providers: `github-app`, the real GitHub App flow,
//! and `static`, tokens from the configuration for development, which cannot revoke.

use std::time::SystemTime;

use crate::github_app::GitHubApp;
use crate::secret::Secret;

/// What a token may do: repositories by name (`owner/name` or `name`, as the provider
/// takes them) and GitHub-style permissions (`contents` → `read`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scope {
    pub repositories: Vec<String>,
    pub permissions: Vec<(String, String)>,
}

impl Scope {
    /// The run's read token: fetches, and pull-request writes made by the supervisor.
    pub fn read(repositories: Vec<String>) -> Scope {
        Scope {
            repositories,
            permissions: vec![("contents".into(), "read".into()), ("pull_requests".into(), "write".into())],
        }
    }

    /// One push to one repository.
    pub fn write(repository: String) -> Scope {
        Scope { repositories: vec![repository], permissions: vec![("contents".into(), "write".into())] }
    }

    /// One tracker write to one repository's issues.
    pub fn issues(repository: String) -> Scope {
        Scope { repositories: vec![repository], permissions: vec![("issues".into(), "write".into())] }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub secret: Secret,
    pub expires_at: Option<SystemTime>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the GitHub App private key {path}: {why}")]
    PrivateKey { path: String, why: String },
    #[error("GitHub answered {status} to {what}: {message}")]
    Refused { what: &'static str, status: u16, message: String },
    #[error("GitHub could not be reached for {what}: {why}")]
    Unreachable { what: &'static str, why: String },
    #[error("no static token covers {0}")]
    NoStaticToken(String),
    #[error("the run's deadline has passed: no credential is issued or renewed after it")]
    PastDeadline,
}

pub enum Provider {
    GitHubApp(GitHubApp),
    Static(crate::static_tokens::StaticTokens),
}

impl Provider {
    pub fn name(&self) -> &'static str {
        match self {
            Provider::GitHubApp(_) => "github-app",
            Provider::Static(_) => "static",
        }
    }

    /// Whether a token it issued can be revoked before it expires.
    pub fn can_revoke(&self) -> bool {
        matches!(self, Provider::GitHubApp(_))
    }

    /// Issues a token for `scope`. Its expiry is capped at `deadline`; past the
    /// deadline nothing is issued (renewals never outlive the run).
    pub async fn issue(&self, scope: &Scope, deadline: Option<SystemTime>) -> Result<Issued, ProviderError> {
        if deadline.is_some_and(|d| SystemTime::now() >= d) {
            return Err(ProviderError::PastDeadline);
        }
        let mut issued = match self {
            Provider::GitHubApp(app) => app.issue(scope).await?,
            Provider::Static(tokens) => tokens.issue(scope)?,
        };
        if let Some(d) = deadline {
            issued.expires_at = Some(issued.expires_at.map_or(d, |e| e.min(d)));
        }
        Ok(issued)
    }

    /// Revokes a token. The static provider cannot: it answers Ok(false) and the lease
    /// says so.
    pub async fn revoke(&self, secret: &Secret) -> Result<bool, ProviderError> {
        match self {
            Provider::GitHubApp(app) => app.revoke(secret).await.map(|()| true),
            Provider::Static(_) => Ok(false),
        }
    }
}
