//! The supervisor and its helpers, as real processes (issue 2).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cc_tests::{Options, Supervisor, alive, all_events, bin, payload, privileged, wait_for_event};
use nix::sys::signal::Signal;

const HELPERS: [&str; 3] = ["sandboxd", "broker", "gateway"];

fn proc_status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    cc_proto::hardening::status_field(&status, field).expect("field").to_owned()
}

#[test]
fn status_shows_every_helper_serving_and_the_backend_line() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let backend_line = &sup.stdout_lines[0];
    assert!(backend_line.starts_with("cc-supervisor: sandbox backend="), "{backend_line}");
    cc_tests::assert_path_resolution(backend_line);
    if std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        assert!(backend_line.starts_with("cc-supervisor: sandbox backend=native (bubblewrap "), "{backend_line}");
    }

    let status = sup.ccctl_json(&["status"]);
    assert_eq!(format!("cc-supervisor: {}", status["sandbox"].as_str().unwrap()), *backend_line);
    let helpers = status["helpers"].as_array().unwrap();
    assert_eq!(helpers.iter().map(|h| h["name"].as_str().unwrap()).collect::<Vec<_>>(), HELPERS);
    for h in helpers {
        assert_eq!(h["state"], "running", "{h}");
        assert_eq!(h["serving"], true, "{h}");
        let pid = h["pid"].as_u64().unwrap() as u32;
        assert_eq!(h["reported"]["pid"].as_u64().unwrap() as u32, pid);
        assert_eq!(h["reported"]["dumpable"], false, "{h}");
        // Checked independently of what the helper says about itself.
        assert_eq!(proc_status_field(pid, "NoNewPrivs"), "1", "{h}");
        if h["name"] != "sandboxd" {
            assert_eq!(proc_status_field(pid, "CapEff"), "0000000000000000", "{h}");
        } else if nix::unistd::geteuid().is_root() {
            // Only SETUID, SETGID, KILL, CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER.
            assert_eq!(proc_status_field(pid, "CapEff"), "00000000000000ef", "{h}");
            assert_eq!(proc_status_field(pid, "CapBnd"), "00000000000000ef", "{h}");
        }
    }

    let text = sup.ccctl(&["status"]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(backend_line.trim_start_matches("cc-supervisor: ")), "{text}");
    for name in HELPERS {
        assert!(text.lines().any(|l| l.starts_with(name) && l.contains("running") && l.ends_with("yes")), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_helper_is_back_within_two_seconds_and_alone() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let mut client = sup.client().await;
    for name in HELPERS {
        let before = sup.helper_pids();
        let victim = before.iter().find(|(n, _)| n == name).unwrap().1;
        let cursor = all_events(&mut client).await.last().map_or(0, |e| e.id);
        let killed_at = Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();

        let subject = format!("helper:{name}");
        let restarted = wait_for_event(&mut client, cursor, Duration::from_secs(2), |e| {
            e.kind == "helper_restarted" && e.subject == subject
        })
        .await;
        assert!(killed_at.elapsed() < Duration::from_secs(2));
        let p = payload(&restarted);
        assert_eq!(p["previous_pid"].as_u64().unwrap() as u32, victim);
        assert_eq!(p["reason"], "exited");

        let exited =
            all_events(&mut client).await.into_iter().find(|e| e.id > cursor && e.kind == "helper_exited").unwrap();
        assert_eq!(payload(&exited)["signal"], 9);

        let after = sup.helper_pids();
        for ((n, old), (_, new)) in before.iter().zip(&after) {
            if n == name {
                assert_ne!(old, new);
                assert_eq!(*new as u64, p["pid"].as_u64().unwrap());
            } else {
                assert_eq!(old, new, "{n} was touched when {name} was killed");
            }
        }
        let status = sup.ccctl_json(&["status"]);
        let entry = status["helpers"].as_array().unwrap().iter().find(|h| h["name"] == name).unwrap().clone();
        assert_eq!(entry["serving"], true, "{entry}");
        assert_eq!(entry["restarts"], 1);
        assert_eq!(entry["last_exit"]["signal"], 9);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_that_always_fails_backs_off_then_is_reported_failed() {
    let config = "[restart]\ninitial_backoff_ms = 20\nbudget = 3\n[helpers.broker]\nprogram = \"/bin/false\"\n";
    let sup = Supervisor::start(Options { config: Some(config.into()), ..Default::default() });
    let mut client = sup.client().await;
    wait_for_event(&mut client, 0, Duration::from_secs(10), |e| {
        e.kind == "helper_failed" && e.subject == "helper:broker"
    })
    .await;

    let events = all_events(&mut client).await;
    let broker_exits: Vec<_> =
        events.iter().filter(|e| e.subject == "helper:broker" && e.kind == "helper_exited").collect();
    assert_eq!(broker_exits.len(), 4, "one start and three restarts before giving up");
    for exit in &broker_exits {
        let p = payload(exit);
        assert_eq!(p["code"], 1, "{p}");
        assert!(p["error"].as_str().unwrap().contains("exited before serving"), "{p}");
    }
    // The delays double: 20, 40, 80 ms (at least).
    let gaps: Vec<i64> = broker_exits
        .windows(2)
        .map(|w| {
            cc_proto::time::unix_ms(w[1].create_time.as_ref()) - cc_proto::time::unix_ms(w[0].create_time.as_ref())
        })
        .collect();
    for (gap, floor) in gaps.iter().zip([20, 40, 80]) {
        assert!(*gap >= floor, "gaps {gaps:?}");
    }
    assert!(gaps[2] > gaps[0], "gaps {gaps:?}");

    // The supervisor keeps serving, and the other helpers are untouched.
    let status = sup.ccctl_json(&["status"]);
    for h in status["helpers"].as_array().unwrap() {
        let expected = if h["name"] == "broker" { "failed" } else { "running" };
        assert_eq!(h["state"], expected, "{h}");
    }
    let text = String::from_utf8(sup.ccctl(&["helpers"]).stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("broker") && l.contains("failed") && l.contains("code 1")), "{text}");

    // A restart request revives it with a fresh budget; it fails again, with a clear error.
    let out = sup.ccctl(&["helpers", "restart", "broker"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("ccctl: helper broker did not come back: exited before serving"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_by_name_touches_only_that_helper() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let before = sup.helper_pids();
    let reply = sup.ccctl_json(&["helpers", "restart", "gateway"]);
    assert_eq!(reply["previous_pid"].as_u64().unwrap() as u32, before[2].1);
    let after = sup.helper_pids();
    assert_eq!(before[0], after[0]);
    assert_eq!(before[1], after[1]);
    assert_ne!(before[2], after[2]);
    assert_eq!(reply["pid"].as_u64().unwrap() as u32, after[2].1);
    assert!(!alive(before[2].1), "the old gateway is gone");

    for bad in ["nope", "", "../broker", "broker\n", &"x".repeat(10_000)] {
        let out = sup.ccctl(&["helpers", "restart", bad]);
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("ccctl: unknown helper"), "{err}");
        assert_eq!(err.lines().count(), 1);
        assert!(err.len() < 200, "the error does not echo a huge name: {err}");
    }
    assert_eq!(sup.helper_pids(), after, "bad names changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_tree_removes_sockets_and_keeps_the_events() {
    let mut sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let pids = sup.helper_pids();
    let before = all_events(&mut sup.client().await).await;

    let (status, took) = sup.terminate(Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    for (name, pid) in &pids {
        assert!(!alive(*pid), "{name} (pid {pid}) outlived the supervisor");
    }
    let left: Vec<_> = std::fs::read_dir(sup.data_dir.join("sock")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "sockets left behind: {left:?}");

    let again = Supervisor::start_on(&sup.data_dir, Options::default());
    again.wait_ready();
    let after = all_events(&mut again.client().await).await;
    assert_eq!(&after[..before.len()], &before[..], "earlier events kept, unchanged");
    let kinds: Vec<_> = after[before.len()..].iter().map(|e| e.kind.as_str()).collect();
    let stopped: Vec<_> =
        after[before.len()..].iter().filter(|e| e.kind == "helper_exited").map(|e| e.subject.as_str()).collect();
    assert_eq!(stopped, ["helper:gateway", "helper:broker", "helper:sandboxd"], "stopped in reverse start order");
    assert!(kinds.contains(&"supervisor_stopped") && kinds.contains(&"supervisor_started"), "{kinds:?}");
    assert!(after.windows(2).all(|w| w[0].id < w[1].id));
}

#[test]
fn a_second_supervisor_on_the_same_data_dir_refuses_and_changes_nothing() {
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let pids = sup.helper_pids();
    let events_before = sup.ccctl(&["events"]).stdout;

    let second = Supervisor::try_start_on(&sup.data_dir, Options::default());
    let err = second.err().expect("the second supervisor must not start");
    let expected = format!("cc-supervisor: another cc-supervisor (pid {}) is already running on", sup.child.id());
    assert!(err.trim_end().lines().last().unwrap().starts_with(&expected), "{err}");

    assert_eq!(sup.helper_pids(), pids);
    assert_eq!(sup.ccctl(&["events"]).stdout, events_before, "the refused supervisor recorded nothing");
}

#[test]
fn bad_data_dirs_and_configs_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let err = Supervisor::try_start_on(&tmp.path().join("d"), Options::default()).map(|_| ()).err();
    assert!(err.is_none(), "a fresh data dir works: {err:?}");

    let out = std::process::Command::new(bin("cc-supervisor")).arg("--data-dir").arg(&file).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("cc-supervisor: ") && stderr.contains("is not a directory"), "{stderr}");

    for (config, needle) in
        [("[restart]\nbudgt = 1\n", "budgt"), ("[helpers.nobody]\n", "unknown helper"), ("not toml at all [", "line 1")]
    {
        let dir = tmp.path().join(format!("cfg-{}", config.len()));
        let err = Supervisor::try_start_on(&dir, Options { config: Some(config.into()), ..Default::default() })
            .map(|_| ())
            .expect_err("invalid config must stop start-up");
        let last = err.trim_end().lines().last().unwrap();
        assert!(last.starts_with("cc-supervisor: invalid config") && last.contains(needle), "{err}");
        // Only the directory, its lock and the config we wrote: no state, no sockets.
        let mut made: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        made.sort();
        assert_eq!(made, ["config.toml", "supervisor.lock"], "nothing else was created from an invalid config");
    }
}

#[test]
fn a_read_only_data_dir_is_refused() {
    if !privileged("mounting a read-only tmpfs") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mount = tmp.path().join("ro");
    std::fs::create_dir(&mount).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&mount)
        .status()
        .unwrap();
    assert!(ok.success(), "mount tmpfs");
    let result = Supervisor::try_start_on(&mount, Options::default()).map(|_| ());
    let _ = std::process::Command::new("umount").arg(&mount).status();
    let err = result.expect_err("a read-only data dir must be refused");
    let last = err.trim_end().lines().last().unwrap();
    assert!(last.contains("is not writable") && last.contains("Read-only file system"), "{err}");
}

#[test]
fn the_bootstrap_secret_travels_on_stdin_only() {
    // A stand-in broker that records what it was given, then behaves as a helper that
    // exits: argv, environment and stdin, each to its own file.
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let script = tmp.path().join("fake-broker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > {r}/argv\nenv > {r}/env\necho HELLO\ncat > {r}/stdin\nexit 3\n",
            r = record.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!("[restart]\nbudget = 0\n[helpers.broker]\nprogram = \"{}\"\n", script.display());
    let sup = Supervisor::start(Options { config: Some(config), ..Default::default() });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut client = sup.client().await;
        wait_for_event(&mut client, 0, Duration::from_secs(10), |e| e.kind == "helper_failed").await;
    });
    let stdin = std::fs::read_to_string(record.join("stdin")).unwrap();
    let bootstrap: serde_json::Value = serde_json::from_str(&stdin).expect("the bootstrap is JSON on stdin");
    let secret = bootstrap["peers"]["supervisor"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 64);
    assert_eq!(bootstrap["name"], "broker");
    for file in ["argv", "env"] {
        let text = std::fs::read_to_string(record.join(file)).unwrap();
        assert!(!text.contains(&secret), "the secret is in the helper's {file}");
    }
    let env = std::fs::read_to_string(record.join("env")).unwrap();
    assert!(!env.contains("NOTIFY_SOCKET"), "helpers get a pruned environment: {env}");
}

#[test]
fn every_helper_is_non_dumpable_as_the_kernel_sees_it() {
    if !privileged("running the supervisor as another uid") {
        return;
    }
    // Run as an ordinary uid: the kernel then hands the /proc entries of a non-dumpable
    // process to root, which is visible from outside whatever the helper claims.
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sup = Supervisor::start_on(&tmp.path().join("data"), Options { uid: Some(65534), ..Default::default() });
    let out = sup.ccctl(&["status", "--wait", "10"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Issue 18: an ordinary uid may not make cgroups here, and says so rather than
    // falling back in silence.
    let limits = sup.ccctl_json(&["status"])["limits"].as_str().unwrap().to_owned();
    assert!(limits.starts_with("limits=rlimits-only (cannot make /sys/fs/cgroup/"), "{limits}");
    assert!(sup.stdout_lines.iter().any(|l| l == &format!("cc-supervisor: {limits}")), "{:?}", sup.stdout_lines);
    for (name, pid) in sup.helper_pids() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid =
            cc_proto::hardening::status_field(&status, "Uid").unwrap().split_whitespace().next().unwrap().to_owned();
        assert_eq!(uid, "65534", "{name} runs as the supervisor's uid");
        let owner = std::fs::metadata(format!("/proc/{pid}/environ")).unwrap().uid();
        assert_eq!(owner, 0, "{name} is dumpable: its /proc entries belong to its own uid");
    }
}

/// Issue 16, item 5: a descriptor the supervisor's parent leaked (without close-on-exec)
/// is closed by the supervisor before anything else, so that it reaches no helper, and
/// through them no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_leaked_by_the_parent_reaches_no_helper() {
    let tmp = tempfile::tempdir().unwrap();
    let canary = tmp.path().join("cc-stray-canary");
    std::fs::write(&canary, "").unwrap();
    // nix's open adds no O_CLOEXEC: the supervisor started below inherits it.
    let leaked = nix::fcntl::open(&canary, nix::fcntl::OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).unwrap();
    let sup = Supervisor::start(Options::default());
    sup.wait_ready();
    let mut pids: Vec<(String, u32)> = sup.helper_pids();
    pids.push(("supervisor".to_owned(), sup.child.id()));
    for (name, pid) in pids {
        let open: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .collect();
        assert!(!open.contains(&canary), "{name} (pid {pid}) holds the leaked descriptor: {open:?}");
    }
    drop(leaked);
}

/// `[sandbox] require = true`: without a native backend nothing starts, with the
/// probe's reason in one line, rather than every run going unwrapped.
#[test]
fn a_required_sandbox_that_is_missing_stops_start_up_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let config = "[sandbox]\nbwrap = \"/nonexistent/bwrap\"\nrequire = true\n";
    let options = Options { config: Some(config.into()), ..Default::default() };
    let refused = Supervisor::try_start_on(&tmp.path().join("data"), options).err().expect("it started unwrapped");
    assert!(refused.contains("[sandbox] require = true, but sandbox backend=none (bubblewrap not found"), "{refused}");
    assert!(refused.contains("no run may start unwrapped"), "{refused}");
    // Without the key the same host starts, unwrapped and saying so.
    let options = Options { config: Some("[sandbox]\nbwrap = \"/nonexistent/bwrap\"\n".into()), ..Default::default() };
    let sup = Supervisor::start_on(&tmp.path().join("data2"), options);
    assert!(
        sup.stdout_lines[0].starts_with("cc-supervisor: sandbox backend=none (bubblewrap not found"),
        "{:?}",
        sup.stdout_lines
    );
}

#[test]
fn a_helper_whose_supervisor_stopped_waiting_stops_quietly() {
    // A supervisor that stops waiting for a helper (a run ended while its runner was
    // starting) closes its end of the helper's stdout. The helper's READY then meets a
    // closed pipe: it stops, with nothing on stderr (nobody is left to read an error,
    // and a benchmark's table showed "cannot tell the supervisor we are ready") and no
    // socket left behind.
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("sock/sandboxd.sock");
    let mut child = Command::new(bin("cc-sandboxd"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CC_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "HELLO");
    drop(stdout);
    let bootstrap = cc_proto::bootstrap::Bootstrap {
        name: "sandboxd".into(),
        socket: socket.clone(),
        data_dir: tmp.path().to_owned(),
        log_format: cc_proto::logging::LogFormat::Text,
        peers: [("supervisor".to_owned(), cc_proto::secret::PeerSecret::generate().unwrap())].into(),
        supervisor_pid: std::process::id(),
        options: [("sandbox".to_owned(), "off".to_owned())].into(),
        calls: Default::default(),
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bootstrap.to_json_line()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(!socket.exists(), "the socket is removed");
}
