//! Per-run resource limits (issue 18): a run that forks or allocates without bound
//! stops at its own limit, says which, and leaves the supervisor and the other runs
//! alone. The loops are bounded and clean up their own processes; never a real fork
//! bomb. The hog holds its processes until the test releases it through a FIFO in
//! the run's work dir, so that the other run is exercised while they exist.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cc_tests::runs::{fixture, run_cgroups, text};
use cc_tests::{bin, payload};

const CONFIG: &str = "[runs.limits]\npids_max = 64\nmemory_max_mb = 160\n";

/// Forks until the kernel refuses, holds the children until the FIFO `release` is
/// closed, then kills and reaps every one of them.
const FORKER: &str = r#"
import os, signal, sys
children, refused = [], None
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError as e:
        refused = e.errno
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    children.append(pid)
print("forked", len(children), "refused", refused, flush=True)
open("release").read()
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
"#;

fn ccctl_bash(f: &cc_tests::runs::Fixture, run: &str, script: &str) -> std::process::Child {
    Command::new(bin("ccctl"))
        .arg("--data-dir")
        .arg(&f.sup.data_dir)
        .args(["tool", run, "bash", "--", &format!("python3 -c '{script}'")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What another run and the API answer while `hog` is at its limit, and how long they take.
fn others_answer(f: &cc_tests::runs::Fixture, other: &str) -> Vec<(String, Duration)> {
    let mut timed = Vec::new();
    for _ in 0..3 {
        let asked = Instant::now();
        let read = f.tool(other, &["read", "README.md"]);
        timed.push(("read".into(), asked.elapsed()));
        assert_eq!(text(&read).0, "# demo\n", "the other run reads: {}", text(&read).1);
        let asked = Instant::now();
        let status = f.sup.ccctl(&["status"]);
        timed.push(("status".into(), asked.elapsed()));
        assert!(status.status.success(), "{}", text(&status).1);
    }
    timed
}

#[test]
fn a_run_at_its_process_limit_stops_there_alone() {
    if !cc_tests::privileged("per-run cgroups") {
        return;
    }
    let f = fixture(Some(CONFIG));
    let status = f.sup.ccctl_json(&["status"]);
    assert_eq!(status["limits"], "limits=cgroup1 (pids, memory, cpu, cpuacct)", "{status}");
    let (hog, other) = (f.start_run("chat"), f.start_run("chat"));
    assert_eq!(text(&f.tool(&other, &["read", "README.md"])).0, "# demo\n");
    let helpers = f.sup.helper_pids();
    let shown = f.sup.ccctl_json(&["run", "show", &hog]);
    assert_eq!(shown["resources"]["limits"]["pids_max"], 64, "{shown}");
    let work_dir = Path::new(shown["work_dir"].as_str().unwrap()).to_owned();
    let release = work_dir.join("release");
    nix::unistd::mkfifo(&release, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();

    let call = ccctl_bash(&f, &hog, FORKER);
    // Opening the FIFO for writing waits for the forker to open it for reading, which
    // it does once the kernel has refused it a process.
    let holder = std::fs::OpenOptions::new().write(true).open(&release).unwrap();
    let at_limit = f.sup.ccctl_json(&["run", "show", &hog]);
    assert_eq!(at_limit["resources"]["pids"], 64, "the run is at its limit: {at_limit}");
    let timed = others_answer(&f, &other);
    eprintln!("while the other run is at pids.max: {timed:?}");
    drop(holder);
    let out = call.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    let forked: u64 = stdout.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect(&stdout);
    assert!(forked < 64, "{stdout}");
    assert!(stdout.trim_end().ends_with("refused 11"), "EAGAIN at pids.max: {stdout}");
    assert!(stderr.contains("cc: the run reached its process limit (64):"), "{stderr}");
    let event = f.sup.await_event(Duration::from_secs(10), |e| e.kind == "limit_reached");
    assert_eq!(event.subject, format!("run:{hog}"));
    assert_eq!(payload(&event)["limit"], "pids");

    // The run goes on once its processes are gone; nothing else was touched.
    assert_eq!(text(&f.tool(&hog, &["bash", "--", "echo alive"])).0, "alive\n");
    assert_eq!(f.sup.helper_pids(), helpers);
    let cgroups = run_cgroups(&hog);
    assert!(!cgroups.is_empty());
    assert_eq!(f.sup.ccctl_json(&["run", "stop", &hog])["state"], "stopped");
    assert!(cgroups.iter().all(|c| !c.exists()), "a stopped run's cgroup is removed: {cgroups:?}");
}

#[test]
fn a_run_past_its_memory_limit_is_oom_killed_alone() {
    if !cc_tests::privileged("per-run cgroups") {
        return;
    }
    let f = fixture(Some(CONFIG));
    let (hog, other) = (f.start_run("chat"), f.start_run("chat"));
    assert_eq!(text(&f.tool(&other, &["read", "README.md"])).0, "# demo\n");
    assert_eq!(text(&f.tool(&hog, &["read", "README.md"])).0, "# demo\n");
    let helpers = f.sup.helper_pids();
    // 512 MiB written, in 16 MiB steps, against a 160 MiB limit (swap included).
    let out =
        f.tool(&hog, &["bash", "--", "python3 -c 'x = [b\"m\" * (16 << 20) for _ in range(32)]; print(\"survived\")'"]);
    let (stdout, stderr) = text(&out);
    assert!(!stdout.contains("survived"), "{stdout}");
    assert!(
        stderr.contains("cc: the run reached its memory limit (160 MiB): the kernel's OOM killer ended"),
        "{stderr}"
    );
    let event = f.sup.await_event(Duration::from_secs(10), |e| e.kind == "limit_reached");
    assert_eq!(
        (event.subject.as_str(), payload(&event)["limit"].as_str()),
        (format!("run:{hog}").as_str(), Some("memory"))
    );

    // Only the allocation died: the run's runner, the other run and the helpers live.
    assert_eq!(f.sup.ccctl_json(&["run", "show", &hog])["state"], "running");
    assert_eq!(text(&f.tool(&hog, &["read", "README.md"])).0, "# demo\n");
    assert_eq!(text(&f.tool(&other, &["bash", "--", "echo fine"])).0, "fine\n");
    assert_eq!(f.sup.helper_pids(), helpers);
    let shown = f.sup.ccctl_json(&["run", "show", &hog]);
    let used = shown["resources"]["memory_bytes"].as_u64().unwrap();
    assert!(used > 0 && used < 160 << 20, "{shown}");
}

#[test]
fn limits_are_overridden_per_run_and_bad_ones_refused() {
    let f = fixture(Some(CONFIG));
    let out =
        f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--pids-max", "100", "--memory-max", "1G"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    let limits = &shown["resources"]["limits"];
    assert_eq!(
        (limits["pids_max"].as_u64(), limits["memory_max_bytes"].as_u64()),
        (Some(100), Some(1 << 30)),
        "{shown}"
    );
    assert_eq!(limits["open_files_max"], 4096, "the rest as configured: {shown}");
    let human = text(&f.sup.ccctl(&["run", "show", &run])).0;
    assert!(human.contains("of 1024 MiB, pids"), "{human}");

    for (flag, value, needle) in [
        ("--pids-max", "3", "pids_max 3 is below 32"),
        ("--memory-max", "1M", "memory_max 1 MiB is below 64 MiB"),
        ("--cpu-weight", "0", "cpu_weight 0 is outside"),
    ] {
        let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, flag, value]);
        let err = text(&out).1;
        assert!(!out.status.success());
        assert!(err.contains(needle), "{flag} {value}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--memory-max", "lots"]);
    assert!(text(&out).1.contains("\"lots\" is not a size"), "{}", text(&out).1);
}
