//! A stand-in GitHub API for the credential tests (GitHub itself is unreachable
//! here), speaking the real wire format: it verifies the App JWT's RS256 signature
//! with the App's public key, issues installation tokens of no fixed length or shape,
//! honours the repositories and permissions asked for, and revokes tokens with
//! `DELETE /installation/token`. It runs on a runtime of its own, so synchronous and
//! async tests alike can use it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};

/// The App the stand-in knows.
pub const APP_ID: &str = "424242";
/// Its installation.
pub const INSTALLATION: u64 = 77;
/// The installation's repositories on the stand-in.
pub const REPOSITORIES: &[&str] = &["project", "other"];

/// A token the stand-in issued.
#[derive(Debug, Clone)]
pub struct Token {
    pub repositories: Vec<String>,
    pub permissions: serde_json::Map<String, serde_json::Value>,
    pub revoked: bool,
}

/// A write made through the REST API (an issue, a comment, a pull request).
#[derive(Debug, Clone)]
pub struct Write {
    pub method: String,
    pub path: String,
    /// The token it was made with.
    pub token: String,
    pub body: serde_json::Value,
}

#[derive(Default)]
struct State {
    tokens: HashMap<String, Token>,
    writes: Vec<Write>,
    /// The next DELETE answers 502 this many times (a GitHub outage).
    fail_revokes: u32,
}

pub struct GitHubApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for GitHubApi {
    /// Without blocking: the stand-in may be dropped inside an async test.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl GitHubApi {
    /// Serves on a loopback port, verifying JWTs with `public_key` (PEM).
    pub fn start(public_key: Vec<u8>) -> GitHubApi {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (addr, state) = runtime.block_on(serve(public_key));
        GitHubApi { addr, state, runtime: Some(runtime) }
    }

    /// The API base URL to configure.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn token(&self, secret: &str) -> Option<Token> {
        self.state.lock().unwrap().tokens.get(secret).cloned()
    }

    /// Tokens issued and not revoked.
    pub fn live_tokens(&self) -> Vec<Token> {
        self.state.lock().unwrap().tokens.values().filter(|t| !t.revoked).cloned().collect()
    }

    pub fn issued(&self) -> usize {
        self.state.lock().unwrap().tokens.len()
    }

    /// A token issued outside the App flow (for a benchmark's direct baseline).
    pub fn grant(&self, repositories: &[&str], contents: &str) -> String {
        let token = new_token();
        let mut permissions = serde_json::Map::new();
        permissions.insert("contents".into(), contents.into());
        let repositories = repositories.iter().map(|r| (*r).to_owned()).collect();
        self.state.lock().unwrap().tokens.insert(token.clone(), Token { repositories, permissions, revoked: false });
        token
    }

    /// The writes made through the REST API, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// A token that may write the repositories' issues, issued outside the App flow.
    pub fn grant_issues(&self, repositories: &[&str]) -> String {
        let token = new_token();
        let mut permissions = serde_json::Map::new();
        permissions.insert("issues".into(), "write".into());
        let repositories = repositories.iter().map(|r| (*r).to_owned()).collect();
        self.state.lock().unwrap().tokens.insert(token.clone(), Token { repositories, permissions, revoked: false });
        token
    }

    /// The next `n` revokes answer 502, as in an outage.
    pub fn fail_revokes(&self, n: u32) {
        self.state.lock().unwrap().fail_revokes = n;
    }

    /// How the stand-in git host decides (`git_host::GitHost::start`): a live token
    /// of this API whose repositories include the repository (by name, as GitHub
    /// lists an installation's) and whose `contents` permission allows the access.
    pub fn git_access(&self) -> crate::git_host::Authorize {
        let state = self.state.clone();
        std::sync::Arc::new(move |secret: &str, repository: &str, access: crate::git_host::Access| {
            let state = state.lock().unwrap();
            let Some(token) = state.tokens.get(secret).filter(|t| !t.revoked) else { return false };
            let name = repository.rsplit('/').next().unwrap_or(repository);
            let contents = token.permissions.get("contents").and_then(|v| v.as_str());
            let allowed = match access {
                crate::git_host::Access::Read => matches!(contents, Some("read" | "write")),
                crate::git_host::Access::Write => contents == Some("write"),
            };
            allowed && token.repositories.iter().any(|r| r == name)
        })
    }

    /// Whether a caller holding `secret` gets anything from the API.
    pub fn accepts(&self, secret: &str) -> bool {
        self.token(secret).is_some_and(|t| !t.revoked)
    }
}

