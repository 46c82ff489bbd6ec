//! `ccctl install` writes units with this installation's paths (issue 2).

use std::process::Command;

use cc_tests::bin;

fn ccctl(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(bin("ccctl"))
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn user_unit_is_written_with_the_real_binary_path() {
    let home = tempfile::tempdir().unwrap();
    let out = ccctl(home.path(), &["install", "--systemd", "--user"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unit_path = home.path().join(".config/systemd/user/cc-supervisor.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    // root's is /var/lib/control-center, whatever HOME says (runs cannot enter /root).
    let data_dir = if nix::unistd::geteuid().is_root() {
        std::path::PathBuf::from("/var/lib/control-center")
    } else {
        home.path().join(".local/share/control-center")
    };
    let exec =
        format!("ExecStart={} --data-dir {} --log-format json", bin("cc-supervisor").display(), data_dir.display());
    assert!(unit.lines().any(|l| l == exec), "{unit}");
    assert!(unit.contains("Type=notify"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("systemctl --user daemon-reload"), "{stdout}");
}

#[test]
fn dry_run_writes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let out = ccctl(home.path(), &["install", "--systemd", "--user", "--dry-run"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains("[Service]"));
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);

    let out = ccctl(home.path(), &["--json", "install", "--launchd", "--dry-run"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["written"], false);
    assert!(v["path"].as_str().unwrap().ends_with("Library/LaunchAgents/dev.control-center.supervisor.plist"));
    assert!(v["contents"].as_str().unwrap().contains(&bin("cc-supervisor").display().to_string()));
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);

    let out = ccctl(home.path(), &["install", "--systemd", "--dry-run"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("/etc/systemd/system/cc-supervisor.service"));
}

#[test]
fn usage_errors_exit_non_zero() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["install"][..],
        &["install", "--user"],
        &["install", "--systemd", "--launchd"],
        &["install", "--launchd", "--user"],
        &["frobnicate"],
        &["events", "--since", "-1"],
    ] {
        let out = ccctl(home.path(), args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("ccctl: ") && err.lines().count() == 1, "{args:?}: {err}");
        assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);
    }
    for args in [&["--help"][..], &["status", "--help"], &["helpers", "restart", "--help"], &["install", "--help"]] {
        let out = ccctl(home.path(), args);
        assert!(out.status.success(), "{args:?}");
        assert!(String::from_utf8(out.stdout).unwrap().contains("Usage:"));
    }
}
