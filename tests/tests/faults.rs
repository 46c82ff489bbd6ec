//! The fault-and-load test (issue 18): 20 live runs doing mixed tool calls while, in
//! turn, each helper is killed with SIGKILL or restarted on request and one runner is
//! killed. Calls in flight at a fault either succeed or fail naming the cause; once the
//! helper serves again, every run's next calls succeed, bash included; no run that
//! `run list` calls running has tools that fail. Then sandboxd's faults one at a time:
//! killed, restarted, or stopped under live runs and calls in flight.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cc_tests::runs::{Fixture, fixture, text};
use cc_tests::{Supervisor, bin, eventually, payload, processes_mentioning};

const RUNS: usize = 20;
/// From a fault until the faulted process serves again.
const RECOVERY: Duration = Duration::from_secs(10);

/// Words a failed call must use to say why: the process that went away.
const CAUSES: [&str; 3] = ["sandboxd", "runner", "restart"];

/// Mixed calls on every run, round robin, until `done`; returns every failure's stderr.
fn load(f: Arc<Fixture>, runs: Arc<Vec<String>>, done: Arc<AtomicBool>, offset: usize) -> Vec<String> {
    let mut failures = Vec::new();
    let mut i = offset;
    while !done.load(Ordering::Relaxed) {
        let run = &runs[i % runs.len()];
        let out = match i % 3 {
            0 => f.tool(run, &["read", "README.md"]),
            // Long enough to be in flight at a fault now and then.
            1 => f.tool(run, &["bash", "--", "sleep 0.3; echo load"]),
            _ => f.tool(run, &["search", "demo"]),
        };
        if !out.status.success() {
            failures.push(text(&out).1);
        }
        i += 1;
    }
    failures
}

/// Every run's next bash and read succeed, at the first try.
fn every_run_works(f: &Fixture, runs: &[String], after: &str) {
    for run in runs {
        let out = f.tool(run, &["bash", "--", "echo ok"]);
        assert_eq!(text(&out).0, "ok\n", "{after}: {run}'s bash: {}", text(&out).1);
        let out = f.tool(run, &["read", "README.md"]);
        assert_eq!(text(&out).0, "# demo\n", "{after}: {run}'s read: {}", text(&out).1);
    }
    let listed = f.sup.ccctl_json(&["run", "list"]);
    for run in listed.as_array().unwrap() {
        assert_eq!(run["state"], "running", "{after}: {run}");
    }
}

fn helper_pid(f: &Fixture, name: &str) -> u32 {
    f.sup.helper_pids().into_iter().find(|(n, _)| n == name).map(|(_, pid)| pid).unwrap()
}

/// Waits for `name`'s replacement of `old`, and for sandboxd's runs to be registered
/// with it again.
fn await_replacement(f: &Fixture, name: &str, old: u32) {
    let subject = format!("helper:{name}");
    f.sup.await_event(RECOVERY, |e| {
        e.kind == "helper_restarted" && e.subject == subject && payload(e)["previous_pid"] == old
    });
    if name == "sandboxd" {
        // Registered again after the restart (the event of this process, not an earlier one).
        let new = helper_pid(f, name);
        f.sup.await_event(RECOVERY, |e| e.kind == "runs_reregistered" && payload(e)["pid"] == new);
    }
}

#[test]
fn twenty_runs_outlive_every_helper_fault() {
    let f = Arc::new(fixture(None));
    let runs: Arc<Vec<String>> = Arc::new((0..RUNS).map(|_| f.start_run("chat")).collect());
    every_run_works(&f, &runs, "at start");

    let done = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..2)
        .map(|offset| {
            let (f, runs, done) = (f.clone(), runs.clone(), done.clone());
            std::thread::spawn(move || load(f, runs, done, offset * 7))
        })
        .collect();

    let mut recoveries = Vec::new();
    for name in ["sandboxd", "broker", "gateway"] {
        for requested in [false, true] {
            let old = helper_pid(&f, name);
            let faulted = Instant::now();
            let what = if requested {
                let out = f.sup.ccctl(&["helpers", "restart", name]);
                assert!(out.status.success(), "{}", text(&out).1);
                format!("{name} restarted on request")
            } else {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::Signal::SIGKILL)
                    .unwrap();
                format!("{name} killed")
            };
            await_replacement(&f, name, old);
            every_run_works(&f, &runs, &what);
            recoveries.push((what, faulted.elapsed()));
        }
    }

    // One runner, killed: its run goes on with a new one; the others never notice.
    let victim = &runs[3];
    let pid = f.sup.ccctl_json(&["run", "show", victim])["runner_pid"].as_u64().unwrap();
    let faulted = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let subject = format!("run:{victim}");
    f.sup.await_event(RECOVERY, |e| e.kind == "runner_restarted" && e.subject == subject);
    every_run_works(&f, &runs, "a runner killed");
    recoveries.push(("a runner killed".into(), faulted.elapsed()));

    done.store(true, Ordering::Relaxed);
    let failures: Vec<String> = loaders.into_iter().flat_map(|l| l.join().unwrap()).collect();
    eprintln!("recovered (fault → every run's bash and read done): {recoveries:?}");
    eprintln!("calls in flight that failed: {failures:?}");
    for failure in &failures {
        assert!(CAUSES.iter().any(|c| failure.contains(c)), "a failure that names no cause: {failure}");
        assert_eq!(failure.trim_end().lines().count(), 1, "{failure}");
    }
    assert_eq!(f.sup.helper_pids().len(), 3);
}

