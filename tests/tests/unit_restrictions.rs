//! What systemd units' hardening does to runs, reproduced with the same kernel
//! mechanisms and no service manager (issue 35):
//!
//! - `RestrictSUIDSGID=` (shipped) installs a seccomp filter that answers `openat2`
//!   ENOSYS, and `NoNewPrivileges=` (shipped) sets no_new_privs: `without-openat2` does
//!   both. Runs must run there and stay confined.
//! - `ProtectKernelTunables=` (left out of the units) bind-mounts `/proc/sys` read-only
//!   in the service's mount namespace: `unshare --mount` and a read-only bind do the
//!   same. No envelope can be built there; the probe must say why in one line.

use cc_tests::runs::{assert_refused, fixture_with, text};
use cc_tests::{Options, bin, privileged};

fn launched_by(launcher: &[&str]) -> Options {
    Options { launcher: launcher.iter().map(|s| s.to_string()).collect(), ..Default::default() }
}

#[test]
fn runs_run_and_stay_confined_under_the_units_restrictions() {
    if !privileged("envelopes as the system unit builds them") {
        return;
    }
    let wrapper = bin("without-openat2");
    let f = fixture_with(launched_by(&[wrapper.to_str().unwrap()]));
    let line = &f.sup.stdout_lines[0];
    assert!(line.starts_with("cc-supervisor: sandbox backend=native (bubblewrap "), "{line}");
    assert!(line.contains("paths by component walk (openat2: ENOSYS"), "{line}");
    let status = f.sup.ccctl_json(&["status"]);
    assert_eq!(format!("cc-supervisor: {}", status["sandbox"].as_str().unwrap()), *line);

    let run = f.start_run("chat");
    // The harness bash in its envelope: a write in the copy, nothing outside it.
    let out = f.tool(&run, &["bash", "--", "echo works > inside.txt && cat inside.txt; cat /etc/shadow"]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.starts_with("works"), "{stdout}{stderr}");
    assert!(stderr.contains("/etc/shadow: Permission denied"), "{stderr}");
    assert_eq!(std::fs::read_to_string(f.copy().join("inside.txt")).unwrap(), "works\n");
    assert!(!f.checkout.join("inside.txt").exists());

    // Nor make a user namespace of its own.
    let probe = "import ctypes; l=ctypes.CDLL(None, use_errno=True); \
                 print('unshare', l.unshare(0x10000000), ctypes.get_errno()); \
                 print('clone', l.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())";
    let out = f.tool(&run, &["bash", "--", &format!("python3 -c \"{probe}\"")]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("unshare -1 1") && stdout.contains("clone -1 1"), "{stdout}{stderr}");

    // The runner's file tools resolve by the walk: inside works, a link out does not.
    let outside = f.outside(&[("secret.txt", "the host's secret")]);
    std::os::unix::fs::symlink(outside.join("secret.txt"), f.copy().join("leak")).unwrap();
    std::os::unix::fs::symlink("../../../../outside", f.copy().join("up")).unwrap();
    let read = f.tool(&run, &["read", "inside.txt"]);
    assert!(text(&read).0.contains("works"), "{}", text(&read).1);
    for path in ["leak", "up/secret.txt", "../outside/secret.txt"] {
        assert_refused(&f.tool(&run, &["read", path]), "refused", path);
    }
    let wrote = f.tool_stdin(&run, &["write", "sub/dir/new.txt"], "made");
    assert!(wrote.status.success(), "{}", text(&wrote).1);
    assert_eq!(std::fs::read_to_string(f.copy().join("sub/dir/new.txt")).unwrap(), "made");
    assert_refused(&f.tool_stdin(&run, &["write", "up/planted.txt"], "x"), "refused", "write through a link");
    assert!(!outside.join("planted.txt").exists());
}

#[test]
fn a_read_only_proc_sys_is_named_as_the_reason_no_envelope_can_be_built() {
    if !privileged("a mount namespace with a read-only /proc/sys") {
        return;
    }
    let read_only_proc_sys = "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec \"$@\"";
    let options =
        launched_by(&["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", read_only_proc_sys, "sh"]);
    let sup = cc_tests::Supervisor::start(options);
    let line = &sup.stdout_lines[0];
    assert!(line.starts_with("cc-supervisor: sandbox backend=none (bubblewrap "), "{line}");
    assert!(
        line.contains("/proc/sys is read-only here, as systemd's ProtectKernelTunables= or a container makes it"),
        "{line}"
    );
    // A command run there says, before its output, that it runs unwrapped and why.
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let repo = cc_tests::fs::make_checkout(&home.path().join("repo"));
    let out = sup.ccctl(&["exec", "--repo", repo.to_str().unwrap(), "--worktree-backend", "copy", "--", "echo", "ran"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "ran\n", "{stderr}");
    assert!(
        stderr.starts_with("ccctl: note: this command runs unwrapped (no OS sandbox: bubblewrap ")
            && stderr.contains("/proc/sys is read-only here"),
        "{stderr}"
    );
    // Asked for native, it refuses to start, with the same line.
    let tmp = tempfile::tempdir().unwrap();
    let mut strict =
        launched_by(&["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", read_only_proc_sys, "sh"]);
    strict.args = vec!["--sandbox".into(), "native".into()];
    let refused =
        cc_tests::Supervisor::try_start_on(&tmp.path().join("data"), strict).err().expect("started without a sandbox");
    assert!(refused.contains("/proc/sys is read-only here"), "{refused}");
}
