//! Helpers never outlive their supervisor (issue 2). In a test binary of its own, because
//! becoming the reaper of orphans concerns the whole test process.

use std::time::Duration;

use cc_tests::{Options, Supervisor, alive, wait_with_limit};
use nix::sys::signal::Signal;

#[test]
fn helpers_die_with_a_killed_supervisor() {
    cc_tests::become_subreaper();
    let mut sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let pids = sup.helper_pids();
    sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut sup.child, Duration::from_secs(5));
    // Orphaned helpers are now our children: wait for each (PR_SET_PDEATHSIG ends them),
    // with a deadline so that a survivor fails the test instead of hanging it.
    for (name, pid) in pids {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None));
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(_) => assert!(!alive(pid), "{name} (pid {pid}) is still there"),
            Err(_) => panic!("{name} (pid {pid}) survived its supervisor"),
        }
    }
    // A killed supervisor cannot remove its cgroups: the next start on its data dir does.
    drop(Supervisor::start_on(&sup.data_dir, Options::default()));
}

/// The run's runner lives in its own `runner` envelope: other namespaces, no
/// capability, a seccomp filter, a view holding the run's roots and not the registered
/// checkout or the supervisor's state; and it dies with a SIGKILLed supervisor.
#[test]
fn the_runner_is_enveloped_and_dies_with_a_killed_supervisor() {
    cc_tests::become_subreaper();
    let mut f = cc_tests::runs::fixture(None);
    let run = f.start_run("chat");
    // The runner starts in the background; the first file tool call waits for it.
    assert_eq!(cc_tests::runs::text(&f.tool(&run, &["read", "README.md"])).0, "# demo\n");
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    let pid = shown["runner_pid"].as_u64().unwrap() as u32;
    let events = cc_tests::runs::text(&f.sup.ccctl(&["--json", "events"])).0;
    let started = events.lines().find(|l| l.contains("runner_ready")).expect("a runner_ready event");
    let native = started.contains("runner_envelope") && started.contains("native");
    if std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        assert!(native, "the runner must be enveloped where bubblewrap works: {events}");
    }
    if native {
        let ns = |p: &str, which: &str| std::fs::read_link(format!("/proc/{p}/ns/{which}")).unwrap();
        for which in ["pid", "net", "mnt", "user", "ipc"] {
            assert_ne!(ns(&pid.to_string(), which), ns("self", which), "{which} namespace");
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
        assert!(status.contains("Seccomp:\t2"), "{status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
        let inside = |p: &std::path::Path| root.join(p.strip_prefix("/").unwrap());
        assert!(inside(&f.copy().join("README.md")).exists(), "the run's copy is there");
        assert!(!inside(&f.checkout.join("README.md")).exists(), "the registered checkout is not");
        let data = std::fs::canonicalize(&f.sup.data_dir).unwrap();
        assert!(!inside(&data.join("state.db")).exists(), "the supervisor's state is not");
        assert!(!inside(&data.join("sock/api.sock")).exists(), "the supervisor's socket is not");
    }
    f.sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut f.sup.child, Duration::from_secs(5));
    // The runner is reaped by the envelope's init as the namespace goes (bubblewrap,
    // orphaned, is ours to reap): wait until it is gone, with a deadline.
    let reaper = std::thread::spawn(|| while nix::sys::wait::wait().is_ok() {});
    cc_tests::eventually(
        Duration::from_secs(5),
        &format!("the runner (pid {pid}) is gone with its supervisor"),
        || !alive(pid),
    );
    drop(reaper);
    // The run's cgroup, which the killed supervisor left, goes with the next start.
    let cgroups = cc_tests::runs::run_cgroups(&run);
    drop(Supervisor::start_on(&f.sup.data_dir, Options::default()));
    assert!(cgroups.iter().all(|c| !c.exists()), "swept: {cgroups:?}");
}

/// Issue 18: a runner killed with its supervisor leaves its socket; the next start
/// sweeps it as it marks the run failed. (Not a subreaper here: the next supervisor's
/// children must stay its own.)
#[test]
fn the_next_start_sweeps_the_sockets_of_runs_a_killed_supervisor_left() {
    let mut f = cc_tests::runs::fixture(None);
    let run = f.start_run("chat");
    assert_eq!(cc_tests::runs::text(&f.tool(&run, &["read", "README.md"])).0, "# demo\n");
    let socket = f.sup.data_dir.join("conversations").join(&f.conversation).join("sock").join(format!("{run}.sock"));
    assert!(socket.exists(), "the runner serves {}", socket.display());
    // Its cgroup too (issue 18): it holds the runner.
    let cgroups = cc_tests::runs::run_cgroups(&run);
    if cc_tests::privileged("per-run cgroups") {
        assert!(cgroups.len() >= 2, "pids and memory at least: {cgroups:?}");
        let runner = f.sup.ccctl_json(&["run", "show", &run])["runner_pid"].as_u64().unwrap().to_string();
        let procs = std::fs::read_to_string(cgroups[0].join("cgroup.procs")).unwrap();
        assert!(procs.lines().any(|p| p == runner), "the runner {runner} is in {}: {procs}", cgroups[0].display());
    }
    f.sup.signal(Signal::SIGKILL);
    wait_with_limit(&mut f.sup.child, Duration::from_secs(5));
    let again = cc_tests::Supervisor::start_on(&f.sup.data_dir, cc_tests::Options::default());
    assert!(!socket.exists(), "the dead run's socket is swept");
    for cgroup in &cgroups {
        assert!(!cgroup.exists(), "the dead run's cgroup {} is swept", cgroup.display());
    }
    assert_eq!(again.ccctl_json(&["run", "show", &run])["state"], "failed");
}
