//! Issue 36: an agent that attacks its adapter. A Claude Code stand-in
//! (`tests/src/bin/claude-standin.rs`) writes what no honest CLI would: a gigabyte
//! with no newline, 10 MiB lines, deep nesting, bytes that are not UTF-8, a flood of
//! steps, a tool result for a call it never made. The run's runner reads it; the
//! supervisor only relays the bytes and records typed steps. Each test checks that
//! the prompt ends, that what follows the attack is still read, that the records the
//! attack causes are bounded, and that the supervisor's memory did not take the attack.
//!
//! The runs are claude-code-nosandbox: the stand-in runs on the host, and its output
//! takes the same road to the runner as an enveloped CLI's.

use std::process::{Output, Stdio};
use std::time::Duration;

use cc_tests::runs::{Fixture, fixture_with, text};
use cc_tests::{Options, bin, eventually};

fn world() -> (Fixture, String) {
    let config = format!("[runs.claude_code]\nprogram = \"{}\"\n", bin("claude-standin").display());
    let f = fixture_with(Options { config: Some(config), ..Default::default() });
    let run = start(&f);
    (f, run)
}

fn start(f: &Fixture) -> String {
    let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--adapter", "claude-code-nosandbox"]);
    assert!(out.status.success(), "{}", text(&out).1);
    text(&out).0.trim().to_owned()
}

fn prompt(f: &Fixture, run: &str, attack: &str) -> Output {
    f.sup.ccctl(&["run", "prompt", run, attack, "--timeout", "300"])
}

/// The supervisor's peak resident memory so far, in KiB (`VmHWM`).
fn supervisor_peak_kib(f: &Fixture) -> u64 {
    peak_kib(f.sup.child.id())
}

/// A process's peak resident memory so far, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmHWM in kB")
}

/// The prompt ended with the agent's exit, and its last line, after the attack, was read.
fn assert_read_to_the_end(f: &Fixture, run: &str, out: &Output, attack: &str) {
    assert!(out.status.success(), "{attack}: {out:?}");
    let results = f.run_events(run, "agent_result");
    assert!(results.iter().any(|r| r["result"] == format!("done {attack}")), "{attack}: {results:?}");
}

#[test]
fn a_gigabyte_with_no_newline_costs_the_supervisor_nothing_and_the_prompt_goes_on() {
    let (f, run) = world();
    // The runner and the stand-in are up and the supervisor has served a prompt: what
    // it holds from here on is the attack's.
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "flood 1"), "flood 1");
    let before = supervisor_peak_kib(&f);
    let out = prompt(&f, &run, "no-newline 1024");
    assert_read_to_the_end(&f, &run, &out, "no-newline 1024");
    assert!(
        text(&out).1.contains("cc: a line of the agent's output over 8388608 bytes was dropped"),
        "the caller hears what was dropped: {}",
        text(&out).1
    );
    let grown = supervisor_peak_kib(&f).saturating_sub(before);
    assert!(grown < 16 * 1024, "the supervisor's peak memory grew by {grown} KiB relaying 1 GiB");
}

#[test]
fn overlong_lines_deep_nesting_and_bytes_not_utf8_are_bounded_and_what_follows_is_read() {
    let (f, run) = world();
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "flood 1"), "flood 1");
    let before = supervisor_peak_kib(&f);
    let out = prompt(&f, &run, "long-lines 20 10");
    assert_read_to_the_end(&f, &run, &out, "long-lines 20 10");
    assert_eq!(text(&out).1.matches("was dropped").count(), 20, "each line said: {}", text(&out).1);
    for attack in ["nested 1000000", "invalid-utf8"] {
        assert_read_to_the_end(&f, &run, &prompt(&f, &run, attack), attack);
    }
    let texts = f.run_events(&run, "agent_text");
    assert!(texts.iter().any(|t| t["text"] == "bad \u{fffd}\u{fffd}\u{fffd} bytes"), "{texts:?}");
    let grown = supervisor_peak_kib(&f).saturating_sub(before);
    assert!(grown < 16 * 1024, "the supervisor's peak memory grew by {grown} KiB");
}

#[test]
fn a_flood_of_steps_is_recorded_up_to_the_prompts_budget_then_counted() {
    let (f, run) = world();
    let out = prompt(&f, &run, "flood 20000");
    assert!(out.status.success(), "{}", text(&out).1);
    let suppressed = f.run_events(&run, "agent_events_suppressed");
    assert_eq!(suppressed, [serde_json::json!({ "after": 10000 })]);
    // The init, then text up to the budget; the rest (and the result) only streamed.
    assert_eq!(f.run_events(&run, "agent_text").len(), 9_999);
    assert!(f.run_events(&run, "agent_result").is_empty(), "past the budget, not recorded");
    // What a caller too slow for the flood does not take is dropped for it, never
    // held; it still hears the agent's exit (ccctl's status is the agent's).
}

