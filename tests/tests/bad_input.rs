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
    for args in [&["run", "events", "no-such-run"][..], &["run", "events", "no-such-run", "--follow"]] {
        let out = sup.ccctl(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} exited 0");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.starts_with("ccctl: ") && err.contains("no-such-run"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `--json`'s one convention (docs/reference/cli.md): every error is one JSON object
/// on stderr with the message, the API's reason (or null) and the exit status it
/// exits with; times are RFC 3339 strings, null where there is none.
#[test]
fn with_json_every_error_is_one_json_object_and_every_time_one_format() {
    let f = cc_tests::runs::fixture(None);
    let run = f.start_run("chat");
    let cases: &[(&[&str], Option<&str>)] = &[
        (&["run", "show", "no-such-run"], Some("RUN_NOT_FOUND")),
        (&["run", "events", "no-such-run"], Some("RUN_NOT_FOUND")),
        (&["run", "stop", "no-such-run"], Some("RUN_NOT_FOUND")),
        (&["tool", "no-such-run", "read", "README.md"], Some("RUN_NOT_FOUND")),
        (&["conversation", "rm", "no-such-conversation"], Some("CONVERSATION_NOT_FOUND")),
        (&["repo", "rm", "no-such-repo"], Some("REPOSITORY_NOT_FOUND")),
        (&["helpers", "restart", "no-such-helper"], Some("HELPER_NOT_FOUND")),
        (&["terminal", "rm", "no-such-terminal"], Some("TERMINAL_NOT_FOUND")),
        (&["tool", &run, "bash", "--", "rm -rf /"], Some("GATE_DENIED")),
        (&["tool", &run, "read", "/etc/shadow"], Some("CONFINEMENT_REFUSED")),
        (&["bogus-command"], None),
    ];
    for (args, reason) in cases {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = f.sup.ccctl(&all);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        let error: serde_json::Value =
            serde_json::from_str(&err).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {err}"));
        assert!(
            error["error"].as_str().is_some_and(|m| !m.is_empty() && !m.starts_with("ccctl: ")),
            "{args:?}: {error}"
        );
        assert_eq!(error["reason"].as_str(), *reason, "{args:?}: {error}");
        assert_eq!(error["exit_code"].as_i64(), out.status.code().map(i64::from), "{args:?}: {error}");
    }

    let rfc3339 =
        |v: &serde_json::Value| v.as_str().is_some_and(|t| t.len() == 24 && t.ends_with('Z') && t.contains('T'));
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    assert!(rfc3339(&shown["started"]), "{shown}");
    assert!(shown["ended"].is_null(), "{shown}");
    assert!(shown.as_object().unwrap().keys().all(|k| !k.ends_with("_unix_ms")), "{shown}");
    let workspaces = f.sup.ccctl_json(&["workspace", "list"]);
    let default = workspaces.as_array().unwrap().iter().find(|w| w["name"] == "default").unwrap().clone();
    assert!(rfc3339(&default["created"]) && !default["created"].as_str().unwrap().starts_with("1970"), "{default}");
    let status = f.sup.ccctl_json(&["status"]);
    let probe = f.sup.ccctl_json(&["sandbox", "probe"]);
    assert!(status["limits"].is_string() && probe["limits"].is_string(), "{status} {probe}");
}
