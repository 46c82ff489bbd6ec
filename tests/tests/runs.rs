//! Runs end to end with the real binaries: ccctl → supervisor → gate → runner or
//! sandboxd's harness_bash envelope, on a conversation's copy of a real checkout.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cc_tests::fs::{make_checkout, snapshot};
use cc_tests::runs::{assert_refused, fixture, text};
use cc_tests::{Options, Supervisor, bin, eventually, processes_mentioning};

#[test]
fn file_tools_stay_inside_the_run_and_the_checkout_is_untouched() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let before = snapshot(&f.checkout);
    let outside = f.checkout.parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    let copy = f.copy();

    let out = f.tool(&run, &["read", "src/nested/lib.rs"]);
    assert_eq!(text(&out).0, "pub fn f() {}\n", "{}", text(&out).1);
    let checkout = f.checkout.to_str().unwrap().to_owned();
    let outside_s = outside.to_str().unwrap().to_owned();
    let escapes = [
        "/etc/passwd".to_owned(),
        "../../../../../../etc/passwd".to_owned(),
        "src/../../../outside.txt".to_owned(),
        outside_s.clone(),
        format!("{checkout}/README.md"),
        format!("{}/../../../outside.txt", copy.display()),
        "link-outside".to_owned(),
        "/proc/self/root/etc/passwd".to_owned(),
    ];
    for path in &escapes {
        assert_refused(&f.tool(&run, &["read", path]), "refused", &format!("read {path}"));
        assert_refused(&f.tool_stdin(&run, &["write", path], "pwned\n"), "refused", &format!("write {path}"));
        assert_refused(
            &f.tool(&run, &["edit", path, "--old", "outside", "--new", "pwned"]),
            "refused",
            &format!("edit {path}"),
        );
    }
    for protected in [".git/config", ".git/hooks/pre-commit"] {
        assert_refused(&f.tool_stdin(&run, &["write", protected], "x\n"), "refused", protected);
    }
    let patch = format!("--- a/{outside_s}\n+++ b/{outside_s}\n@@ -1 +1 @@\n-outside\n+pwned\n");
    assert_refused(&f.tool_stdin(&run, &["apply-patch"], &patch), "refused", "apply_patch outside");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    assert_eq!(snapshot(&f.checkout), before, "the registered checkout is unchanged");

    // Inside, the tools work.
    assert!(f.tool_stdin(&run, &["write", "notes/new.txt"], "one\ntwo\n").status.success());
    assert!(f.tool(&run, &["edit", "notes/new.txt", "--old", "two", "--new", "three"]).status.success());
    assert_eq!(std::fs::read_to_string(copy.join("notes/new.txt")).unwrap(), "one\nthree\n");
    let found = text(&f.tool(&run, &["find", "*.rs"])).0;
    assert!(found.contains("src/nested/lib.rs"), "{found}");
    let hits = text(&f.tool(&run, &["search", "pub fn"])).0;
    assert!(hits.contains("src/nested/lib.rs:1:pub fn f() {}"), "{hits}");
    let fuzzy = text(&f.tool(&run, &["search-files", "nestlib"])).0;
    assert_eq!(fuzzy.lines().next().map(|l| l.trim_start_matches("./")), Some("src/nested/lib.rs"), "{fuzzy}");
    let events = text(&f.sup.ccctl(&["--json", "events"])).0;
    assert!(events.contains("tool_refused"), "refusals are events");
}

#[test]
fn apply_patch_is_all_or_nothing() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let copy = f.copy();
    std::fs::write(copy.join("a.txt"), "a1\n").unwrap();
    std::fs::write(copy.join("b.txt"), "b1\n").unwrap();
    std::fs::write(copy.join("c.txt"), "c1\n").unwrap();
    let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a1\n+a2\n\
                 --- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-b1\n+b2\n\
                 --- a/c.txt\n+++ b/c.txt\n@@ -1 +1 @@\n-not what is there\n+c2\n";
    let out = f.tool_stdin(&run, &["apply-patch"], patch);
    assert!(!out.status.success());
    for (name, content) in [("a.txt", "a1\n"), ("b.txt", "b1\n"), ("c.txt", "c1\n")] {
        assert_eq!(std::fs::read_to_string(copy.join(name)).unwrap(), content, "{name} untouched");
    }
    let good = patch.replace("-not what is there", "-c1");
    let out = f.tool_stdin(&run, &["apply-patch"], &good);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(std::fs::read_to_string(copy.join("c.txt")).unwrap(), "c2\n");
}