#[test]
fn a_result_for_a_tool_call_the_agent_never_made_is_not_recorded() {
    let (f, run) = world();
    let out = prompt(&f, &run, "forged-result");
    assert_read_to_the_end(&f, &run, &out, "forged-result");
    let results = f.run_events(&run, "agent_tool_result");
    assert_eq!(results.len(), 1, "only the made call's result: {results:?}");
    assert_eq!(results[0]["tool_use_id"], "toolu_made");
    assert!(text(&out).1.contains("a tool result for a call the agent never made (toolu_never_made) was not recorded"));
}

/// A kill -9 of the run's runner while its agent works: that prompt ends with a reason
/// and its agent is stopped, the runner comes back (its restart budget is the
/// helpers'), the next prompt works, and another run never noticed.
#[test]
fn a_runner_killed_mid_prompt_ends_that_prompt_with_a_reason_and_leaves_other_runs_alone() {
    let (f, run) = world();
    let other = start(&f);
    assert_read_to_the_end(&f, &other, &prompt(&f, &other, "flood 1"), "flood 1");
    let other_runner = f.sup.ccctl_json(&["run", "show", &other])["runner_pid"].as_u64().unwrap();
    let mut waiting = f
        .sup
        .ccctl_command(&["run", "prompt", &run, "wait 60", "--timeout", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut agent = 0u32;
    eventually(Duration::from_secs(30), "the stand-in's init is recorded", || {
        let inits = f.run_events(&run, "agent_init");
        agent = inits.first().and_then(|i| i["model"].as_str()?.strip_prefix("pid-")?.parse().ok()).unwrap_or(0);
        agent > 0
    });
    let runner = f.sup.ccctl_json(&["run", "show", &run])["runner_pid"].as_u64().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runner as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = cc_tests::wait_with_limit(&mut waiting, Duration::from_secs(30));
    let out = waiting.wait_with_output().unwrap();
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("runner restarted") && stderr.contains("it ended mid-prompt"), "{stderr}");
    assert_eq!(f.run_events(&run, "agent_output_unread").len(), 1);
    eventually(Duration::from_secs(10), "the agent is stopped with its prompt", || !cc_tests::alive(agent));
    let subject = format!("run:{run}");
    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "runner_restarted" && e.subject == subject);
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "flood 2"), "flood 2");
    let shown = f.sup.ccctl_json(&["run", "show", &other]);
    assert_eq!((shown["state"].as_str(), shown["runner_pid"].as_u64()), (Some("running"), Some(other_runner)));
    assert_read_to_the_end(&f, &other, &prompt(&f, &other, "flood 3"), "flood 3");
}

/// What an attack costs, the attacking run pays: the 10 MiB lines are held by its
/// runner, a process in the run's own memory cgroup, not by the supervisor; and an
/// agent that grows past the run's memory limit is ended by the kernel inside that
/// cgroup, its prompt told which limit it reached, and the run goes on.
#[test]
fn the_attacking_run_pays_for_its_attack_in_its_own_process_and_memory_limit() {
    let (f, _) = world();
    let out = f.sup.ccctl(&[
        "run",
        "start",
        "--conversation",
        &f.conversation,
        "--adapter",
        "claude-code-nosandbox",
        "--memory-max",
        "96M",
    ]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "flood 1"), "flood 1");
    let runner = f.sup.ccctl_json(&["run", "show", &run])["runner_pid"].as_u64().unwrap() as u32;
    let memory = cc_tests::runs::run_cgroups(&run).into_iter().find(|d| d.starts_with("/sys/fs/cgroup/memory"));
    let memory = memory.expect("the run has a memory cgroup");
    let members = std::fs::read_to_string(memory.join("cgroup.procs")).unwrap();
    assert!(members.lines().any(|pid| pid == runner.to_string()), "the runner {runner} is the run's: {members}");

    let (runner_before, supervisor_before) = (peak_kib(runner), supervisor_peak_kib(&f));
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "long-lines 3 10"), "long-lines 3 10");
    let runner_grew = peak_kib(runner).saturating_sub(runner_before);
    let supervisor_grew = supervisor_peak_kib(&f).saturating_sub(supervisor_before);
    assert!(runner_grew >= 8 << 10, "the runner held the 8 MiB it reads a line into: it grew {runner_grew} KiB");
    assert!(supervisor_grew < 16 << 10, "the supervisor relayed, unread: it grew {supervisor_grew} KiB");

    let out = prompt(&f, &run, "hog 400");
    let stderr = text(&out).1;
    assert!(stderr.contains("cc: the run reached its memory limit (96 MiB)"), "{out:?}");
    let reached = f.run_events(&run, "limit_reached");
    assert!(reached.iter().any(|r| r["limit"] == "memory"), "{reached:?}");
    assert!(f.run_events(&run, "agent_result").iter().all(|r| r["result"] != "done hog 400"), "the hog was ended");
    assert_eq!(f.sup.ccctl_json(&["run", "show", &run])["state"], "running");
    assert_read_to_the_end(&f, &run, &prompt(&f, &run, "flood 2"), "flood 2");
}
