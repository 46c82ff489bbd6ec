//! Issue 36: an ACP agent that attacks its client. The stand-in
//! (`tests/src/bin/acp-standin.rs`) floods the product with permission requests and
//! session updates, writes a gigabyte with no newline, lines that are not JSON-RPC,
//! and asks about another run's terminals. Each test checks that the prompt ends with
//! a reason its caller hears, that the records the attack causes are bounded, and
//! that the run (and any other) still works afterwards.

use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use cc_tests::bin;
use cc_tests::runs::{Fixture, fixture, text};
use serde_json::Value;

/// A supervisor, and `runs` acp runs whose agent is the stand-in (copied into each
/// run's agent home, which its envelope shows).
fn world(runs: usize) -> (Fixture, Vec<String>) {
    let f = fixture(None);
    let work = f.sup.data_dir.join(format!("conversations/{}/agents/default/work", f.conversation));
    let agent = work.join("acp-standin");
    let runs = (0..runs)
        .map(|_| {
            let command = format!("'{}' --quiet", agent.display());
            let args =
                ["run", "start", "--conversation", &f.conversation, "--adapter", "acp", "--agent-command", &command];
            let out = f.sup.ccctl(&args);
            assert!(out.status.success(), "{}", text(&out).1);
            text(&out).0.trim().to_owned()
        })
        .collect();
    std::fs::copy(bin("acp-standin"), &agent).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    (f, runs)
}

/// The stand-in agents' processes (each test has its own data directory).
fn agents_running(f: &Fixture) -> Vec<u32> {
    let work = f.sup.data_dir.join(format!("conversations/{}/agents/default/work", f.conversation));
    cc_tests::processes_running(&std::fs::canonicalize(work).unwrap().join("acp-standin"))
}

fn prompt(f: &Fixture, run: &str, script: &str) -> Output {
    f.sup.ccctl(&["--json", "run", "prompt", run, script, "--timeout", "300"])
}

/// The outcome of each step, from the agent's answer; the prompt must have succeeded.
fn outcomes(f: &Fixture, run: &str, script: &str) -> Vec<String> {
    let out = prompt(f, run, script);
    assert!(out.status.success(), "{script}: {}", text(&out).1);
    let said: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "agent_text")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    said.lines().filter_map(|l| l.split_once(" => ").map(|(_, o)| o.to_owned())).collect()
}

#[test]
fn a_flood_of_permission_requests_is_answered_and_its_records_are_bounded() {
    let (f, runs) = world(1);
    let run = &runs[0];
    const ASKED: usize = 25_000;
    assert_eq!(outcomes(&f, run, &format!("permissions {ASKED}")), [format!("ok {ASKED} allowed 0 refused")]);
    let decisions = f.run_events(run, "gate_decision").len();
    let permissions = f.run_events(run, "agent_permission").len();
    assert!(decisions < ASKED && permissions < ASKED, "{decisions} decisions, {permissions} permissions recorded");
    let suppressed = f.run_events(run, "records_suppressed");
    assert_eq!(suppressed.len(), 2, "crossing the prompt's budget, then its counts: {suppressed:?}");
    assert_eq!((suppressed[0]["budget"].as_str(), suppressed[0]["after"].as_u64()), (Some("prompt"), Some(20_000)));
    let counted = suppressed[1]["suppressed"]["gate_decision"].as_u64().unwrap_or(0);
    assert_eq!(decisions as u64 + counted, ASKED as u64, "every decision is written or counted: {suppressed:?}");
    // The next prompt has a budget of its own.
    assert_eq!(outcomes(&f, run, "permissions 1"), ["ok 1 allowed 0 refused"]);
    assert_eq!(f.run_events(run, "gate_decision").len(), decisions + 1);
}

#[test]
fn a_gigabyte_with_no_newline_ends_the_prompt_with_the_reason_and_the_next_starts_afresh() {
    let (f, runs) = world(1);
    let run = &runs[0];
    let out = prompt(&f, run, "raw-no-newline 1024");
    assert!(!out.status.success());
    let stderr = text(&out).1;
    assert!(stderr.contains("wrote a line over 16777216 bytes and was stopped"), "the caller hears why: {stderr}");
    assert_eq!(outcomes(&f, run, "say again"), ["ok again"]);
}