#[test]
fn bash_streams_output_and_status_and_a_denial_runs_nothing() {
    let f =
        fixture(Some("[runs]\nbash_timeout_seconds = 1\nbash_max_timeout_seconds = 5\nbash_output_cap_bytes = 4096\n"));
    let run = f.start_run("chat");
    let copy = f.copy();
    let out = f.tool(&run, &["bash", "--", "echo out; echo err >&2; pwd; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let (stdout, stderr) = text(&out);
    assert!(stdout.starts_with("out\n"), "{stdout}");
    assert!(stdout.contains("repos/demo"), "{stdout}");
    assert!(stderr.contains("err"), "{stderr}");

    let denied = f.tool(&run, &["bash", "--", "touch marker; rm -rf /"]);
    assert_refused(&denied, "denied", "rm -rf /");
    assert!(!copy.join("marker").exists(), "nothing of a denied line runs");

    let timed_out = f.tool(&run, &["bash", "--", "sleep 30"]);
    assert_eq!(timed_out.status.code(), Some(124), "{}", text(&timed_out).1);

    let capped = f.tool(&run, &["bash", "--", "yes"]);
    assert_eq!(capped.status.code(), Some(137), "{}", text(&capped).1);
    assert!(text(&capped).0.len() <= 4096);
    assert!(text(&capped).1.contains("over the configured cap"));
}

/// `--timings` says where a command's time went, after its output and without
/// changing its status: as a sentence, and with `--json` as an object whose stages fit
/// inside the whole.
#[test]
fn bash_timings_say_where_a_commands_time_went() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let out = f.tool(&run, &["bash", "--timings", "--", "echo hi; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).1);
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "hi\n");
    let line = stderr.lines().last().unwrap_or_default();
    for part in ["ccctl: timings: ", "before the call", "the supervisor", "gate", "sandboxd's launch", "the command"] {
        assert!(line.contains(part), "{part:?} in {line:?}");
    }

    let out = f.sup.ccctl(&["--json", "tool", &run, "bash", "--timings", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let line = text(&out).1.lines().last().unwrap_or_default().to_owned();
    let parsed: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let t = &parsed["timings"];
    let micros = |key: &str| t[key].as_u64().unwrap_or_else(|| panic!("no {key} in {line}"));
    // After the gate, the launch's round trip; and after the gate, sandboxd's stages one
    // after another (the command starts before the launch's answer is back).
    let supervisor = micros("supervisor_micros");
    assert!(micros("gate_micros") + micros("launch_micros") <= supervisor, "{line}");
    let in_sandboxd = micros("sandboxd_prepare_micros") + micros("command_micros") + micros("sandboxd_report_micros");
    assert!(micros("gate_micros") + in_sandboxd <= supervisor, "sandboxd's stages fit in the whole: {line}");
    assert!(micros("sandboxd_prepare_micros") <= micros("launch_micros"), "{line}");
    assert!(micros("supervisor_micros") <= micros("call_micros"), "{line}");
    assert!(micros("command_micros") > 0, "{line}");
    assert!(t["warm_envelope"].is_boolean(), "{line}");
}

#[test]
fn read_only_modes_have_no_mutation_tools_and_deny_mutating_bash() {
    let f = fixture(None);
    for mode in ["plan", "review", "orchestrate"] {
        let run = f.start_run(mode);
        let tools = text(&f.tool(&run, &["list"])).0;
        assert!(
            tools.contains("read") && !tools.contains("write") && !tools.contains("apply_patch"),
            "{mode}: {tools}"
        );
        let out = f.tool_stdin(&run, &["write", "x.txt"], "x\n");
        assert_refused(&out, "denied", &format!("write in {mode}"));
        assert!(text(&out).1.contains(&format!("not available in {mode} mode")), "{}", text(&out).1);
        assert_refused(&f.tool(&run, &["edit", "README.md", "--old", "demo", "--new", "x"]), "denied", "edit");
        let patch = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# pwned\n";
        assert_refused(&f.tool_stdin(&run, &["apply-patch"], patch), "denied", &format!("apply_patch in {mode}"));
        for line in ["touch made-here", "echo x > made-here", "rm README.md", "git commit -qam x"] {
            assert_refused(&f.tool(&run, &["bash", "--", line]), "denied", &format!("{line} in {mode}"));
        }
        assert!(!f.copy().join("made-here").exists() && !f.copy().join("x.txt").exists());
        assert_eq!(std::fs::read_to_string(f.copy().join("README.md")).unwrap(), "# demo\n");
        assert!(f.tool(&run, &["read", "README.md"]).status.success());
        assert!(f.tool(&run, &["bash", "--", "ls"]).status.success(), "{mode}: read-only bash runs");
        assert_eq!(f.sup.ccctl_json(&["run", "stop", &run])["state"], "stopped");
    }
    // In chat the same calls work.
    let run = f.start_run("chat");
    assert!(f.tool_stdin(&run, &["write", "x.txt"], "x\n").status.success());
    assert!(f.tool(&run, &["bash", "--", "touch made-here"]).status.success());
    assert!(f.copy().join("made-here").exists());
}

/// Waits for the run's `run_ended` event.
fn await_end(f: &cc_tests::runs::Fixture, run: &str) {
    let subject = format!("run:{run}");
    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "run_ended" && e.subject == subject);
}

fn kill9(pid: u64) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
}

/// Issue 18: a runner that dies is started again in a new envelope and its run goes
/// on; the end reason names a signal, not bubblewrap's code 137.
#[test]
fn a_killed_runner_is_started_again_and_its_run_goes_on() {
    let f = fixture(None);
    let run = f.start_run("chat");
    // The runner starts in the background; the first file tool call waits for it.
    assert!(f.tool(&run, &["read", "README.md"]).status.success());
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    let pid = shown["runner_pid"].as_u64().unwrap();
    assert!(pid > 0);
    // The runner's envelope takes its options (and the environment's values in them)
    // on a descriptor: no command line of its process tree shows them.
    let lines = ancestors_command_lines(pid as i32);
    assert!(lines.iter().any(|l| l.contains("bwrap --args 3 -- ")), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("--setenv")), "{lines:#?}");
    kill9(pid);
    let subject = format!("run:{run}");
    let exited = f.sup.await_event(Duration::from_secs(10), |e| e.kind == "runner_exited" && e.subject == subject);
    assert_eq!(cc_tests::payload(&exited)["exit"], "signal 9", "named by its signal, not bubblewrap's code 137");
    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "runner_restarted" && e.subject == subject);
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    assert_eq!(shown["state"], "running", "{shown}");
    let again = shown["runner_pid"].as_u64().unwrap();
    assert!(again > 0 && again != pid, "a new runner serves: {shown}");
    assert_eq!(text(&f.tool(&run, &["read", "README.md"])).0, "# demo\n");
    assert_eq!(text(&f.tool(&run, &["bash", "--", "echo on"])).0, "on\n");
    assert!(f.sup.helper_pids().len() == 3, "the supervisor and its helpers are still up");
}

