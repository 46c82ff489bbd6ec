//! The `github-app` provider against a stand-in GitHub API that speaks the real wire
//! format: it verifies the App JWT's RS256 signature with the App's public key, issues
//! installation tokens of no fixed length or shape, honours the repositories and
//! permissions asked for, and revokes tokens with `DELETE /installation/token`.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use cc_broker::credentials::{Provider, ProviderError, Scope};
use cc_broker::github_app::{GitHubApp, GitHubAppConfig};
use cc_broker::leases::{Kind, LeaseStore, NewLease};
use cc_broker::revoke::{self, Outcome};
use cc_tests::github_api::{APP_ID, GitHubApi, INSTALLATION, key_pair};

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

/// The stand-in, started off this test's runtime (it has one of its own).
async fn stand_in(public_key: Vec<u8>) -> GitHubApi {
    tokio::task::spawn_blocking(move || GitHubApi::start(public_key)).await.unwrap()
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
    assert!(api.live_tokens().is_empty());
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

    api.fail_revokes(1);
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
    assert_eq!(api.live_tokens().len(), 1, "still live: the failure is not hidden");
    let due = store.due(now + Duration::from_secs(1)).unwrap();
    assert_eq!(due.len(), 1);
    let outcomes =
        revoke::record(&store, revoke::revoke_all(&provider, revoke::take(&store, &due).unwrap()).await, now).unwrap();
    assert!(matches!(outcomes[..], [Outcome::Revoked { .. }]), "{outcomes:?}");
    assert!(api.live_tokens().is_empty());
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
