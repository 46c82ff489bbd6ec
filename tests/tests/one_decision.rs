//! Issue 37, item 1: the classifier names the action and a person's rule decides it,
//! the same way on every path an agent has. One push to `main` (a rule denies it) and
//! one to a feature branch (a rule allows it) through the harness's bash (the git
//! gateway asks about the real ref), Claude Code's hook (the real CLI, a scripted
//! model), an ACP agent's permission request and its terminal (whose push the gateway
//! judges, as the harness's): the same decision,
//! from the same rule, each time, and the allowed pushes land upstream through the
//! gateway (real `git http-backend`).

use std::os::unix::fs::PermissionsExt;

use cc_tests::bin;
use cc_tests::gateway_world::GatewayWorld;
use cc_tests::model_api::{ModelApi, text, tool};
use cc_tests::runs::text as output;
use serde_json::{Value, json};

const GIT_IDENTITY: &str = "export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid \
                            GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid GIT_TERMINAL_PROMPT=0;";

fn start(w: &GatewayWorld, args: &[&str]) -> String {
    let mut all = vec!["run", "start", "--conversation", &w.conversation];
    all.extend_from_slice(args);
    let out = w.sup.ccctl(&all);
    assert!(out.status.success(), "{}", output(&out).1);
    output(&out).0.trim().to_owned()
}

/// The gate's decisions about pushes of `branch`, as (decision, source), every path's.
fn push_decisions(w: &GatewayWorld, branch: &str) -> Vec<(String, String)> {
    let events = output(&w.sup.ccctl(&["--json", "events"])).0;
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "gate_decision")
        .map(|e| e["payload"].clone())
        .filter(|p| {
            let said = format!("{} {}", p["command_line"].as_str().unwrap_or(""), p["summary"].as_str().unwrap_or(""));
            p["effects"].to_string().contains("push_remote") || said.contains(&format!("HEAD:{branch}"))
        })
        .filter(|p| p.to_string().contains(branch))
        .map(|p| (p["decision"].as_str().unwrap_or("").to_owned(), p["source"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[test]
fn one_push_is_decided_the_same_way_by_the_same_rule_on_all_four_paths() {
    let model = ModelApi::start(vec![]);
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("model.key");
    std::fs::write(&key, "sk-scripted-key\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The model is one table: the run's model door reaches it, holding the key.
    let rules = "";
    let config = format!(
        "[models.anthropic]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:{}\"\nkey_file = \"{}\"\n",
        model.port,
        key.display()
    );
    let w = GatewayWorld::with_config(true, rules, &config);
    let harness = w.start_run();
    let claude = start(&w, &["--adapter", "claude-code", "--network", "on"]);
    let work = w.sup.data_dir.join(format!("conversations/{}/agents/default/work", w.conversation));
    let standin = work.join("acp-standin");
    let acp = start(&w, &["--adapter", "acp", "--agent-command", &format!("'{}' --quiet", standin.display())]);
    std::fs::copy(bin("acp-standin"), &standin).unwrap();
    std::fs::set_permissions(&standin, std::fs::Permissions::from_mode(0o755)).unwrap();

    // 1. The harness's bash: a commit to push, then main (refused by the gateway on the
    //    gate's word) and a feature branch (lands).
    let out = w.bash(&harness, "git commit -q --allow-empty -m work && git push origin HEAD:main 2>&1; true");
    let said = output(&out).0;
    assert!(said.contains("(Control Center policy: pushes to main go through a pull request)"), "{said}");
    let out = w.bash(&harness, "git push -q origin HEAD:refs/heads/feature/harness 2>&1 && echo pushed");
    assert!(output(&out).0.contains("pushed"), "{}", output(&out).0);

    // 2. Claude Code's hook, the real CLI.
    let main = "git push origin HEAD:main";
    let feature = format!("{GIT_IDENTITY} git push -q origin HEAD:refs/heads/feature/claude && echo pushed");
    model.set_turns(vec![
        vec![tool("Bash", json!({ "command": main, "description": "push main" }))],
        vec![tool("Bash", json!({ "command": feature, "description": "push a branch" }))],
        vec![text("done")],
    ]);
    let out = w.sup.ccctl(&["run", "prompt", &claude, "push", "--timeout", "120"]);
    let events = output(&w.sup.ccctl(&["run", "events", &claude])).0;
    assert!(out.status.success(), "{}\n{events}", output(&out).1);
    let results = model.tool_results();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1 && results[0].0.contains("pushes to main go through a pull request"), "{results:?}");
    assert!(!results[1].1 && results[1].0.contains("pushed"), "{results:?}");

    // 3 and 4. The ACP agent's permission requests and its terminal.
    let script = format!(
        "permission execute {{\"command\":\"{main}\"}}\n\
         permission execute {{\"command\":\"git push origin HEAD:feature/acp\"}}\n\
         terminal 0 {main}\n\
         terminal 0 {GIT_IDENTITY} git push -q origin HEAD:refs/heads/feature/acp && echo pushed\n"
    );
    let out = w.sup.ccctl(&["--json", "run", "prompt", &acp, &script, "--timeout", "120"]);
    assert!(out.status.success(), "{}", output(&out).1);
    let answer: String = output(&out)
        .0
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "agent_text")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let o: Vec<&str> = answer.lines().filter_map(|l| l.split_once(" => ").map(|(_, o)| o)).collect();
    assert_eq!(o.len(), 4, "{answer}");
    assert_eq!(&o[..2], ["ok no", "ok yes"], "{answer}");
    // A terminal's push, like the harness's, is judged by the gateway on the real ref.
    assert!(
        o[2].starts_with("ok exit=Some(1)")
            && o[2].contains("(Control Center policy: pushes to main go through a pull request)"),
        "{}",
        o[2]
    );
    assert!(o[3].starts_with("ok exit=Some(0)") && o[3].contains("pushed"), "{}", o[3]);

    // The allowed pushes landed; main did not move.
    for branch in ["feature/harness", "feature/claude", "feature/acp"] {
        assert!(w.upstream_ref(branch).is_some(), "{branch} landed upstream");
    }
    assert_eq!(w.upstream_ref("main").as_deref(), Some(w.main.as_str()));
    // Every path's refusal of main came from the same rule.
    let main_decisions = push_decisions(&w, "main");
    let denied: Vec<&(String, String)> = main_decisions.iter().filter(|(d, _)| d == "deny").collect();
    assert!(denied.len() >= 4, "harness, hook, permission, terminal: {main_decisions:?}");
    assert!(denied.iter().all(|(_, source)| *source == denied[0].1 && source.contains("rules.toml")), "{denied:?}");
    drop(keys);
}
