//! The fault-and-load test (issue 18): 20 live runs doing mixed tool calls while, in
//! turn, each helper is killed with SIGKILL or restarted on request and one runner is
//! killed. Calls in flight at a fault either succeed or fail naming the cause; once the
//! helper serves again, every run's next calls succeed, bash included; no run that
//! `run list` calls running has tools that fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cc_tests::payload;
use cc_tests::runs::{Fixture, fixture, text};

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