/// Only a runner that keeps dying fails its run: the restart budget is the helpers'.
#[test]
fn a_runner_that_keeps_dying_fails_its_run_and_the_next_run_works() {
    let f = fixture(Some("[restart]\nbudget = 1\n"));
    let run = f.start_run("chat");
    assert!(f.tool(&run, &["read", "README.md"]).status.success());
    let subject = format!("run:{run}");
    kill9(f.sup.ccctl_json(&["run", "show", &run])["runner_pid"].as_u64().unwrap());
    f.sup.await_event(Duration::from_secs(10), |e| e.kind == "runner_restarted" && e.subject == subject);
    kill9(f.sup.ccctl_json(&["run", "show", &run])["runner_pid"].as_u64().unwrap());
    await_end(&f, &run);
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    assert_eq!(shown["state"], "failed", "the run is marked failed");
    assert_eq!(
        shown["end_reason"], "its runner kept dying: it exited (signal 9) with its restart budget (1) spent",
        "{shown}"
    );
    let out = f.tool(&run, &["read", "README.md"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("is failed"), "{}", text(&out).1);
    let next = f.start_run("chat");
    assert_eq!(text(&f.tool(&next, &["read", "README.md"])).0, "# demo\n");
    let stopped = f.sup.ccctl_json(&["run", "stop", &next]);
    assert_eq!(stopped["state"], "stopped");
    assert!(f.sup.helper_pids().len() == 3, "the supervisor and its helpers are still up");
}

/// The command lines of `pid` and its ancestors up to (not including) the supervisor.
fn ancestors_command_lines(mut pid: i32) -> Vec<String> {
    let mut lines = Vec::new();
    while pid > 1 {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { break };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains("cc-supervisor") {
            break;
        }
        lines.push(line);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        pid = status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|p| p.trim().parse().ok()).unwrap_or(0);
    }
    lines
}

