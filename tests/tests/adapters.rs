//! Issue 22: `ccctl adapters`, the enforcement matrix. Every cell names the test that
//! tries its claim; each named test must exist, and a host without a sandbox backend
//! claims no envelope for anyone.

use cc_tests::{Options, Supervisor};

fn matrix(sup: &Supervisor) -> serde_json::Value {
    sup.ccctl_json(&["adapters"])
}

#[test]
fn every_cell_of_the_matrix_names_a_test_that_exists() {
    let sup = Supervisor::start(Options::default());
    let m = matrix(&sup);
    assert_eq!(m["backend"], "native", "{m}");
    let adapters = m["adapters"].as_array().unwrap();
    let names: Vec<&str> = adapters.iter().map(|a| a["adapter"].as_str().unwrap()).collect();
    assert_eq!(names, ["harness", "claude-code", "claude-code-nosandbox", "acp"]);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for adapter in adapters {
        let layers = adapter["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 8, "{adapter}");
        for layer in layers {
            let proof = layer["proof"].as_str().unwrap();
            let (file, name) = proof.split_once("::").unwrap();
            let source = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{proof}: {e}"));
            assert!(source.contains(&format!("fn {name}(")), "{proof} names no test");
            assert!(["yes", "partial", "no"].contains(&layer["coverage"].as_str().unwrap()), "{layer}");
        }
    }
    // The adapter without an envelope claims none of the envelope's layers.
    let nosandbox = &adapters[2]["layers"];
    for layer in ["os_envelope", "sanitized_environment", "network_allowlist_by_the_os", "worktree_isolation"] {
        let cell = nosandbox.as_array().unwrap().iter().find(|l| l["layer"] == layer).unwrap();
        assert_eq!(cell["coverage"], "no", "{cell}");
    }
    let text = String::from_utf8_lossy(&sup.ccctl(&["adapters"]).stdout).into_owned();
    assert!(text.starts_with("sandbox backend=native") && text.contains("proof: tests/tests/"), "{text}");
}

#[test]
fn without_a_sandbox_backend_no_adapter_claims_an_envelope() {
    let sup = Supervisor::start(Options { args: vec!["--sandbox".into(), "off".into()], ..Default::default() });
    let m = matrix(&sup);
    assert_eq!(m["backend"], "none", "{m}");
    for adapter in m["adapters"].as_array().unwrap() {
        for layer in adapter["layers"].as_array().unwrap() {
            if layer["layer"] == "os_envelope" {
                assert_eq!(layer["coverage"], "no", "{adapter}");
            }
            if layer["layer"] == "network_allowlist_by_the_os" {
                assert_ne!(layer["coverage"], "yes", "{adapter}");
            }
        }
    }
}

#[test]
fn diagnose_probes_a_run_inside_its_envelope_and_says_how_to_verify_each_check() {
    let f = cc_tests::runs::fixture(None);
    let run = f.start_run("chat");
    // Without an approver the gate refuses the network probe: that is no pass.
    let out = f.sup.ccctl(&["--json", "diagnose", &run]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{report}");
    let network = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "the network goes through the run's proxy and its allowlist")
        .unwrap();
    assert_eq!(network["ok"], false, "{network}");
    assert!(network["found"].as_str().unwrap().starts_with("not checked"), "{network}");

    // With one, the probe reaches the run's proxy and every check passes.
    let (mut approver, _its_output) = f.sup.approver("diagnose", &["--answer", "allow"]);
    let out = f.sup.ccctl(&["--json", "diagnose", &run]);
    let _ = approver.kill();
    let _ = approver.wait();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{report}");
    let checks = report["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["check"].as_str().unwrap()).collect();
    for expected in [
        "sandbox backend",
        "a write outside the run's roots fails",
        "the environment is clean",
        "the network goes through the run's proxy and its allowlist",
        "git remotes are rewritten to the gateway",
        "the layers that reach adapter harness",
    ] {
        assert!(names.contains(&expected), "{expected}: {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("the registered checkout")), "{names:?}");
    for check in checks {
        assert_eq!(check["ok"], true, "{check}");
        assert!(!check["verify"].as_str().unwrap().is_empty(), "{check}");
    }
    assert!(!f.checkout.join(".cc-diagnose").exists());

    // Each verify line is a command that, run by hand, shows the same.
    let verify = checks.iter().find(|c| c["check"] == "git remotes are rewritten to the gateway").unwrap();
    let words = shlex::split(verify["verify"].as_str().unwrap()).unwrap();
    assert_eq!(&words[..2], ["ccctl", "tool"]);
    let by_hand = f.sup.ccctl(&words[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert!(String::from_utf8_lossy(&by_hand.stdout).contains("127.0.0.1:41418"));
}

#[test]
fn diagnose_fails_when_there_is_no_envelope() {
    let f =
        cc_tests::runs::fixture_with(Options { args: vec!["--sandbox".into(), "off".into()], ..Default::default() });
    let run = f.start_run("chat");
    let out = f.sup.ccctl(&["diagnose", &run]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("FAIL  sandbox backend: none"), "{text}");
    // Without an envelope nothing bridges the gateway in, and diagnose says so.
    assert!(text.contains("FAIL  git remotes are rewritten to the gateway"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).trim().ends_with("failed"), "{text}");
}
