//! Who may talk to which socket (issue 2; ATTACKS.md 19, 29, 41).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use cc_proto::broker::v1::GetStatusRequest;
use cc_proto::broker::v1::broker_client::BrokerClient;
use cc_proto::client::PresentSecret;
use cc_proto::secret::PeerSecret;
use cc_tests::{Options, Supervisor, bin};
use tonic::service::interceptor::InterceptedService;

const NOBODY: u32 = 65534;

#[test]
fn another_uid_is_refused_at_both_layers() {
    if !cc_tests::privileged("switching to another uid") {
        return;
    }
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let as_nobody = || {
        let mut cmd = std::process::Command::new(bin("ccctl"));
        cmd.arg("--socket").arg(sup.api_socket()).arg("status").uid(NOBODY).gid(NOBODY);
        cmd.output().expect("run ccctl as nobody")
    };

    // Layer 1: the 0700 directory and 0600 socket keep another uid out entirely.
    let out = as_nobody();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("ccctl: permission denied on"), "{err}");

    // Layer 2: even with the file modes opened up, SO_PEERCRED refuses the caller.
    // Only what lies below the test's own temporary directory is opened up.
    let opened =
        [sup.api_socket(), sup.data_dir.join("sock"), sup.data_dir.clone(), sup.data_dir.parent().unwrap().to_owned()];
    for path in &opened {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o777)).unwrap();
    }
    let out = as_nobody();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with(&format!("ccctl: peer uid {NOBODY} may not use this socket")), "{err}");
    assert_eq!(err.lines().count(), 1);

    // And the supervisor still serves its owner.
    assert!(sup.ccctl(&["status"]).status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_socket_refuses_callers_without_the_secret() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let socket = sup.data_dir.join("sock/broker.sock");

    // No secret at all: neither the helper's service nor its health check answers.
    let channel = cc_proto::client::connect(&socket).await.unwrap();
    let err = BrokerClient::new(channel.clone()).get_status(GetStatusRequest {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .unwrap_err();
    assert_eq!(health.code(), tonic::Code::Unauthenticated);

    // A made-up secret, under the supervisor's name or another's.
    for peer in ["supervisor", "gateway", "runner"] {
        let fake = PresentSecret::new(peer, &PeerSecret::generate().unwrap());
        let err = BrokerClient::new(InterceptedService::new(channel.clone(), fake))
            .get_status(GetStatusRequest {})
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{peer}: {err:?}");
        assert_eq!(err.message(), "peer secret rejected");
    }
    // The helper keeps serving its real peer.
    let status = sup.ccctl_json(&["status"]);
    assert!(status["helpers"].as_array().unwrap().iter().all(|h| h["serving"] == true), "{status}");
}

#[test]
fn ccctl_without_a_supervisor_says_how_to_start_one() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [&["status"][..], &["helpers"], &["events"], &["helpers", "restart", "broker"]] {
        let out =
            std::process::Command::new(bin("ccctl")).arg("--data-dir").arg(tmp.path()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("ccctl: no supervisor is listening on"), "{err}");
        assert!(err.contains("start one with `cc-supervisor --data-dir"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
}
