//! A clean stop with many live runs (issue 35): after SIGTERM every run's row says it
//! ended, and why, rather than `running` until the next start finds it, even when a
//! helper answers nothing and the runs cannot all be stopped in time.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use cc_tests::runs::fixture;
use cc_tests::{Options, Supervisor};

const RUNS: usize = 20;

#[test]
fn sigterm_under_twenty_live_runs_ends_every_row() {
    let mut f = fixture(None);
    let runs: Vec<String> = (0..RUNS).map(|_| f.start_run("chat")).collect();
    // A command in flight in every run, as under load: each run's stop has its
    // runner and its envelope to end. Each has said it started before the SIGTERM.
    let mut busy = Vec::new();
    for run in &runs {
        let mut child = f
            .sup
            .ccctl_command(&["tool", run, "bash", "--", "echo started; sleep 30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert_eq!(first, "started\n", "{run}");
        busy.push(child);
    }
    // A helper that answers nothing (frozen): every run's stop waits on it up to the
    // call's deadline, far past the shutdown's budget for runs.
    let gateway = f.sup.helper_pids().into_iter().find(|(n, _)| n == "gateway").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
    let (status, _) = f.sup.terminate(Duration::from_secs(30));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(gateway as i32), nix::sys::signal::Signal::SIGCONT);
    assert!(status.success(), "{status:?}");
    for mut child in busy {
        // Each call ends with its run (its stream closes), never waits out its sleep.
        cc_tests::wait_with_limit(&mut child, Duration::from_secs(20));
    }

    // What the stopped supervisor left in state.db, read by the next one before it
    // sweeps anything: a row it had to sweep would say so ("stopped while the run was live").
    let data_dir = f.sup.data_dir.clone();
    let next = Supervisor::start_on(&data_dir, Options::default());
    let list = next.ccctl_json(&["run", "list"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), RUNS, "{list}");
    for row in rows {
        assert_eq!(row["state"], "stopped", "{row}");
        assert!(row["end_reason"].as_str().is_some_and(|r| r.contains("the supervisor shut down")), "{row}");
    }
}