#[test]
fn floods_of_updates_and_huge_ones_end_their_prompt_and_are_clipped() {
    let (f, runs) = world(1);
    let run = &runs[0];
    // Its chunks are gathered into texts of at most 64 KiB, each recorded clipped to
    // 16 KiB: the outcome, said last, is past the clip, so only the prompt's end tells.
    for attack in ["updates 100000", "long-updates 20 10"] {
        let out = prompt(&f, run, attack);
        assert!(out.status.success(), "{attack}: {}", text(&out).1);
    }
    let texts = f.run_events(run, "agent_text");
    assert!(texts.len() < 100, "{} texts recorded", texts.len());
    assert!(texts.iter().all(|t| t["text"].as_str().unwrap_or_default().len() < 20 * 1024), "clipped to 16 KiB");
    assert_eq!(outcomes(&f, run, "say on"), ["ok on"]);
}

#[test]
fn lines_that_are_not_json_rpc_do_not_end_the_supervisor_and_the_run_goes_on() {
    let (f, runs) = world(1);
    let run = &runs[0];
    for attack in ["raw-nested 1000000", "raw-invalid-utf8"] {
        let out = prompt(&f, run, attack);
        // The connection may drop the line or end on it; either way the prompt ends
        // with its answer or a reason, and the next one works.
        if !out.status.success() {
            assert!(text(&out).1.contains("ACP agent"), "{attack}: {}", text(&out).1);
        }
        assert_eq!(outcomes(&f, run, "say on"), ["ok on"], "{attack}");
    }
}

/// Trust rule 3: a run's agent can name only its own terminals; another run's ids
/// are unknown to it, and the other run's terminal is untouched.
#[test]
fn an_agent_cannot_reach_another_runs_terminal_by_its_id() {
    let (f, runs) = world(2);
    let (mine, theirs) = (&runs[0], &runs[1]);
    let kept = outcomes(&f, theirs, "keep-terminal");
    let id = kept[0].strip_prefix("ok ").expect("a terminal id").to_owned();
    for verb in ["terminal-output", "terminal-kill", "terminal-release"] {
        let outcome = &outcomes(&f, mine, &format!("{verb} {id}"))[0];
        assert!(outcome.starts_with("refused") && outcome.contains("no terminal"), "{verb}: {outcome}");
    }
    assert_eq!(outcomes(&f, theirs, &format!("terminal-output {id}")), ["ok "], "still theirs, still running");
}

/// A kill -9 of the run's runner, the agent's ACP client, mid-prompt: that prompt
/// ends with the reason, the agent is stopped with it, the runner comes back (its
/// restart budget is the helpers'), the next prompt starts a new agent, and another
/// run's agent and runner never noticed.
#[test]
fn a_runner_killed_mid_prompt_ends_that_prompt_with_a_reason_and_leaves_other_runs_alone() {
    let (f, runs) = world(2);
    let (mine, theirs) = (&runs[0], &runs[1]);
    assert_eq!(outcomes(&f, theirs, "say up"), ["ok up"]);
    let their_runner = f.sup.ccctl_json(&["run", "show", theirs])["runner_pid"].as_u64().unwrap();
    let mut waiting = f
        .sup
        .ccctl_command(&["--json", "run", "prompt", mine, "wait 60", "--timeout", "300"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The agent has begun once its session is recorded.
    let subject = format!("run:{mine}");
    f.sup.await_event(std::time::Duration::from_secs(30), |e| e.kind == "agent_thought" && e.subject == subject);
    assert_eq!(agents_running(&f).len(), 2, "one agent each");
    let runner = f.sup.ccctl_json(&["run", "show", mine])["runner_pid"].as_u64().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runner as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = cc_tests::wait_with_limit(&mut waiting, std::time::Duration::from_secs(30));
    let out = waiting.wait_with_output().unwrap();
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lost its client: the run's runner ended"), "{stderr}");
    cc_tests::eventually(std::time::Duration::from_secs(10), "the agent is stopped with its prompt", || {
        agents_running(&f).len() == 1
    });
    f.sup.await_event(std::time::Duration::from_secs(10), |e| e.kind == "runner_restarted" && e.subject == subject);
    assert_eq!(outcomes(&f, mine, "say again"), ["ok again"], "a new agent, on the new runner");
    let shown = f.sup.ccctl_json(&["run", "show", theirs]);
    assert_eq!((shown["state"].as_str(), shown["runner_pid"].as_u64()), (Some("running"), Some(their_runner)));
    assert_eq!(outcomes(&f, theirs, "say still"), ["ok still"]);
}
