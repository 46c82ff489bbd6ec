//! Issue 38, item 3: the audit trail as a person uses it. Decisions made through the
//! supervisor's socket land in `audit/` under the data directory, hash-chained;
//! `ccctl audit verify` passes on the trail as written and names the record a person
//! (or an intruder) changed; the chain goes on across a kill -9 of the supervisor with
//! a run live, and `ccctl audit head` / `export` say what is there.

use std::time::Duration;

use cc_proto::common::v1::{EffectClass, Mode};
use cc_proto::supervisor::v1 as pb;
use cc_tests::runs::{fixture, text};
use cc_tests::{Options, Supervisor, wait_with_limit};
use nix::sys::signal::Signal;

async fn decide(sup: &Supervisor, n: usize) {
    let mut gate = cc_client::connect_gate(&sup.api_socket()).await.unwrap();
    for i in 0..n {
        let action = pb::Action {
            effects: vec![EffectClass::RunCommand as i32],
            mode: Mode::Chat as i32,
            tool: "bash".into(),
            command_line: format!("echo {i}"),
            run_id: "r-audit".into(),
            ..Default::default()
        };
        gate.decide_action(pb::DecideActionRequest { action: Some(action) }).await.unwrap();
    }
}

fn verify(sup: &Supervisor, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["audit", "verify"];
    args.extend_from_slice(extra);
    sup.ccctl(&args)
}

#[tokio::test(flavor = "multi_thread")]
async fn decisions_are_chained_and_a_changed_record_is_named() {
    let f = fixture(None);
    let run = f.start_run("chat");
    assert!(f.tool(&run, &["bash", "--", "echo hi"]).status.success());
    decide(&f.sup, 20).await;
    let out = verify(&f.sup, &[]);
    let said = text(&out).0;
    assert!(out.status.success(), "{said}{}", text(&out).1);
    assert!(said.starts_with("verified ") && said.contains(" records in 1 files; head "), "{said}");
    let head = text(&f.sup.ccctl(&["audit", "head"])).0;
    let (seq, hash) = head.trim().split_once(' ').unwrap();
    assert!(said.trim_end().ends_with(&format!("head {seq} {hash}")), "{said} / {head}");

    // What a run did, for a SIEM: only its records, as written.
    let exported = text(&f.sup.ccctl(&["audit", "export", "--run", &run])).0;
    let kinds: Vec<String> = exported
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains(&"run_started".to_owned()) && kinds.contains(&"gate_decision".to_owned()), "{kinds:?}");

    // A decision changed after the fact: verify names it, in one line.
    let file = f.sup.data_dir.join("audit/audit-000001.jsonl");
    let written = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = written.lines().map(str::to_owned).collect();
    let target = lines.iter().position(|l| l.contains("gate_decision") && l.contains("echo 7")).unwrap();
    lines[target] = lines[target].replacen("\"allow\"", "\"deny\"", 1);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = verify(&f.sup, &[]);
    let (_, err) = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("audit-000001.jsonl:{}) was changed", target + 1)), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chain_goes_on_across_a_kill_9_with_a_run_live_and_a_kept_head_catches_a_rewrite() {
    let mut f = fixture(None);
    let run = f.start_run("chat");
    decide(&f.sup, 5).await;
    let kept = text(&f.sup.ccctl(&["audit", "head"])).0.trim().split_once(' ').unwrap().1.to_owned();
    f.sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut f.sup.child, Duration::from_secs(5));
    let sup = Supervisor::start_on(&f.sup.data_dir, Options::default());
    assert_eq!(sup.ccctl_json(&["run", "show", &run])["state"], "failed");
    decide(&sup, 5).await;
    let out = verify(&sup, &["--head", &kept]);
    assert!(out.status.success(), "{}{}", text(&out).0, text(&out).1);
    let exported = text(&sup.ccctl(&["audit", "export", "--run", &run])).0;
    assert!(exported.contains("\"run_ended\""), "the run's end, recorded by the next supervisor: {exported}");

    // Records removed from the end and the chain made whole again: only the kept head
    // tells.
    let file = sup.data_dir.join("audit/audit-000001.jsonl");
    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    let cut = lines.iter().position(|l| l.contains("echo 2")).unwrap();
    std::fs::write(&file, lines[..cut].join("\n") + "\n").unwrap();
    assert!(verify(&sup, &[]).status.success());
    let out = verify(&sup, &["--head", &kept]);
    assert!(!out.status.success() && text(&out).1.contains("is not in the trail"), "{}", text(&out).1);
}
