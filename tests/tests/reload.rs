//! Reloading the configuration without ending a run (issue 35): `ccctl config reload`
//! (the units' `ExecReload=`) and SIGHUP read config.toml and the rules files again;
//! live runs keep running and their next decisions follow the new rules; an invalid
//! file changes nothing and says which file and where.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use cc_tests::runs::{Fixture, assert_refused, fixture, text};
use cc_tests::{eventually, payload};

const DENY_COMMANDS: &str =
    "[[rule]]\neffect = \"run_command\"\ndecision = \"deny\"\nreason = \"reloaded: no commands today\"\n";

fn write(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// A supervisor whose config.toml names `rules.toml` beside it (empty at first), with
/// one live run.
fn world() -> (Fixture, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap().keep();
    let rules = dir.join("rules.toml");
    write(&rules, "");
    let f = fixture(Some(&format!("[gate]\nrules = \"{}\"\n", rules.display())));
    let run = f.start_run("chat");
    (f, rules, run)
}

fn bash(f: &Fixture, run: &str, line: &str) -> std::process::Output {
    f.tool(run, &["bash", "--", line])
}

fn state(f: &Fixture, run: &str) -> String {
    f.sup.ccctl_json(&["run", "show", run])["state"].as_str().unwrap().to_owned()
}

/// The `config_reloaded` events so far (`ccctl --json events` prints a line each).
fn reloads(f: &Fixture) -> Vec<serde_json::Value> {
    let out = f.sup.ccctl(&["--json", "events"]);
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = lines.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    all.filter(|e| e["kind"] == "config_reloaded").collect()
}

#[test]
fn a_reload_puts_new_rules_in_force_for_live_runs_and_ends_none() {
    let (f, rules, run) = world();
    assert_eq!(text(&bash(&f, &run, "echo before")).0, "before\n");

    write(&rules, DENY_COMMANDS);
    let out = f.sup.ccctl(&["config", "reload"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("reloaded ") && stdout.contains("and 1 rules file in "), "{stdout}");
    assert!(stdout.contains("; 1 live runs kept running\n"), "{stdout}");
    assert!(stdout.contains("applied now: [gate] rules\n"), "{stdout}");
    assert!(stdout.contains("its network on or off, and its allowlist"), "{stdout}");
    // The live run's next decision follows the new rules; the run itself goes on.
    let denied = bash(&f, &run, "echo after");
    assert_refused(&denied, "denied", "a command after the reload");
    assert!(text(&denied).1.contains("reloaded: no commands today"), "{}", text(&denied).1);
    assert_eq!(state(&f, &run), "running");
    let json = f.sup.ccctl_json(&["config", "reload"]);
    assert_eq!(json["applied"], serde_json::json!([]), "nothing changed since: {json}");
    assert_eq!(json["live_runs"], 1);

    // A helper killed and restarted under the live run: its decisions still follow
    // the reloaded rules (they are the supervisor's, not the helper's).
    let sandboxd = f.sup.helper_pids().into_iter().find(|(n, _)| n == "sandboxd").unwrap().1;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(sandboxd as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    eventually(Duration::from_secs(30), "sandboxd restarted", || {
        f.sup.helper_pids().into_iter().any(|(n, pid)| n == "sandboxd" && pid != sandboxd)
    });
    assert_refused(&bash(&f, &run, "echo after the kill"), "denied", "after sandboxd's kill -9");

    // SIGHUP does the same, back to no rule.
    let seen = reloads(&f).len();
    assert_eq!(seen, 2, "each ccctl reload is an event");
    write(&rules, "");
    f.sup.signal(nix::sys::signal::Signal::SIGHUP);
    eventually(Duration::from_secs(30), "the SIGHUP's reload", || reloads(&f).len() > seen);
    let last = reloads(&f).pop().unwrap();
    assert_eq!(last["payload"]["applied"], serde_json::json!(["[gate] rules"]), "{last}");
    assert_eq!(last["payload"]["live_runs"], 1, "{last}");
    assert_eq!(text(&bash(&f, &run, "echo again")).0, "again\n");
    assert_eq!(state(&f, &run), "running");
}

#[test]
fn an_invalid_file_changes_nothing_and_says_which_and_where() {
    let (f, rules, run) = world();
    write(&rules, DENY_COMMANDS);
    assert!(f.sup.ccctl(&["config", "reload"]).status.success());

    // A rules file that does not parse: refused, naming it; the old rules stand.
    write(&rules, "[[rule]]\neffect = \"run_command\"\ndecision = \"sometimes\"\n");
    let out = f.sup.ccctl(&["config", "reload"]);
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("ccctl: ") && err.contains(&rules.display().to_string()), "{err}");
    assert!(err.contains(":3"), "the line: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_refused(&bash(&f, &run, "echo still"), "denied", "the old rules after a refused reload");

    // A missing rules file says it is the rules file that is missing.
    std::fs::remove_file(&rules).unwrap();
    let err = text(&f.sup.ccctl(&["config", "reload"])).1;
    assert!(err.contains("cannot read rules file") && err.contains(&rules.display().to_string()), "{err}");

    // A config.toml that does not parse: refused, naming it and its line.
    write(&rules, "");
    let config = f.sup.data_dir.join("config.toml");
    let before = std::fs::read_to_string(&config).unwrap();
    write(&config, &format!("{before}\n[runs]\nbash_timeout_seconds = \"soon\"\n"));
    let out = f.sup.ccctl(&["config", "reload"]);
    let err = text(&out).1;
    assert!(!out.status.success() && err.contains("config.toml") && err.contains("line"), "{err}");
    assert_refused(&bash(&f, &run, "echo still"), "denied", "the old rules after a refused config.toml");
    let refused = f.sup.await_event(Duration::from_secs(10), |e| e.kind == "config_reload_refused");
    assert!(
        payload(&refused)["file"]
            .as_str()
            .is_some_and(|file| file.ends_with("rules.toml") || file.ends_with("config.toml"))
    );

    // What only a restart applies is named, and the rest applies now.
    write(&config, &format!("{before}\n[sandbox]\nbwrap = \"/usr/bin/bwrap\"\n"));
    let out = f.sup.ccctl(&["config", "reload"]);
    let stdout = text(&out).0;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(stdout.contains("applied now: [gate] rules\n"), "{stdout}");
    assert!(stdout.contains("changed, applied at the next start: [sandbox]\n"), "{stdout}");
    assert_eq!(text(&bash(&f, &run, "echo allowed")).0, "allowed\n");
    assert_eq!(state(&f, &run), "running");
}
