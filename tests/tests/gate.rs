//! The gate with real clients over the socket (issue 5): approvals that fail closed,
//! rules files that load or stop start-up, and ccctl's policy, tools and approvals.

use std::io::BufRead;
use std::time::{Duration, Instant};

use cc_proto::common::v1::{Decision, EffectClass, Mode};
use cc_proto::supervisor::v1 as pb;
use cc_tests::approver::Approver;
use cc_tests::{Options, Supervisor, all_events, payload};

const DENY_MAIN: &str = "# pushes\n\n[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"direct pushes to main are not allowed\"\n";

/// A supervisor whose data directory holds `rules.toml` and a config naming it.
fn with_rules(rules: &str, timeout_ms: u64) -> (tempfile::TempDir, Supervisor) {
    let tmp = tempfile::Builder::new().prefix("cc-gate-").tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("rules.toml"), rules).unwrap();
    let config = format!("[gate]\nrules = \"rules.toml\"\napproval_timeout_ms = {timeout_ms}\n");
    let sup = Supervisor::start_on(&data, Options { config: Some(config), ..Options::default() });
    (tmp, sup)
}

async fn gate(sup: &Supervisor) -> cc_client::Gate {
    cc_client::connect_gate(&sup.api_socket()).await.expect("connect")
}

/// An action that asks under the default rules.
fn install_action(summary: &str) -> pb::Action {
    pb::Action {
        effects: vec![EffectClass::InstallPackage as i32],
        mode: Mode::Chat as i32,
        summary: summary.into(),
        run_id: "r-test".into(),
        ..Default::default()
    }
}

async fn decide(sup: &Supervisor, action: pb::Action) -> pb::DecideActionResponse {
    gate(sup).await.decide_action(pb::DecideActionRequest { action: Some(action) }).await.expect("decide").into_inner()
}

