//! DESIGN.md §2, trust rule 8, checked on the source and the build: no process that
//! holds more than one run parses an agent's protocol. The agent's protocols are
//! parsed by the run's runner (`runner/src/adapters/`); the supervisor relays agent
//! bytes unread and receives typed steps.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is in the workspace").to_owned()
}

#[test]
fn the_supervisor_links_no_agent_protocol_parser() {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-p", "cc-supervisor", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(workspace())
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.lines().any(|l| l.starts_with("cc-policy ")), "the tree was read: {tree}");
    // ACP's and MCP's SDKs, and the crates that hold their drivers.
    for parser in ["agent-client-protocol ", "rmcp ", "cc-runner ", "cc-gateway "] {
        let linked: Vec<&str> = tree.lines().filter(|l| l.starts_with(parser)).collect();
        assert!(linked.is_empty(), "cc-supervisor links {linked:?}");
    }
}

/// Every supervisor module that reads a launch's or a tool's output relays it: none
/// of them decodes JSON.
#[test]
fn no_supervisor_module_that_reads_an_agents_output_decodes_json() {
    let mut reading = Vec::new();
    let mut stack = vec![workspace().join("supervisor/src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap_or_default();
            if source.contains("Event::Stdout(") || source.contains("ToRunner::Stdout(") {
                reading.push(path.clone());
                assert!(
                    !source.contains("serde_json::from_"),
                    "{} reads an agent's output and decodes JSON",
                    path.display()
                );
            }
        }
    }
    let names: Vec<String> = reading.iter().filter_map(|p| Some(p.file_name()?.to_str()?.to_owned())).collect();
    for relay in ["prompt.rs", "acp_link.rs"] {
        assert!(names.iter().any(|n| n == relay), "the check saw the relays: {names:?}");
    }
}
