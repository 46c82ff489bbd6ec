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
    assert_eq!(names, ["harness", "claude-code", "claude-code-nosandbox"]);
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
