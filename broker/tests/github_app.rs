//! The `github-app` provider against a stand-in GitHub API that speaks the real wire
//! format: it verifies the App JWT's RS256 signature with the App's public key, issues
//! installation tokens of no fixed length or shape, honours the repositories and
//! permissions asked for, and revokes tokens with `DELETE /installation/token`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cc_broker::credentials::{Provider, ProviderError, Scope};
use cc_broker::github_app::{GitHubApp, GitHubAppConfig};
use cc_broker::leases::{Kind, LeaseStore, NewLease};
use cc_broker::revoke::{self, Outcome};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};

const APP_ID: &str = "424242";
const INSTALLATION: u64 = 77;
/// The installation's repositories on the stand-in.
const REPOSITORIES: &[&str] = &["project", "other"];

#[derive(Debug, Clone)]
struct Token {
    repositories: Vec<String>,
    permissions: serde_json::Map<String, serde_json::Value>,
    revoked: bool,
}

#[derive(Default)]
struct State {
    tokens: HashMap<String, Token>,
    /// The next DELETE answers 502 this many times (a GitHub outage).
    fail_revokes: u32,
}

struct StandIn {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl StandIn {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn token(&self, secret: &str) -> Option<Token> {
        self.state.lock().unwrap().tokens.get(secret).cloned()
    }