fn json(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn bearer(request: &Request<Incoming>) -> Option<String> {
    let value = request.headers().get("authorization")?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("token ")).map(str::to_owned)
}

/// A token of a length and alphabet a client must not assume.
fn new_token() -> String {
    let mut bytes = [0u8; 40];
    getrandom_fill(&mut bytes);
    let len = 20 + usize::from(bytes[0] % 40);
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.";
    let body: String = (0..len).map(|i| alphabet[usize::from(bytes[i % 40]) % alphabet.len()] as char).collect();
    format!("ghs_{body}")
}

fn getrandom_fill(buf: &mut [u8]) {
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, buf)).unwrap();
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<Mutex<State>>,
    public_key: Arc<Vec<u8>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let auth = bearer(&request);
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let bad_credentials = json(StatusCode::UNAUTHORIZED, serde_json::json!({ "message": "Bad credentials" }));
    let response = match (method.as_str(), path.as_str()) {
        ("POST", p) if p == format!("/app/installations/{INSTALLATION}/access_tokens") => {
            // The JWT: RS256, signed by the App's key, issued by the App, short-lived.
            let key = jsonwebtoken::DecodingKey::from_rsa_pem(&public_key).unwrap();
            let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            validation.set_issuer(&[APP_ID]);
            validation.set_required_spec_claims(&["exp", "iat", "iss"]);
            let claims = auth
                .as_deref()
                .and_then(|jwt| jsonwebtoken::decode::<serde_json::Value>(jwt, &key, &validation).ok())
                .map(|d| d.claims);
            let Some(claims) = claims else {
                return Ok(json(
                    StatusCode::UNAUTHORIZED,
                    serde_json::json!({ "message": "A JSON web token could not be decoded" }),
                ));
            };
            let lifetime = claims["exp"].as_u64().unwrap_or(0).saturating_sub(claims["iat"].as_u64().unwrap_or(0));
            if lifetime > 600 {
                return Ok(json(
                    StatusCode::UNAUTHORIZED,
                    serde_json::json!({ "message": "'Expiration time' claim ('exp') is too far in the future" }),
                ));
            }
            let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let repositories: Vec<String> = asked["repositories"]
                .as_array()
                .map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            if let Some(unknown) = repositories.iter().find(|r| !REPOSITORIES.contains(&r.as_str())) {
                return Ok(json(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    serde_json::json!({ "message": format!("There is at least one repository that does not exist or is not accessible to the parent installation: {unknown}") }),
                ));
            }
            let permissions = asked["permissions"].as_object().cloned().unwrap_or_default();
            if permissions.values().any(|v| !matches!(v.as_str(), Some("read" | "write"))) {
                return Ok(json(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    serde_json::json!({ "message": "Invalid permission" }),
                ));
            }
            let token = new_token();
            state.lock().unwrap().tokens.insert(
                token.clone(),
                Token { repositories: repositories.clone(), permissions: permissions.clone(), revoked: false },
            );
            let expires = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(3600));
            json(
                StatusCode::CREATED,
                serde_json::json!({ "token": token, "expires_at": expires.to_string(), "permissions": permissions, "repository_selection": "selected" }),
            )
        }
        ("DELETE", "/installation/token") => {
            let mut state = state.lock().unwrap();
            if state.fail_revokes > 0 {
                state.fail_revokes -= 1;
                return Ok(json(StatusCode::BAD_GATEWAY, serde_json::json!({ "message": "Server Error" })));
            }
            match auth.and_then(|t| state.tokens.get_mut(&t)) {
                Some(token) if !token.revoked => {
                    token.revoked = true;
                    Response::builder().status(StatusCode::NO_CONTENT).body(Full::new(Bytes::new())).unwrap()
                }
                _ => bad_credentials,
            }
        }
        ("GET", "/installation/repositories") => {
            let state = state.lock().unwrap();
            match auth.and_then(|t| state.tokens.get(&t).cloned()) {
                Some(token) if !token.revoked => json(
                    StatusCode::OK,
                    serde_json::json!({ "total_count": token.repositories.len(), "repositories": token.repositories }),
                ),
                _ => bad_credentials,
            }
        }
        (m @ ("POST" | "PATCH"), p) if p.starts_with("/repos/") => repository_write(&state, m, p, auth, &body),
        _ => json(StatusCode::NOT_FOUND, serde_json::json!({ "message": "Not Found" })),
    };
    Ok(response)
}

