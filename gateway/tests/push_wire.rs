//! The gateway's push protocol code against real git: `git push --receive-pack` runs the
//! `stdio_gate` example, which reads each push with `cc_gateway::git`, refuses refs
//! named in `CC_GATE_REFUSE`, forwards the rest to a real `git receive-pack`, and
//! answers with our report-status. git must print our refusals as its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The example binary cargo built next to this test's `deps/` directory.
fn stdio_gate() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let gate = dir.join("examples/stdio_gate");
    assert!(gate.exists(), "{} is missing: cargo test builds examples", gate.display());
    gate
}

fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    upstream: PathBuf,
    work: PathBuf,
}

/// A bare upstream with `main`, and a clone with a new commit on `main` and `feature`.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let upstream = tmp.path().join("up.git");
    let work = tmp.path().join("work");
    ok(tmp.path(), &["init", "-q", "--bare", "-b", "main", up(&upstream)]);
    ok(tmp.path(), &["init", "-q", "-b", "main", up(&work)]);
    std::fs::write(work.join("a"), "1").unwrap();
    ok(&work, &["add", "a"]);
    ok(&work, &["commit", "-qm", "first"]);
    ok(&work, &["remote", "add", "origin", up(&upstream)]);
    ok(&work, &["push", "-q", "origin", "main"]);
    ok(&work, &["tag", "v1"]);
    std::fs::write(work.join("a"), "2").unwrap();
    ok(&work, &["commit", "-qam", "second"]);
    ok(&work, &["branch", "feature"]);
    Fixture { _tmp: tmp, upstream, work }
}

fn up(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `git push` through the gate, refusing `refuse`.
fn push(f: &Fixture, refuse: &str, args: &[&str]) -> Output {
    let receive_pack = format!("env CC_GATE_REFUSE={refuse} {}", stdio_gate().display());
    let mut all = vec!["push", "--receive-pack", &receive_pack];
    all.extend_from_slice(args);
    git(&f.work, &all)
}

fn upstream_ref(f: &Fixture, name: &str) -> Option<String> {
    let out = git(&f.upstream, &["rev-parse", "--verify", "-q", name]);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn a_refused_ref_is_reported_by_git_and_an_allowed_one_lands() {
    let f = fixture();
    let before = upstream_ref(&f, "refs/heads/main").unwrap();
    let out = push(&f, "refs/heads/main", &["origin", "main", "feature"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a push with a refused ref exits non-zero: {stderr}");
    assert!(
        stderr
            .contains("! [remote rejected] main -> main (Control Center policy: pushes to refs/heads/main are denied)"),
        "{stderr}"
    );
    assert!(stderr.contains("* [new branch]      feature -> feature"), "{stderr}");
    assert_eq!(upstream_ref(&f, "refs/heads/main").unwrap(), before, "main did not move");
    assert_eq!(upstream_ref(&f, "refs/heads/feature"), Some(ok(&f.work, &["rev-parse", "feature"])));
}

#[test]
fn an_atomic_push_with_one_refusal_lands_nothing() {
    let f = fixture();
    let out = push(&f, "refs/heads/main", &["--atomic", "origin", "main", "feature"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("main -> main (Control Center policy: pushes to refs/heads/main are denied)"), "{stderr}");
    assert!(stderr.contains("feature -> feature (Control Center policy: atomic push refused"), "{stderr}");
    assert_eq!(upstream_ref(&f, "refs/heads/feature"), None);
}

#[test]
fn deletes_and_tags_follow_their_rules() {
    let f = fixture();
    let out = push(&f, "refs/tags/*", &["origin", "v1", ":refs/heads/main"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("! [remote rejected] v1 -> v1 (Control Center policy: pushes to refs/tags/v1 are denied)"),
        "{stderr}"
    );
    // The delete was allowed; upstream itself refuses to delete its current branch.
    assert!(stderr.contains("[remote rejected] main (deletion of the current branch prohibited)"), "{stderr}");
    assert_eq!(upstream_ref(&f, "refs/tags/v1"), None);
}

#[test]
fn an_allowed_push_goes_through_untouched() {
    let f = fixture();
    let out = push(&f, "refs/heads/other", &["origin", "main", "feature", "v1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(upstream_ref(&f, "refs/heads/main"), Some(ok(&f.work, &["rev-parse", "main"])));
    assert!(upstream_ref(&f, "refs/tags/v1").is_some());
}

#[test]
fn an_upstream_hook_that_declines_is_passed_through() {
    let f = fixture();
    let hook = f.upstream.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'hook says: not today' >&2\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = push(&f, "refs/heads/main", &["origin", "main", "feature"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("remote: hook says: not today"), "{stderr}");
    assert!(stderr.contains("feature -> feature (pre-receive hook declined)"), "{stderr}");
    assert!(stderr.contains("main -> main (Control Center policy"), "{stderr}");
}

#[test]
fn nothing_to_push_is_a_clean_no_op() {
    let f = fixture();
    let first = push(&f, "", &["origin", "main"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let again = push(&f, "", &["origin", "main"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stderr).contains("Everything up-to-date"));
}