/// DESIGN §2 rule 1 (issue 18, item 1): sandboxd keeps run policies in memory only, so a
/// restarted sandboxd must get every live run back. Killed with SIGKILL, then restarted
/// on request, under three live runs: each run's bash works again straight away, its
/// file tools never stopped, and the re-registration is an event.
#[test]
fn live_runs_outlive_a_sandboxd_killed_or_restarted() {
    let f = fixture(None);
    let runs: Vec<String> = (0..3).map(|_| f.start_run("chat")).collect();
    let echo = |run: &str, word: &str| {
        let out = f.tool(run, &["bash", "--", &format!("echo {word}")]);
        assert!(out.status.success(), "{run}: {}", text(&out).1);
        assert_eq!(text(&out).0, format!("{word}\n"));
    };
    for run in &runs {
        echo(run, "before");
    }
    let runner_pid = |run: &str| f.sup.ccctl_json(&["run", "show", run])["runner_pid"].as_u64().unwrap();
    let runners: Vec<u64> = runs.iter().map(|run| runner_pid(run)).collect();
    let sandboxd = |sup: &Supervisor| sup.helper_pids().into_iter().find(|(name, _)| name == "sandboxd").unwrap().1;
    let killed = sandboxd(&f.sup);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(killed as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    for run in &runs {
        echo(run, "after-kill");
        assert_eq!(text(&f.tool(run, &["read", "README.md"])).0, "# demo\n");
    }
    // Every envelope is sandboxd's, the runners' too (issue 36): they went with it and
    // were launched again, each in a new envelope, their runs never leaving `running`.
    for (run, before) in runs.iter().zip(&runners) {
        f.sup.await_event(Duration::from_secs(10), |e| {
            e.kind == "runner_restarted" && e.subject == format!("run:{run}")
        });
        assert_ne!(runner_pid(run), *before, "{run}: a new runner serves");
    }
    let new = sandboxd(&f.sup);
    assert_ne!(new, killed, "a new sandboxd serves");
    let event = f.sup.await_event(Duration::from_secs(10), |e| e.kind == "runs_reregistered");
    let payload = cc_tests::payload(&event);
    assert_eq!((payload["runs"].as_u64(), payload["registered"].as_u64()), (Some(3), Some(3)), "{payload}");
    // Told before it counts as serving: no call met a sandboxd without its run.
    let serving = f.sup.await_event(Duration::from_secs(10), |e| {
        e.kind == "helper_restarted" && e.subject == "helper:sandboxd" && cc_tests::payload(e)["pid"] == new
    });
    assert_eq!(payload["pid"], new);
    assert!(event.id < serving.id, "runs registered (event {}) before serving (event {})", event.id, serving.id);

    let out = f.sup.ccctl(&["helpers", "restart", "sandboxd"]);
    assert!(out.status.success(), "{}", text(&out).1);
    for run in &runs {
        echo(run, "after-restart");
        assert_eq!(f.sup.ccctl_json(&["run", "show", run])["state"], "running");
    }
}

/// Issue 36: a run's runner is launched by sandboxd, so a sandboxd killed while runs'
/// runners are still starting (`run start` returns before its runner serves) takes
/// those starts with it. That is sandboxd's failure, not the runner's: each start is
/// made again on the sandboxd that replaces it, and no run fails for it. The kill
/// comes right after the last start, when the newest runners are mid-handshake.
#[test]
fn runs_whose_runners_are_starting_when_sandboxd_is_killed_start_anyway() {
    let f = fixture(None);
    let sandboxd = f.sup.helper_pids().into_iter().find(|(name, _)| name == "sandboxd").unwrap().1;
    let runs: Vec<String> = (0..4).map(|_| f.start_run("chat")).collect();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sandboxd as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    for run in &runs {
        // A runner that was up when sandboxd died goes with it, and a call that meets
        // it dying is told to retry (`a_call_in_flight_when_sandboxd_dies_names_it`):
        // an agent retries once.
        let mut read = f.tool(run, &["read", "README.md"]);
        if text(&read).1.contains("is being started again; retry") {
            read = f.tool(run, &["read", "README.md"]);
        }
        assert_eq!(text(&read).0, "# demo\n", "{run}: {}", text(&read).1);
        let shown = f.sup.ccctl_json(&["run", "show", run]);
        assert_eq!(shown["state"], "running", "{run}: {shown}");
    }
}

/// Issue 18: a bash call in flight when sandboxd dies says so in one line, naming
/// sandboxd rather than the transport, and the run works again at once.
#[test]
fn a_call_in_flight_when_sandboxd_dies_names_it() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let call = Command::new(bin("ccctl"))
        .arg("--data-dir")
        .arg(&f.sup.data_dir)
        .args(["tool", &run, "bash", "--", "sleep 1000.75"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sleeping = || processes_mentioning(Path::new("1000.75")).iter().any(|p| p.starts_with("sleep"));
    eventually(Duration::from_secs(10), "the command started", sleeping);
    let sandboxd = f.sup.helper_pids().into_iter().find(|(name, _)| name == "sandboxd").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sandboxd as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = call.wait_with_output().unwrap();
    let err = text(&out).1;
    assert!(!out.status.success());
    assert!(err.starts_with("ccctl: sandboxd restarted; the command was killed"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let again = f.tool(&run, &["bash", "--", "echo again"]);
    assert_eq!(text(&again).0, "again\n", "{}", text(&again).1);
}

/// Issue 18, item 2: no call to a helper waits without a deadline. A SIGSTOPped
/// sandboxd fails a bash call at its deadline, naming sandboxd, and then misses its
/// health checks: the supervisor kills it and starts another, `ccctl helpers` says
/// why, and the run's next bash works.
#[test]
fn a_stopped_sandboxd_fails_the_call_at_its_deadline_and_is_restarted() {
    let config =
        "[deadlines]\nhelper_call_ms = 1000\nhealth_interval_ms = 200\nhealth_timeout_ms = 500\nhealth_misses = 3\n";
    let f = fixture(Some(config));
    let run = f.start_run("chat");
    assert_eq!(text(&f.tool(&run, &["bash", "--", "echo before"])).0, "before\n");
    let sandboxd = f.sup.helper_pids().into_iter().find(|(name, _)| name == "sandboxd").unwrap().1;
    let stopped = nix::unistd::Pid::from_raw(sandboxd as i32);
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let asked = std::time::Instant::now();
    let out = f.tool(&run, &["bash", "--", "echo stopped"]);
    let took = asked.elapsed();
    let err = text(&out).1;
    assert!(!out.status.success(), "a stopped sandboxd ran the command?");
    // At the call's deadline (1 s), or sooner if the health checks have already
    // killed it: either way the message names sandboxd, in one line.
    assert!(err.starts_with("ccctl: sandboxd "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(took < Duration::from_secs(5), "the call waited {took:?}");

    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "helper_unresponsive" && e.subject == "helper:sandboxd");
    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "helper_restarted" && e.subject == "helper:sandboxd");
    let helpers = f.sup.ccctl_json(&["helpers"]);
    let entry = helpers.as_array().unwrap().iter().find(|h| h["name"] == "sandboxd").unwrap().clone();
    assert_eq!(entry["last_exit"]["killed_because"], "missed its health checks", "{entry}");
    assert_eq!(entry["last_exit"]["signal"], 9, "{entry}");
    assert!(!Path::new(&format!("/proc/{sandboxd}")).exists(), "the stopped sandboxd is gone");
    let again = f.tool(&run, &["bash", "--", "echo again"]);
    assert_eq!(text(&again).0, "again\n", "{}", text(&again).1);
}