/// Issues, their comments and pull requests: made only with a live token of the
/// repository whose permission covers it (`issues` or `pull_requests`: `write`).
fn repository_write(
    state: &Mutex<State>,
    method: &str,
    path: &str,
    auth: Option<String>,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let parts: Vec<&str> = path.trim_start_matches("/repos/").split('/').collect();
    let (repository, rest) = match parts.as_slice() {
        [_, name, rest @ ..] => (*name, rest.to_vec()),
        _ => return json(StatusCode::NOT_FOUND, serde_json::json!({ "message": "Not Found" })),
    };
    let permission = match (method, rest.as_slice()) {
        ("POST", ["issues"]) | ("POST", ["issues", _, "comments"]) | ("PATCH", ["issues", _]) => "issues",
        ("POST", ["pulls"]) => "pull_requests",
        _ => return json(StatusCode::NOT_FOUND, serde_json::json!({ "message": "Not Found" })),
    };
    let mut state = state.lock().unwrap();
    let Some(token) = auth.clone().and_then(|t| state.tokens.get(&t).cloned()).filter(|t| !t.revoked) else {
        return json(StatusCode::UNAUTHORIZED, serde_json::json!({ "message": "Bad credentials" }));
    };
    if !token.repositories.iter().any(|r| r == repository)
        || token.permissions.get(permission).and_then(|v| v.as_str()) != Some("write")
    {
        return json(StatusCode::FORBIDDEN, serde_json::json!({ "message": "Resource not accessible by integration" }));
    }
    let body: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    state.writes.push(Write {
        method: method.into(),
        path: path.into(),
        token: auth.unwrap_or_default(),
        body: body.clone(),
    });
    let number = match rest.as_slice() {
        ["issues", n, ..] => n.parse().unwrap_or(0),
        _ => state.writes.len() as u64,
    };
    let kind = if permission == "issues" { "issues" } else { "pull" };
    let page = format!("https://github.com/{}/{kind}/{number}", parts[..2].join("/"));
    let status = if method == "PATCH" { StatusCode::OK } else { StatusCode::CREATED };
    json(
        status,
        serde_json::json!({ "number": number, "html_url": page, "state": body["state"].as_str().unwrap_or("open") }),
    )
}

async fn serve(public_key: Vec<u8>) -> (SocketAddr, Arc<Mutex<State>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(Mutex::new(State::default()));
    let public_key = Arc::new(public_key);
    let served = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (state, key) = (served.clone(), public_key.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |r| handle(r, state.clone(), key.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, state)
}

/// An App's RSA key pair made by openssl in `dir`: (private key file, 0600; public key PEM).
pub fn key_pair(dir: &Path) -> (PathBuf, Vec<u8>) {
    let private = dir.join("app.pem");
    let public = dir.join("app.pub.pem");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["genrsa", "-out", private.to_str().unwrap(), "2048"]);
    run(&["rsa", "-in", private.to_str().unwrap(), "-pubout", "-out", public.to_str().unwrap()]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    (private, std::fs::read(public).unwrap())
}
