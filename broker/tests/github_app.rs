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

/// The broker's token RPCs, called as each peer: the read token goes to the gateway
/// and the supervisor; write tokens (one repository of the run, contents:write) only
/// to the gateway, each its own lease, revoked on request and at the run's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_go_only_to_the_peers_that_may_ask_and_write_tokens_are_leases() {
    use cc_proto::auth::Caller;
    use cc_proto::broker::v1 as pb;
    use cc_proto::broker::v1::broker_server::Broker;

    let dir = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(dir.path());
    let api = stand_in(public).await;
    let credentials = format!(
        "provider = \"github-app\"\n[github_app]\napp_id = \"{APP_ID}\"\ninstallation_id = {INSTALLATION}\n\
         private_key = \"{}\"\napi_base = \"{}\"\n",
        private.display(),
        api.base()
    );
    let context = cc_proto::helper::HelperContext {
        bootstrap: cc_proto::bootstrap::Bootstrap {
            name: "broker".into(),
            socket: dir.path().join("broker.sock"),
            data_dir: dir.path().to_owned(),
            log_format: cc_proto::logging::LogFormat::Text,
            peers: Default::default(),
            supervisor_pid: 0,
            options: [("credentials".to_owned(), credentials)].into(),
            calls: Default::default(),
        },
        started_unix_ms: 0,
    };
    let broker = cc_broker::broker(&context).unwrap();
    fn as_peer<T>(peer: &str, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.extensions_mut().insert(Caller { uid: 0, peer: Some(peer.to_owned()) });
        request
    }
    let read = |peer: &str| as_peer(peer, pb::GetReadTokenRequest { run_id: "r1".into() });
    let write = |peer: &str, repository: &str| {
        as_peer(peer, pb::IssueWriteTokenRequest { run_id: "r1".into(), repository: repository.into(), access: 0 })
    };
    let issues = |peer: &str| {
        let access = pb::WriteAccess::Issues as i32;
        as_peer(peer, pb::IssueWriteTokenRequest { run_id: "r1".into(), repository: "octo/project".into(), access })
    };

    // No run yet: nothing to give.
    let err = broker.get_read_token(read("gateway")).await.unwrap_err();
    let reason = cc_proto::reasons::reason_of(&err).map(|(reason, _)| reason);
    assert_eq!(reason.as_deref(), Some(cc_proto::reasons::NO_CREDENTIAL), "{}", err.message());
    let register = pb::RegisterRunRequest {
        run_id: "r1".into(),
        github_repositories: vec!["octo/project".into()],
        deadline: None,
    };
    broker.register_run(as_peer("supervisor", register)).await.unwrap();

    let from_gateway = broker.get_read_token(read("gateway")).await.unwrap().into_inner();
    let from_supervisor = broker.get_read_token(read("supervisor")).await.unwrap().into_inner();
    assert_eq!(from_gateway.token, from_supervisor.token);
    assert_eq!(api.token(&from_gateway.token).unwrap().permissions["contents"], "read");
    let err = broker.get_read_token(read("runner")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);

    // Write tokens: the gateway's alone, one repository of the run's.
    assert_eq!(
        broker.issue_write_token(write("supervisor", "octo/project")).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    let err = broker.issue_write_token(write("gateway", "octo/other")).await.unwrap_err();
    assert!(err.message().contains("octo/other is not a repository of run r1"), "{}", err.message());
    let first = broker.issue_write_token(write("gateway", "Octo/Project")).await.unwrap().into_inner();
    let granted = api.token(&first.token).unwrap();
    assert_eq!(
        (granted.repositories.as_slice(), granted.permissions["contents"].as_str()),
        (&["project".to_owned()][..], Some("write"))
    );
    assert_eq!(granted.permissions.len(), 1, "a write token may do nothing else");
    let revoke = pb::RevokeWriteTokenRequest { run_id: "r1".into(), lease_id: first.lease_id };
    let done = broker.revoke_write_token(as_peer("gateway", revoke.clone())).await.unwrap().into_inner();
    assert_eq!(done.revocation.unwrap().outcome, pb::RevocationOutcome::Revoked as i32);
    assert!(api.token(&first.token).unwrap().revoked);
    // Revoking again is not an error; a lease of another kind or run is not found.
    broker.revoke_write_token(as_peer("gateway", revoke)).await.unwrap();
    let read_lease = pb::RevokeWriteTokenRequest { run_id: "r1".into(), lease_id: from_gateway.lease_id };
    assert_eq!(
        broker.revoke_write_token(as_peer("gateway", read_lease)).await.unwrap_err().code(),
        tonic::Code::NotFound
    );

    // An issues token: the supervisor's alone (a tracker write), issues and nothing else.
    assert_eq!(broker.issue_write_token(issues("gateway")).await.unwrap_err().code(), tonic::Code::PermissionDenied);
    let tracker = broker.issue_write_token(issues("supervisor")).await.unwrap().into_inner();
    let granted = api.token(&tracker.token).unwrap();
    assert_eq!((granted.permissions.len(), granted.permissions["issues"].as_str()), (1, Some("write")));
    let revoke = pb::RevokeWriteTokenRequest { run_id: "r1".into(), lease_id: tracker.lease_id };
    broker.revoke_write_token(as_peer("supervisor", revoke)).await.unwrap();
    assert!(api.token(&tracker.token).unwrap().revoked);

    // A write token the gateway never revoked goes with the run.
    let second = broker.issue_write_token(write("gateway", "octo/project")).await.unwrap().into_inner();
    broker.end_run(as_peer("supervisor", pb::EndRunRequest { run_id: "r1".into() })).await.unwrap();
    assert!(api.token(&second.token).unwrap().revoked && api.live_tokens().is_empty());
    let leases =
        broker.list_leases(as_peer("supervisor", pb::ListLeasesRequest { run_id: "r1".into() })).await.unwrap();
    let kinds: Vec<String> = leases.into_inner().leases.into_iter().map(|l| l.kind).collect();
    assert_eq!(kinds, ["read", "write", "write", "write"]);
}