    fn live_tokens(&self) -> usize {
        self.state.lock().unwrap().tokens.values().filter(|t| !t.revoked).count()
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
        _ => json(StatusCode::NOT_FOUND, serde_json::json!({ "message": "Not Found" })),
    };
    Ok(response)
}

async fn stand_in(public_key: Vec<u8>) -> StandIn {
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
    StandIn { addr, state }
}

/// An RSA key pair made by openssl: (private key file, public key PEM).
fn key_pair(dir: &Path) -> (PathBuf, Vec<u8>) {
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

fn config(base: String, private_key: PathBuf) -> GitHubAppConfig {
    GitHubAppConfig { app_id: APP_ID.into(), installation_id: INSTALLATION, private_key, api_base: base }
}

/// What a caller holding `secret` can do against the stand-in: list its repositories.
async fn works(base: &str, secret: &str) -> bool {
    let response = reqwest::Client::new()
        .get(format!("{base}/installation/repositories"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    response.status().is_success()
}

#[tokio::test]
async fn a_run_gets_scoped_tokens_and_loses_them_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(dir.path());
    let api = stand_in(public).await;
    let provider = Provider::GitHubApp(GitHubApp::new(&config(api.base(), private)).unwrap());
    let store = LeaseStore::open(&dir.path().join("leases.db")).unwrap();

    let read = provider.issue(&Scope::read(vec!["owner/project".into()]), None).await.unwrap();
    let write = provider.issue(&Scope::write("owner/project".into()), None).await.unwrap();
    let granted = api.token(read.secret.expose()).expect("the stand-in issued it");
    assert_eq!(granted.repositories, ["project"]);
    assert_eq!(granted.permissions["contents"], "read");
    assert_eq!(granted.permissions["pull_requests"], "write");
    assert_eq!(api.token(write.secret.expose()).unwrap().permissions["contents"], "write");
    assert!(read.expires_at.is_some_and(|e| e > SystemTime::now()));
    assert!(works(&api.base(), read.secret.expose()).await);

    for (kind, issued, scope) in [
        (Kind::Read, &read, Scope::read(vec!["owner/project".into()])),
        (Kind::Write, &write, Scope::write("owner/project".into())),
    ] {
        let lease = NewLease {
            run: "r1".into(),
            provider: provider.name().into(),
            kind,
            repositories: scope.repositories,
            permissions: scope.permissions,
            issued_at: SystemTime::now(),
            expires_at: issued.expires_at,
        };
        store.insert(&lease, &issued.secret).unwrap();
    }
    let leases = store.of_run("r1").unwrap();
    assert!(!format!("{leases:?}").contains(read.secret.expose()), "a listed lease shows no token");

    // The run ends: every token of it is revoked upstream.
    let secrets = revoke::take(&store, &leases).unwrap();
    let outcomes = revoke::record(&store, revoke::revoke_all(&provider, secrets).await, SystemTime::now()).unwrap();
    assert!(outcomes.iter().all(|o| matches!(o, Outcome::Revoked { .. })), "{outcomes:?}");
    assert_eq!(api.live_tokens(), 0);
    assert!(!works(&api.base(), read.secret.expose()).await);
    assert!(!works(&api.base(), write.secret.expose()).await);
    assert!(store.of_run("r1").unwrap().iter().all(|l| l.revoked_at.is_some()));
}

#[tokio::test]
async fn a_failed_revoke_is_recorded_and_retried_and_a_crash_leaves_nothing_live() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(dir.path());
    let api = stand_in(public).await;
    let provider = Provider::GitHubApp(GitHubApp::new(&config(api.base(), private)).unwrap());
    let db = dir.path().join("leases.db");
    {
        let store = LeaseStore::open(&db).unwrap();
        let issued = provider.issue(&Scope::read(vec!["project".into()]), None).await.unwrap();
        let lease = NewLease {
            run: "gone".into(),
            provider: "github-app".into(),
            kind: Kind::Read,
            repositories: vec!["project".into()],
            permissions: vec![],
            issued_at: SystemTime::now(),
            expires_at: issued.expires_at,
        };
        store.insert(&lease, &issued.secret).unwrap();
        // The broker dies here, before the run's end was handled.
    }
    let store = LeaseStore::open(&db).unwrap();
    let orphans = store.orphaned(&["some-live-run".into()]).unwrap();
    assert_eq!(orphans.len(), 1);

    api.state.lock().unwrap().fail_revokes = 1;
    let now = SystemTime::now();
    let outcomes =
        revoke::record(&store, revoke::revoke_all(&provider, revoke::take(&store, &orphans).unwrap()).await, now)
            .unwrap();
    match &outcomes[..] {
        [Outcome::Failed { error, attempts: 1, retry_in, .. }] => {
            assert!(error.contains("GitHub answered 502 to revoking a token: Server Error"), "{error}");
            assert_eq!(*retry_in, Duration::from_secs(1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(api.live_tokens(), 1, "still live: the failure is not hidden");
    let due = store.due(now + Duration::from_secs(1)).unwrap();
    assert_eq!(due.len(), 1);
    let outcomes =
        revoke::record(&store, revoke::revoke_all(&provider, revoke::take(&store, &due).unwrap()).await, now).unwrap();
    assert!(matches!(outcomes[..], [Outcome::Revoked { .. }]), "{outcomes:?}");
    assert_eq!(api.live_tokens(), 0);
}

#[tokio::test]
async fn wrong_keys_scopes_and_deadlines_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(dir.path());
    let api = stand_in(public).await;

    // A key only its owner can read, and an RSA key at that.
    use std::os::unix::fs::PermissionsExt;
    let loose = dir.path().join("loose.pem");
    std::fs::copy(&private, &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = GitHubApp::new(&config(api.base(), loose)).err().unwrap().to_string();
    assert!(err.contains("is readable by others (mode 644); make it 0600"), "{err}");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a key").unwrap();
    std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(GitHubApp::new(&config(api.base(), junk)).err().unwrap().to_string().contains("not an RSA private key"));

    // Another App's key: GitHub cannot verify the JWT.
    let other = tempfile::tempdir().unwrap();
    let (other_private, _) = key_pair(other.path());
    let impostor = Provider::GitHubApp(GitHubApp::new(&config(api.base(), other_private)).unwrap());
    match impostor.issue(&Scope::read(vec!["project".into()]), None).await {
        Err(ProviderError::Refused { status: 401, message, .. }) => {
            assert_eq!(message, "A JSON web token could not be decoded")
        }
        other => panic!("{other:?}"),
    }

    let provider = Provider::GitHubApp(GitHubApp::new(&config(api.base(), private)).unwrap());
    let err = provider.issue(&Scope::read(vec!["elsewhere".into()]), None).await.unwrap_err().to_string();
    assert!(err.starts_with("GitHub answered 422 to an installation token: There is at least one repository"), "{err}");

    // No credential is issued past the run's deadline, and none outlives it.
    let past = SystemTime::now() - Duration::from_secs(1);
    assert!(matches!(provider.issue(&Scope::read(vec![]), Some(past)).await, Err(ProviderError::PastDeadline)));
    let soon = SystemTime::now() + Duration::from_secs(600);
    let issued = provider.issue(&Scope::read(vec!["project".into()]), Some(soon)).await.unwrap();
    assert_eq!(issued.expires_at, Some(soon));
    assert!(!format!("{issued:?}").contains(issued.secret.expose()));
}
