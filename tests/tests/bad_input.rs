//! Malformed and hostile input to the client API (ATTACKS.md 41): each gets an error,
//! and the supervisor keeps serving with nothing changed.

use std::io::{Read, Write};
use std::time::Duration;

use cc_proto::supervisor::v1 as pb;
use cc_tests::{Options, Supervisor};

/// `RestartHelperRequest` with its name as raw bytes, so that invalid UTF-8 can be sent.
#[derive(Clone, PartialEq, prost::Message)]
struct RawRestart {
    #[prost(bytes = "vec", tag = "1")]
    name: Vec<u8>,
    #[prost(bytes = "vec", tag = "99")]
    unknown_field: Vec<u8>,
}

async fn raw_restart(sup: &Supervisor, request: RawRestart) -> Result<pb::RestartHelperResponse, tonic::Status> {
    let channel = cc_proto::client::connect(&sup.api_socket()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/cc.supervisor.v1.System/RestartHelper");
    let codec = tonic_prost::ProstCodec::<RawRestart, pb::RestartHelperResponse>::default();
    grpc.unary(tonic::Request::new(request), path, codec).await.map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_refused_and_change_nothing() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let pids = sup.helper_pids();

    let invalid_utf8 =
        raw_restart(&sup, RawRestart { name: vec![0x62, 0xff, 0xfe], unknown_field: vec![] }).await.unwrap_err();
    assert!(matches!(invalid_utf8.code(), tonic::Code::Internal | tonic::Code::InvalidArgument), "{invalid_utf8:?}");

    let oversized =
        raw_restart(&sup, RawRestart { name: vec![b'a'; 5 * 1024 * 1024], unknown_field: vec![] }).await.unwrap_err();
    assert!(matches!(oversized.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted), "{oversized:?}");

    // Unknown fields are ignored, the known one still decides: an unknown helper.
    let unknown =
        raw_restart(&sup, RawRestart { name: b"broker2".to_vec(), unknown_field: vec![0; 64] }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument);

    assert_eq!(sup.helper_pids(), pids, "nothing was restarted");
}

#[test]
fn garbage_on_the_socket_is_dropped_and_the_api_keeps_serving() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        &[0u8; 4096],
    ] {
        let mut stream = std::os::unix::net::UnixStream::connect(sup.api_socket()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = stream.write_all(garbage);
        let mut sink = Vec::new();
        // The server answers with an error frame or closes; either way the read ends.
        let _ = stream.read_to_end(&mut sink);
    }
    let status = sup.ccctl_json(&["status"]);
    assert!(status["helpers"].as_array().unwrap().iter().all(|h| h["serving"] == true));
}

/// A directory that is no checkout: the fix named is the one that helps, `--repo`
/// only when it was not given. Refused before any supervisor is started or asked.
#[test]
fn exec_outside_a_checkout_names_the_fix_that_helps() {
    let tmp = tempfile::tempdir().unwrap();
    let exec = |args: &[&str]| {
        std::process::Command::new(cc_tests::bin("ccctl"))
            .args(["--data-dir", tmp.path().join("data").to_str().unwrap(), "exec"])
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap()
    };
    let given = exec(&["--repo", tmp.path().to_str().unwrap(), "--", "true"]);
    let err = String::from_utf8_lossy(&given.stderr);
    assert!(!given.status.success() && err.contains("not inside a git checkout"), "{err}");
    assert!(err.trim_end().ends_with("name a directory inside a checkout"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let cwd = exec(&["--", "true"]);
    let err = String::from_utf8_lossy(&cwd.stderr);
    assert!(err.trim_end().ends_with("pass --repo"), "{err}");
    assert!(!tmp.path().join("data").exists(), "a refused exec made a data directory");
}

/// `ccctl run events` of a run that does not exist fails with one line naming it,
/// rather than printing nothing and exiting 0 as if the run were quiet.
#[test]
fn events_of_an_unknown_run_are_an_error() {
    let sup = Supervisor::start(Options::default());
    for args in [&["run", "events", "no-such-run"][..], &["--json", "run", "events", "no-such-run"]] {
        let out = sup.ccctl(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} exited 0");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.starts_with("ccctl: ") && err.contains("no-such-run"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}