/// Asks the gate from a task of its own, so that the test can answer meanwhile.
fn spawn_decide(sup: &Supervisor, summary: &str) -> tokio::task::JoinHandle<pb::DecideActionResponse> {
    let (socket, action) = (sup.api_socket(), install_action(summary));
    tokio::spawn(async move {
        let mut gate = cc_client::connect_gate(&socket).await.unwrap();
        gate.decide_action(pb::DecideActionRequest { action: Some(action) }).await.unwrap().into_inner()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_no_approver_is_denied_at_once_and_recorded() {
    let (_tmp, sup) = with_rules("", 300_000);
    let started = Instant::now();
    let reply = decide(&sup, install_action("npm install left-pad")).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(reply.decision, Decision::Deny as i32);
    assert_eq!(reply.reason, "no approver connected");
    assert_eq!(reply.verdict.unwrap().decision, Decision::Ask as i32);

    let events = all_events(&mut sup.client().await).await;
    let decision = events.iter().rev().find(|e| e.kind == "gate_decision").expect("a gate_decision event");
    let p = payload(decision);
    assert_eq!(decision.subject, "run:r-test");
    assert_eq!((p["decision"].as_str(), p["policy"].as_str()), (Some("deny"), Some("ask")));
    assert_eq!(p["reason"], "no approver connected");
    assert_eq!(p["summary"], "npm install left-pad");
    assert_eq!(p["effects"], serde_json::json!(["install_package"]));
    assert!(events.iter().any(|e| e.kind == "approval_asked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_answers_allow_and_deny_and_is_named_in_the_decision() {
    let (_tmp, sup) = with_rules("", 300_000);
    let mut approver = Approver::connect(&sup, "alice").await;
    for (answer, want) in [(Decision::Allow, Decision::Allow), (Decision::Deny, Decision::Deny)] {
        let asking = spawn_decide(&sup, "pip install x");
        let q = approver.question().await;
        assert_eq!(q.action.as_ref().unwrap().summary, "pip install x");
        assert!(cc_proto::time::unix_ms(q.expire_time.as_ref()) > cc_proto::time::unix_ms(q.ask_time.as_ref()));
        approver.answer(&q.question_id, answer).await;
        let reply = asking.await.unwrap();
        assert_eq!(reply.decision, want as i32, "{reply:?}");
        assert!(reply.decided_by.starts_with("alice"), "{reply:?}");
        let resolved = approver.resolved().await;
        assert_eq!((resolved.question_id, resolved.decision), (q.question_id, want as i32));
    }
    let events = all_events(&mut sup.client().await).await;
    let decided: Vec<_> = events.iter().filter(|e| e.kind == "gate_decision").map(payload).collect();
    assert_eq!(decided.len(), 2);
    assert!(decided.iter().all(|p| p["decided_by"].as_str().unwrap().starts_with("alice")), "{decided:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_ask_times_out_as_a_deny() {
    let (_tmp, sup) = with_rules("", 300);
    let mut approver = Approver::connect(&sup, "sleepy").await;
    let started = Instant::now();
    let asking = spawn_decide(&sup, "cargo install x");
    let q = approver.question().await;
    let reply = asking.await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(reply.decision, Decision::Deny as i32);
    assert_eq!(reply.reason, "no answer within 300ms");
    let resolved = approver.resolved().await;
    assert_eq!((resolved.question_id, resolved.decision), (q.question_id.clone(), Decision::Deny as i32));
    // A late answer changes nothing, and the approver is still registered.
    approver.answer(&q.question_id, Decision::Allow).await;
    let again = spawn_decide(&sup, "second");
    let q2 = approver.question().await;
    assert_ne!(q2.question_id, q.question_id);
    approver.answer(&q2.question_id, Decision::Allow).await;
    assert_eq!(again.await.unwrap().decision, Decision::Allow as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_the_first_answer_wins_and_the_other_sees_it_resolved() {
    let (_tmp, sup) = with_rules("", 300_000);
    let mut first = Approver::connect(&sup, "first").await;
    let mut second = Approver::connect(&sup, "second").await;
    let asking = spawn_decide(&sup, "yarn add x");
    let q1 = first.question().await;
    let q2 = second.question().await;
    assert_eq!(q1.question_id, q2.question_id);
    second.answer(&q2.question_id, Decision::Deny).await;
    let reply = asking.await.unwrap();
    assert_eq!(reply.decision, Decision::Deny as i32);
    assert!(reply.decided_by.starts_with("second"), "{reply:?}");
    let seen = first.resolved().await;
    assert_eq!(seen.question_id, q1.question_id);
    assert!(seen.decided_by.starts_with("second"), "{seen:?}");
    // The loser's answer, after the fact, is ignored.
    first.answer(&q1.question_id, Decision::Allow).await;
    let events = all_events(&mut sup.client().await).await;
    assert_eq!(events.iter().filter(|e| e.kind == "gate_decision").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_outlives_one_of_two_approvers_and_goes_to_the_other() {
    let (_tmp, sup) = with_rules("", 300_000);
    let mut leaving = Approver::connect(&sup, "leaving").await;
    let mut staying = Approver::connect(&sup, "staying").await;
    let asking = spawn_decide(&sup, "gem install x");
    let q = leaving.question().await;
    drop(leaving);
    let q2 = staying.question().await;
    assert_eq!(q.question_id, q2.question_id);
    staying.answer(&q2.question_id, Decision::Allow).await;
    let reply = asking.await.unwrap();
    assert_eq!(reply.decision, Decision::Allow as i32);
    assert!(reply.decided_by.starts_with("staying"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccctl_answers_for_scripts_and_an_approver_killed_mid_question_is_a_deny() {
    let (_tmp, sup) = with_rules("", 300_000);
    let (mut scripted, _out) = sup.approver("cli", &["--answer", "allow", "--count", "1"]);
    let reply = decide(&sup, install_action("npm ci")).await;
    assert_eq!(reply.decision, Decision::Allow as i32, "{reply:?}");
    assert!(reply.decided_by.starts_with("cli"), "{reply:?}");
    assert!(scripted.wait().unwrap().success(), "--count 1 exits after one answer");

    // An interactive approver that is killed while the question is on its screen.
    let (mut interactive, mut out) = sup.approver("cli", &[]);
    let asking = spawn_decide(&sup, "apt install x");
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("apt install x"), "{line:?}");
    interactive.kill().unwrap();
    interactive.wait().unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), asking).await.expect("decided in time").unwrap();
    assert_eq!(reply.decision, Decision::Deny as i32);
    assert!(reply.reason.contains("disconnected"), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_decide_with_their_source_and_tools_outside_the_mode_are_denied() {
    let (_tmp, sup) = with_rules(DENY_MAIN, 300_000);
    let push = pb::Action {
        effects: vec![EffectClass::RunCommand as i32],
        tool: "bash".into(),
        command_line: "git commit -m x && git push origin HEAD:main".into(),
        ..Default::default()
    };
    let reply = decide(&sup, push).await;
    assert_eq!(reply.decision, Decision::Deny as i32);
    assert_eq!(reply.reason, "direct pushes to main are not allowed");
    let verdict = reply.verdict.unwrap();
    assert!(verdict.source.ends_with("rules.toml:3"), "{verdict:?}");
    assert_eq!(reply.decided_by, "policy");

    let write = pb::Action {
        effects: vec![EffectClass::WriteFile as i32],
        tool: "write".into(),
        mode: Mode::Plan as i32,
        ..Default::default()
    };
    let reply = decide(&sup, write).await;
    assert_eq!((reply.decision, reply.reason.as_str()), (Decision::Deny as i32, "tool not available in plan mode"));

    let bad = pb::Action { effects: vec![99], ..Default::default() };
    let err = gate(&sup).await.decide_action(pb::DecideActionRequest { action: Some(bad) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("unknown effect class 99"), "{err}");
    let err = gate(&sup).await.decide_action(pb::DecideActionRequest { action: None }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[test]
fn ccctl_policy_check_show_and_tools() {
    let (_tmp, sup) = with_rules(DENY_MAIN, 300_000);
    let out = sup.ccctl(&["policy", "check", "--", "ls & rm -rf /"]);
    assert!(out.status.success(), "a deny still exits 0");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().next(), Some("deny"), "{text}");
    assert!(text.contains("system or disk destruction"), "{text}");

    let j = sup.ccctl_json(&["policy", "check", "--mode", "plan", "--", "cat <<EOF > notes.md\nhi\nEOF"]);
    assert_eq!(j["decision"], "deny");
    assert_eq!(j["commands"][0]["argv"], serde_json::json!(["cat"]));
    assert_eq!(j["commands"][0]["decision"], "deny");
    assert!(j["commands"][0]["classes"].as_array().unwrap().contains(&serde_json::json!("mutation")));
    let j = sup.ccctl_json(&["policy", "check", "--", "git", "push", "origin", "feature"]);
    assert_eq!((j["decision"].as_str(), j["source"].as_str()), (Some("ask"), Some("command policy")));

    let usage = sup.ccctl(&["policy", "check"]);
    assert_eq!(usage.status.code(), Some(2), "a missing command line is a usage error");
    let usage = sup.ccctl(&["policy", "check", "--mode", "yolo", "--", "ls"]);
    assert_eq!(usage.status.code(), Some(2));

    let show = sup.ccctl_json(&["policy", "show"]);
    let rule = &show["rules"][0];
    assert_eq!((rule["effect"].as_str(), rule["decision"].as_str()), (Some("push_remote"), Some("deny")));
    assert_eq!(rule["scope"]["branch"], "main");
    assert!(rule["source"].as_str().unwrap().ends_with("rules.toml:3"), "{rule}");
    assert_eq!(show["defaults"].as_array().unwrap().len(), 11);

    for mode in ["plan", "review", "orchestrate"] {
        let tools = sup.ccctl_json(&["tools", "--mode", mode]);
        let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(!names.iter().any(|n| ["write", "edit", "apply_patch"].contains(n)), "{mode}: {names:?}");
        assert!(names.contains(&"read") && names.contains(&"bash"), "{names:?}");
    }
    let chat = sup.ccctl_json(&["tools", "--mode", "chat"]);
    assert!(chat["tools"].as_array().unwrap().iter().any(|t| t["name"] == "apply_patch"));
}

#[test]
fn a_rules_file_that_does_not_load_stops_start_up_naming_the_line() {
    let cases = [
        ("[[rule]]\neffect = \"push\"\ndecision = \"deny\"\n", "rules.toml:2:", "unknown effect class"),
        ("[[rule]]\neffect = \"push_remote\"\n\nbrnach = \"main\"\ndecision = \"deny\"\n", "rules.toml:4:", "brnach"),
        ("[[rule]]\neffect = \"write_file\"\npath = \"src/[\"\ndecision = \"deny\"\n", "rules.toml:3:", "bad glob"),
        ("[[rule]]\neffect = \"write_file\"\ndecision = \"sometimes\"\n", "rules.toml:3:", "unknown decision"),
        ("not toml at all\n", "rules.toml:1:", ""),
    ];
    for (rules, line, words) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("rules.toml"), rules).unwrap();
        let config = "[gate]\nrules = \"rules.toml\"\n".to_owned();
        let err = Supervisor::try_start_on(&data, Options { config: Some(config), ..Options::default() })
            .err()
            .expect("the supervisor must refuse to start");
        let last = err.lines().last().unwrap_or("");
        assert!(last.contains(line) && last.contains(words), "{rules:?}: {err}");
    }
    // A rules file others can write would let them loosen the gate.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("rules.toml"), DENY_MAIN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(data.join("rules.toml"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Supervisor::try_start_on(
        &data,
        Options { config: Some("[gate]\nrules = \"rules.toml\"\n".into()), ..Options::default() },
    )
    .err()
    .expect("refused");
    assert!(err.contains("writable by no one else"), "{err}");
}