#[test]
fn exec_starts_and_stops_its_own_supervisor_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let before = snapshot(&checkout);
    let data = tmp.path().join("data");
    let exec = |args: &[&str]| {
        Command::new(bin("ccctl"))
            .arg("--data-dir")
            .arg(&data)
            .args(["exec", "--repo", checkout.to_str().unwrap(), "--worktree-backend", "copy"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = exec(&["--", "sh", "-c", "echo inside > made.txt; cat made.txt README.md; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).1);
    assert_eq!(text(&out).0, "inside\n# demo\n");
    assert_eq!(snapshot(&checkout), before, "the checkout never sees the run's writes");
    assert!(processes_mentioning(&data).is_empty(), "{:?}", processes_mentioning(&data));
    let left: Vec<_> = std::fs::read_dir(data.join("conversations")).unwrap().collect();
    assert!(left.is_empty(), "the conversation is removed");

    let denied = exec(&["--", "rm", "-rf", "/"]);
    assert_refused(&denied, "denied", "exec rm -rf /");

    // Against a running supervisor, exec reuses it and leaves it running.
    let sup = Supervisor::start_on(&data, Options::default());
    let out = exec(&["--keep", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(text(&out).1.contains("kept conversation"), "{}", text(&out).1);
    assert_eq!(sup.helper_pids().len(), 3, "the running supervisor is still up");
}

/// Background jobs, `setsid` and `nohup` included, die with the bash call: at its
/// timeout, and when the run is stopped mid-call.
#[test]
fn a_bash_call_takes_its_whole_group_with_it_at_timeout_and_at_run_stop() {
    let f = fixture(Some("[runs]\nbash_timeout_seconds = 1\nbash_max_timeout_seconds = 60\n"));
    let run = f.start_run("chat");
    let line = "(setsid sleep 1000.25 &); nohup sleep 1000.25 >/dev/null 2>&1 & sleep 1000.25";
    let out = f.tool(&run, &["bash", "--", line]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out).1);
    let gone = |marker: &str| processes_mentioning(Path::new(marker)).iter().all(|p| !p.starts_with("sleep"));
    eventually(Duration::from_secs(5), "the timed-out command's group is gone", || gone("1000.25"));

    let data = f.sup.data_dir.clone();
    let call = std::thread::spawn({
        let run = run.clone();
        move || {
            Command::new(bin("ccctl"))
                .arg("--data-dir")
                .arg(&data)
                .args(["tool", &run, "bash", "--timeout", "60", "--", "(setsid sleep 1000.5 &); sleep 1000.5"])
                .output()
                .unwrap()
        }
    });
    eventually(Duration::from_secs(10), "the command started", || !gone("1000.5"));
    assert_eq!(f.sup.ccctl_json(&["run", "stop", &run])["state"], "stopped");
    let out = call.join().unwrap();
    assert!(!out.status.success(), "the call ends with the run: {}", text(&out).1);
    eventually(Duration::from_secs(5), "the stopped run's command is gone", || gone("1000.5"));
}

/// The runner starts in the background: a runner that cannot start fails its run, a
/// file tool says why, and the supervisor stays up.
#[test]
fn a_runner_that_cannot_start_fails_its_run() {
    let f = fixture(Some("runner = \"/bin/false\"\n"));
    let run = f.start_run("chat");
    let out = f.tool(&run, &["read", "README.md"]);
    assert!(!out.status.success());
    let err = text(&out).1;
    assert!(err.contains("did not start") || err.contains("is failed"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    await_end(&f, &run);
    assert_eq!(f.sup.ccctl_json(&["run", "show", &run])["state"], "failed", "the run is marked failed");
    let shown = f.sup.ccctl_json(&["run", "show", &run]);
    assert!(shown.to_string().contains("did not start"), "{shown}");
    // Said once, with how the runner ended.
    assert!(!shown.to_string().contains("did not start: the run's runner did not start"), "{shown}");
    assert!(shown.to_string().contains("(code 1)"), "{shown}");
    assert!(!err.contains("did not start: the run's runner did not start"), "{err}");
    assert_eq!(f.sup.helper_pids().len(), 3, "the supervisor and its helpers are still up");
}

/// Issue 16, items 2 and 5 (ATTACKS.md 45): a run's agent flips a directory of the copy
/// between a real directory and a link to a root-owned host directory, as fast as it
/// can, while 100 runs of the same conversation are started and stopped back to back.
/// No host file changes owner, every start succeeds or says why in one line, and no
/// process of those runs is left.
#[test]
fn run_starts_under_a_swapping_agent_chown_nothing_outside_and_leave_no_process() {
    use std::os::unix::fs::MetadataExt;
    if !cc_tests::privileged("runs as the service user") {
        return;
    }
    let f = fixture(None);
    let copy = f.copy();
    assert_eq!(std::fs::metadata(&copy).unwrap().uid(), 65534, "the copy is the service user's from provisioning");
    assert_eq!(std::fs::metadata(copy.join(".git/HEAD")).unwrap().uid(), 65534);
    let host = f.tmp.path().join("host-owned");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("f"), "root's").unwrap();
    let swapper = f.start_run("chat");
    let script = format!(
        "while [ ! -e .stop ]; do mkdir cc-race && touch cc-race/f; rm -rf cc-race; ln -s {} cc-race; rm -f cc-race; done; echo swapped",
        host.display()
    );
    let flipping = {
        let (data, swapper) = (f.sup.data_dir.clone(), swapper.clone());
        std::thread::spawn(move || {
            Command::new(bin("ccctl"))
                .arg("--data-dir")
                .arg(data)
                .args(["tool", &swapper, "bash", "--timeout", "600", "--", &script])
                .output()
                .unwrap()
        })
    };
    let (mut started, mut refused) = (0, 0);
    for _ in 0..100 {
        let out = f.sup.ccctl(&["run", "start", "--conversation", &f.conversation]);
        let (id, err) = text(&out);
        if out.status.success() {
            started += 1;
            let stopped = f.sup.ccctl(&["run", "stop", id.trim()]);
            assert!(stopped.status.success(), "{}", text(&stopped).1);
        } else {
            refused += 1;
            assert!(err.starts_with("ccctl: ") && err.trim_end().lines().count() == 1, "{err}");
        }
    }
    std::fs::write(copy.join(".stop"), "").unwrap();
    let out = flipping.join().unwrap();
    assert!(text(&out).0.contains("swapped"), "the flipping loop did not run: {}", text(&out).1);
    for path in [host.clone(), host.join("f")] {
        assert_eq!(std::fs::symlink_metadata(&path).unwrap().uid(), 0, "{} changed owner", path.display());
    }
    assert!(started > 0, "no run started under the swapping ({refused} refused)");
    assert!(f.sup.ccctl(&["run", "stop", &swapper]).status.success());
    // Nothing of any run is left: no envelope, runner or command names the data dir.
    let supervisor = bin("cc-supervisor");
    let left: Vec<String> = processes_mentioning(&f.sup.data_dir)
        .into_iter()
        .filter(|p| !p.starts_with(supervisor.to_str().unwrap()))
        .collect();
    assert!(left.is_empty(), "{} of 101 runs left processes: {left:#?}", left.len());
    eprintln!("{started} runs started and stopped, {refused} refused, under the swapping");
}

/// Issue 16, item 5: an agent's tree 2,000 directories deep (deeper than PATH_MAX
/// lets a path name) is removed with its conversation, and no trash is left behind.
#[test]
fn conversation_rm_removes_a_tree_of_any_depth() {
    let f = fixture(None);
    let run = f.start_run("chat");
    // By handle, as a careful agent would (a shell's `cd` slows to a crawl past PATH_MAX).
    let make = "python3 -c \"import os\nfd = os.open('.', os.O_RDONLY)\nfor _ in range(2000):\n    \
                os.mkdir('d', dir_fd=fd); fd = os.open('d', os.O_RDONLY, dir_fd=fd)\nprint('made')\"";
    let out = f.tool(&run, &["bash", "--", make]);
    assert!(text(&out).0.contains("made"), "{}", text(&out).1);
    assert!(f.sup.ccctl(&["run", "stop", &run]).status.success());
    let out = f.sup.ccctl(&["conversation", "rm", &f.conversation]);
    assert!(out.status.success(), "{}", text(&out).1);
    let left: Vec<_> =
        std::fs::read_dir(f.sup.data_dir.join("conversations")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Issue 16, item 1: a link the agent plants where sandboxd would have had to follow
/// it refuses the next bash call in one line naming it, and becomes a sandbox_violation
/// event of the run; once the link is gone, the run goes on.
#[test]
fn a_planted_git_link_refuses_the_next_call_and_is_a_violation_event() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let out = f.tool(&run, &["bash", "--", "ln -s / .git/modules && echo planted"]);
    assert!(text(&out).0.contains("planted"), "{}", text(&out).1);
    let out = f.tool(&run, &["bash", "--", "echo ran"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success() && !stdout.contains("ran"), "{stdout}");
    let link = f.copy().join(".git/modules");
    assert!(stderr.contains(&format!("{} is a symlink", link.display())), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let events = text(&f.sup.ccctl(&["--json", "events"])).0;
    let violation = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["kind"] == "sandbox_violation")
        .unwrap_or_else(|| panic!("no sandbox_violation event:\n{events}"));
    assert_eq!(violation["subject"], format!("run:{run}"));
    assert_eq!(violation["payload"]["attempted"], link.to_str().unwrap(), "{violation}");
    std::fs::remove_file(&link).unwrap();
    assert_eq!(text(&f.tool(&run, &["bash", "--", "echo ran"])).0, "ran\n");
}

/// A run is STARTING until its runner serves, in `run show`, GetRun and the list
/// alike, and RUNNING from then on. The runner here is held at the door by a wrapper
/// that waits on a FIFO the test writes once it has seen STARTING (unwrapped, so that
/// the wrapper and its FIFO need no place in an envelope).
#[test]
fn a_run_is_starting_until_its_runner_serves() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // As root the runner runs as the service user, which must reach the wrapper.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let door = tmp.path().join("door");
    nix::unistd::mkfifo(&door, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    std::fs::set_permissions(&door, std::fs::Permissions::from_mode(0o666)).unwrap();
    let wrapper = tmp.path().join("held-runner");
    let script = format!("#!/bin/sh\nread _ < '{}'\nexec '{}' \"$@\"\n", door.display(), bin("cc-runner").display());
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let checkout = make_checkout(&tmp.path().join("checkout"));
    let config = format!("runner = \"{}\"\n", wrapper.display());
    let options = Options { config: Some(config), args: vec!["--sandbox".into(), "off".into()], ..Default::default() };
    let sup = Supervisor::start_on(&tmp.path().join("data"), options);
    assert!(sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "demo"]).status.success());
    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"]);
    let conversation = text(&out).0.trim().to_owned();
    let out = sup.ccctl(&["run", "start", "--conversation", &conversation]);
    assert!(out.status.success(), "{}", text(&out).1);
    let run = text(&out).0.trim().to_owned();

    let shown = sup.ccctl_json(&["run", "show", &run]);
    assert_eq!((shown["state"].as_str(), shown["runner_pid"].as_u64()), (Some("starting"), Some(0)), "{shown}");
    let listed = sup.ccctl_json(&["run", "list"]);
    assert_eq!(listed[0]["state"], "starting", "{listed}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let state = |sup: &Supervisor| {
        runtime.block_on(async {
            let request = cc_proto::supervisor::v1::GetRunRequest { run_id: run.clone() };
            let run = sup.client().await.runs.get_run(request).await.unwrap().into_inner().run.unwrap();
            cc_proto::supervisor::v1::RunState::try_from(run.state).unwrap()
        })
    };
    assert_eq!(state(&sup), cc_proto::supervisor::v1::RunState::Starting);

    // Open the door: the runner starts, says READY, and the run is running.
    std::fs::write(&door, "go\n").unwrap();
    let subject = format!("run:{run}");
    sup.await_event(Duration::from_secs(10), |e| e.kind == "runner_ready" && e.subject == subject);
    assert_eq!(state(&sup), cc_proto::supervisor::v1::RunState::Running);
    let shown = sup.ccctl_json(&["run", "show", &run]);
    assert_eq!(shown["state"], "running", "{shown}");
    assert!(shown["runner_pid"].as_u64().unwrap() > 0, "{shown}");
    assert_eq!(text(&sup.ccctl(&["tool", &run, "read", "README.md"])).0, "# demo\n");
}

/// Runs of one conversation write the same directories, and every runner is the same
/// pid inside its envelope: their writes' temporary files must not collide (found by
/// the 20-run load benchmark as "File exists").
#[test]
fn runs_of_one_conversation_write_the_same_file_at_once() {
    let f = fixture(None);
    let runs: Vec<String> = (0..4).map(|_| f.start_run("chat")).collect();
    let writers: Vec<_> = runs
        .iter()
        .cycle()
        .take(12)
        .enumerate()
        .map(|(i, run)| {
            let mut child = Command::new(bin("ccctl"))
                .arg("--data-dir")
                .arg(&f.sup.data_dir)
                .args(["tool", run, "write", "shared.txt"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child.stdin.take().unwrap().write_all(format!("writer {i}\n").as_bytes()).unwrap();
            child
        })
        .collect();
    for writer in writers {
        let out = writer.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out).1);
    }
    let content = text(&f.tool(&runs[0], &["read", "shared.txt"])).0;
    assert!(content.starts_with("writer "), "one whole write won: {content:?}");
    let listed = text(&f.tool(&runs[0], &["bash", "--", "ls -A"])).0;
    assert!(!listed.contains(".tmp"), "no temporary file is left: {listed}");
}

#[test]
fn the_state_database_stays_private_in_a_data_directory_runs_can_search() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture(None);
    let run = f.start_run("chat");
    let out = f.tool(&run, &["bash", "--", "echo hello > made.txt && cat made.txt"]);
    assert_eq!(text(&out).0.trim(), "hello", "{}", text(&out).1);
    // The run needed the data directory searchable by its user...
    let mode = |name: &str| std::fs::metadata(f.sup.data_dir.join(name)).unwrap().permissions().mode() & 0o777;
    if nix::unistd::geteuid().is_root() {
        assert_eq!(mode(""), 0o711);
    }
    // ...so what only the supervisor reads is private by its own mode, whatever the
    // umask of whoever started it.
    for name in ["state.db", "state.db-wal", "state.db-shm", "supervisor.lock", "sock"] {
        assert_eq!(mode(name) & 0o077, 0, "{name} is {:o}", mode(name));
    }
}
