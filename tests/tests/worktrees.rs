//! Copy-on-write conversation worktrees on real filesystems (issue 3; DESIGN.md §4).
//! The tests make and mount their own btrfs, xfs, ext4 and tmpfs; as root in CI.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cc_tests::fs::{Mount, git, make_checkout, snapshot};
use cc_tests::{Options, Supervisor, all_events, wait_for_event};

/// A supervisor whose data dir is `data`, with `checkout` registered as "demo".
fn supervisor_with(data: &Path, checkout: &Path) -> Supervisor {
    let sup = Supervisor::start_on(data, Options::default());
    let out = sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "demo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    sup
}

/// The new conversation's id and copy, or the error's message as `--json` gives it
/// (one object on stderr, its exit code the process's own).
fn new_conversation(sup: &Supervisor, backend: &str) -> Result<(String, PathBuf), String> {
    let out = sup.ccctl(&["--json", "conversation", "new", "--repo", "demo", "--worktree-backend", backend]);
    if !out.status.success() {
        let stderr = String::from_utf8(out.stderr).unwrap();
        let error: serde_json::Value =
            serde_json::from_str(&stderr).unwrap_or_else(|e| panic!("not one JSON object ({e}): {stderr}"));
        assert_eq!(error["exit_code"].as_i64(), out.status.code().map(i64::from), "{error}");
        return Err(error["error"].as_str().unwrap().to_owned());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok((v["id"].as_str().unwrap().to_owned(), PathBuf::from(v["repos"][0]["path"].as_str().unwrap())))
}

fn conversation_count(sup: &Supervisor) -> usize {
    sup.ccctl_json(&["conversation", "list"]).as_array().unwrap().len()
}

fn dir_entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Whether `filefrag -v` reports every extent of `file` as shared.
fn extents_shared(file: &Path) -> bool {
    let out = std::process::Command::new("filefrag").arg("-v").arg(file).output().expect("filefrag");
    let text = String::from_utf8_lossy(&out.stdout);
    let extents: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()) && l.contains(".."))
        .collect();
    !extents.is_empty() && extents.iter().all(|l| l.contains("shared"))
}

#[test]
fn reflink_on_btrfs_and_xfs_copies_every_file_and_shares_extents() {
    for kind in ["btrfs", "xfs"] {
        let Some(fs) = Mount::new(kind, if kind == "xfs" { 512 } else { 256 }) else { return };
        let checkout = make_checkout(&fs.path.join("checkout"));
        let before = snapshot(&checkout);
        let sup = supervisor_with(&fs.path.join("data"), &checkout);
        let (_id, copy) = new_conversation(&sup, "reflink").unwrap_or_else(|e| panic!("{kind}: {e}"));

        // File for file: content, mode, mtime, link targets; .git, untracked and ignored included.
        assert_eq!(snapshot(&copy), before, "{kind}: the copy differs from the checkout");
        for must in [".git/HEAD", "untracked.txt", "build.log", "link-outside", "link-dangling"] {
            assert!(std::fs::symlink_metadata(copy.join(must)).is_ok(), "{kind}: {must} missing");
        }
        assert!(extents_shared(&copy.join("big.bin")), "{kind}: big.bin shares no extents with the checkout");
        assert_eq!(git(&copy, &["rev-parse", "HEAD"]), git(&checkout, &["rev-parse", "HEAD"]));
        assert!(git(&copy, &["branch", "--list", "feature"]).contains("feature"));
        drop(sup);
    }
}

#[test]
fn work_in_a_copy_never_reaches_the_checkout_or_a_sibling() {
    let Some(fs) = Mount::new("btrfs", 256) else { return };
    let checkout = make_checkout(&fs.path.join("checkout"));
    let pristine = snapshot(&checkout);
    let sup = supervisor_with(&fs.path.join("data"), &checkout);
    let (_a, copy_a) = new_conversation(&sup, "reflink").unwrap();
    let (_b, copy_b) = new_conversation(&sup, "reflink").unwrap();

    std::fs::write(copy_a.join("README.md"), "# rewritten by an agent\n").unwrap();
    std::fs::write(copy_a.join("big.bin"), b"overwritten").unwrap();
    git(&copy_a, &["commit", "-qam", "agent commit"]);
    git(&copy_a, &["branch", "agent-branch"]);
    git(&copy_a, &["tag", "agent-tag"]);
    std::fs::write(copy_a.join("src/nested/lib.rs"), "stashed\n").unwrap();
    git(&copy_a, &["stash", "-q"]);
    git(&copy_a, &["gc", "-q", "--prune=now"]);

    assert_eq!(snapshot(&checkout), pristine, "the registered checkout changed");
    assert_eq!(snapshot(&copy_b), pristine, "a sibling conversation saw another's work");
    assert!(!git(&checkout, &["branch", "--list"]).contains("agent-branch"));
    assert!(git(&checkout, &["stash", "list"]).is_empty());
}

#[test]
fn ext4_refuses_reflink_leaves_nothing_and_copy_then_works() {
    let Some(fs) = Mount::new("ext4", 128) else { return };
    let checkout = make_checkout(&fs.path.join("checkout"));
    let pristine = snapshot(&checkout);
    let sup = supervisor_with(&fs.path.join("data"), &checkout);
    let err = new_conversation(&sup, "reflink").unwrap_err();
    assert!(err.starts_with("cannot provision repository demo: filesystem ext4 at "), "{err}");
    for fix in ["cannot reflink", "btrfs, xfs (reflink=1) or APFS", "--worktree-backend copy", "git-worktree"] {
        assert!(err.contains(fix), "{fix}: {err}");
    }
    assert_eq!(err.lines().count(), 1);
    // A client tells this refusal apart by its reason, not by the message.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = runtime.block_on(async {
        use tokio_stream::StreamExt;
        let request = cc_proto::supervisor::v1::CreateConversationRequest {
            workspace_id: String::new(),
            repository_names: vec!["demo".into()],
            backend: cc_proto::common::v1::WorktreeBackend::Reflink as i32,
        };
        let mut client = sup.client().await;
        match client.conversations.create_conversation(request).await {
            Err(status) => status,
            Ok(stream) => stream.into_inner().filter_map(Result::err).next().await.expect("a refusal"),
        }
    });
    let (reason, metadata) = cc_proto::reasons::reason_of(&status).expect("an ErrorInfo reason");
    assert_eq!(
        (status.code(), reason.as_str()),
        (tonic::Code::FailedPrecondition, cc_proto::reasons::REFLINK_UNSUPPORTED)
    );
    assert!(metadata["path"].ends_with("checkout"), "{metadata:?}");
    assert!(dir_entries(&fs.path.join("data/conversations")).is_empty(), "something was left behind");
    assert_eq!(conversation_count(&sup), 0);

    let (_id, copy) = new_conversation(&sup, "copy").unwrap();
    assert_eq!(snapshot(&copy), pristine);
    assert!(!extents_shared(&copy.join("big.bin")), "the copy backend copies bytes");
    assert_eq!(snapshot(&checkout), pristine);
}

#[test]
fn a_data_dir_on_another_volume_is_refused() {
    let Some(repo_fs) = Mount::new("btrfs", 256) else { return };
    let Some(data_fs) = Mount::new("btrfs", 256) else { return };
    let checkout = make_checkout(&repo_fs.path.join("checkout"));
    let sup = supervisor_with(&data_fs.path.join("data"), &checkout);
    let err = new_conversation(&sup, "reflink").unwrap_err();
    assert!(err.contains("is on another volume than"), "{err}");
    assert!(err.contains("--worktree-backend copy"), "{err}");
    assert!(dir_entries(&data_fs.path.join("data/conversations")).is_empty());
    assert_eq!(conversation_count(&sup), 0);
}

#[test]
fn git_worktree_warns_and_rm_never_touches_the_checkout() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let sup = supervisor_with(&tmp.path().join("data"), &checkout);

    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "git-worktree"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "ccctl: warning: the git-worktree backend shares the registered repository's object store and refs"
        ),
        "{stderr}"
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let list = sup.ccctl_json(&["conversation", "list"]);
    assert_eq!(list[0]["backend"], "git-worktree");
    assert_eq!(list[0]["repos"][0]["branch"], format!("cc/{id}"));

    // Every backend: plant links that point into the checkout, then remove the conversation.
    let (copy_id, copy) = new_conversation(&sup, "copy").unwrap();
    let worktree = PathBuf::from(list[0]["repos"][0]["path"].as_str().unwrap());
    for dir in [&worktree, &copy] {
        std::os::unix::fs::symlink(&checkout, dir.join("escape")).unwrap();
        std::os::unix::fs::symlink(checkout.join("README.md"), dir.join("escape-file")).unwrap();
    }
    let pristine = snapshot(&checkout);
    // The copy backend's rm first: the whole checkout, .git included, is unchanged.
    let out = sup.ccctl(&["conversation", "rm", &copy_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshot(&checkout), pristine, "removing a copy changed the checkout");
    // git-worktree's rm updates the checkout's worktree list (its own entry), nothing else.
    let pristine_git: Vec<_> = pristine.keys().filter(|k| !k.starts_with(".git")).cloned().collect();
    let out = sup.ccctl(&["conversation", "rm", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after = snapshot(&checkout);
    for (path, value) in
        pristine.iter().filter(|(p, _)| p.starts_with(".git/objects") || p.starts_with(".git/refs/heads/main"))
    {
        assert_eq!(after.get(path), Some(value), "{} changed", path.display());
    }
    let after_files: Vec<_> = after.keys().filter(|k| !k.starts_with(".git")).cloned().collect();
    assert_eq!(after_files, pristine_git, "a file of the checkout was removed");
    for (path, value) in &pristine {
        if !path.starts_with(".git") {
            assert_eq!(after.get(path), Some(value), "{} changed", path.display());
        }
    }
    assert!(git(&checkout, &["branch", "--list"]).contains(&format!("cc/{id}")), "the agent's branch is kept");
    assert!(!git(&checkout, &["worktree", "list"]).contains(&id), "the worktree is forgotten");
    assert!(!worktree.exists() && !copy.exists());
    assert_eq!(conversation_count(&sup), 0);
}

#[test]
fn a_disk_that_fills_mid_copy_leaves_nothing_registered() {
    let Some(small) = Mount::new("tmpfs", 4) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    std::fs::write(checkout.join("huge.bin"), vec![1u8; 8 << 20]).unwrap();
    let sup = supervisor_with(&small.path.join("data"), &checkout);
    let err = new_conversation(&sup, "copy").unwrap_err();
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(err.lines().count(), 1);
    assert!(dir_entries(&small.path.join("data/conversations")).is_empty(), "a half-made copy was left");
    assert_eq!(conversation_count(&sup), 0);

    // The next attempt starts clean.
    std::fs::remove_file(checkout.join("huge.bin")).unwrap();
    let (_id, copy) = new_conversation(&sup, "copy").unwrap();
    assert_eq!(snapshot(&copy), snapshot(&checkout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_killed_mid_provisioning_leaves_nothing_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    for i in 0..20_000 {
        let dir = checkout.join(format!("gen/{}", i % 200));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.txt")), format!("{i}\n").repeat(200)).unwrap();
    }
    let data = tmp.path().join("data");
    let mut sup = supervisor_with(&data, &checkout);
    let mut client = sup.client().await;
    let request = cc_proto::supervisor::v1::CreateConversationRequest {
        workspace_id: String::new(),
        repository_names: vec!["demo".into()],
        backend: cc_proto::common::v1::WorktreeBackend::Copy as i32,
    };
    let mut stream = client.conversations.create_conversation(request).await.unwrap().into_inner();
    // Kill while the copy is under way: after some files, before the last.
    use cc_proto::supervisor::v1::create_conversation_response::Update;
    use tokio_stream::StreamExt;
    loop {
        let update = tokio::time::timeout(Duration::from_secs(20), stream.next()).await.unwrap().unwrap().unwrap();
        match update.update {
            Some(Update::Progress(p)) if p.files_done < p.files_total => break,
            Some(Update::Conversation(_)) => panic!("provisioning finished before the test could interrupt it"),
            _ => {}
        }
    }
    sup.signal(nix::sys::signal::Signal::SIGKILL);
    cc_tests::wait_with_limit(&mut sup.child, Duration::from_secs(5));
    assert_eq!(dir_entries(&data.join("conversations")).len(), 1, "the half-made conversation is on disk");

    let again = Supervisor::start_on(&data, Options::default());
    assert!(dir_entries(&data.join("conversations")).is_empty(), "the restart swept it");
    assert_eq!(conversation_count(&again), 0);
    let mut client = again.client().await;
    let swept = wait_for_event(&mut client, 0, Duration::from_secs(5), |e| e.kind == "conversation_swept").await;
    assert!(swept.subject.starts_with("conversation:c"));
    assert!(all_events(&mut client).await.iter().all(|e| e.kind != "conversation_created"));
}

#[test]
fn bad_registrations_are_one_line_errors_that_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let sup = supervisor_with(&tmp.path().join("data"), &checkout);
    let plain = tmp.path().join("not-a-repo");
    std::fs::create_dir(&plain).unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let inside_data = tmp.path().join("data/conversations/planted");
    std::fs::create_dir_all(&inside_data).unwrap();
    git(&inside_data, &["init", "-q"]);
    let second = make_checkout(&tmp.path().join("second"));
    // A linked worktree keeps its repository elsewhere: a copy would write into it.
    let linked = tmp.path().join("linked");
    git(&checkout, &["worktree", "add", "-q", linked.to_str().unwrap()]);
    let symlinked_git = tmp.path().join("symlinked-git");
    std::fs::create_dir(&symlinked_git).unwrap();
    std::os::unix::fs::symlink(checkout.join(".git"), symlinked_git.join(".git")).unwrap();
    let before = sup.ccctl(&["repo", "list"]).stdout;

    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["repo".into(), "add".into(), s(&tmp.path().join("missing"))], "No such file or directory"),
        (vec!["repo".into(), "add".into(), s(&file)], "is not a directory"),
        (vec!["repo".into(), "add".into(), s(&plain)], "is not a git checkout"),
        (vec!["repo".into(), "add".into(), s(&checkout.join("src"))], "not its top level"),
        (vec!["repo".into(), "add".into(), s(&inside_data)], "is inside the data dir"),
        (vec!["repo".into(), "add".into(), s(&linked)], "a linked worktree or a submodule"),
        (vec!["repo".into(), "add".into(), s(&symlinked_git)], "is a symlink"),
        (vec!["repo".into(), "add".into(), s(&checkout), "--name".into(), "other".into()], "already registered"),
        (vec!["repo".into(), "add".into(), s(&second), "--name".into(), "../x".into()], "may not start with"),
        (vec!["repo".into(), "add".into(), s(&second), "--name".into(), "a/b".into()], "may contain only"),
        (vec!["repo".into(), "add".into(), s(&checkout), "--workspace".into(), "nope".into()], "no workspace named"),
        (vec!["repo".into(), "rm".into(), "nope".into()], "no repository named"),
        (vec!["conversation".into(), "new".into(), "--repo".into(), "nope".into()], "no repository named"),
        (
            vec![
                "conversation".into(),
                "new".into(),
                "--repo".into(),
                "demo".into(),
                "--worktree-backend".into(),
                "cp".into(),
            ],
            "invalid value",
        ),
        (vec!["conversation".into(), "rm".into(), "c0000".into()], "no conversation named"),
        (vec!["workspace".into(), "new".into(), "../evil".into()], "may not start with"),
        (vec!["workspace".into(), "new".into(), "a/b".into()], "may contain only"),
        (vec!["workspace".into(), "new".into(), "default".into()], "already exists"),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sup.ccctl(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("ccctl: ") && err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    assert_eq!(sup.ccctl(&["repo", "list"]).stdout, before);
    assert_eq!(conversation_count(&sup), 0);

    // A checkout that contains the data dir would copy itself.
    let outer = tmp.path().join("outer");
    std::fs::create_dir(&outer).unwrap();
    git(&outer, &["init", "-q"]);
    let nested = Supervisor::start_on(&outer.join("data"), Options::default());
    let out = nested.ccctl(&["repo", "add", outer.to_str().unwrap()]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && err.contains("a copy would contain itself"), "{err}");
}

#[test]
fn odd_names_and_paths_are_kept_exactly() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("we ird *[1] name"));
    let odd = std::ffi::OsStr::from_bytes(b"non-utf8-\xff\xfe.txt");
    std::fs::write(checkout.join(odd), "bytes").unwrap();
    std::fs::write(checkout.join("spaces and * glob?.txt"), "glob").unwrap();
    let pristine = snapshot(&checkout);
    let sup = supervisor_with(&tmp.path().join("data"), &checkout);
    let (_id, copy) = new_conversation(&sup, "copy").unwrap();
    assert_eq!(snapshot(&copy), pristine);
    assert_eq!(std::fs::read(copy.join(odd)).unwrap(), b"bytes");

    // Registered through a symlink: both spellings are recorded.
    let link = tmp.path().join("via-link");
    std::os::unix::fs::symlink(&checkout, &link).unwrap();
    let sup2 = Supervisor::start(Options::default());
    let out = sup2.ccctl(&["--json", "repo", "add", link.to_str().unwrap(), "--name", "linked"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["path"], link.to_str().unwrap());
    assert_eq!(v[0]["resolved_path"], std::fs::canonicalize(&checkout).unwrap().to_str().unwrap());
}

#[test]
fn special_files_are_skipped_with_a_warning_and_mounts_inside_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    nix::unistd::mkfifo(&checkout.join("a-fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let sup = supervisor_with(&tmp.path().join("data"), &checkout);
    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("ccctl: warning: demo: skipped FIFO") && stderr.contains("a-fifo"), "{stderr}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(!tmp.path().join(format!("data/conversations/{id}/repos/demo/a-fifo")).exists());

    // A filesystem mounted inside the checkout cannot be reflinked across: refused before
    // anything is written.
    let Some(btrfs) = Mount::new("btrfs", 256) else { return };
    let checkout = make_checkout(&btrfs.path.join("checkout"));
    let Some(_inner) = MountAt::tmpfs(&checkout.join("node_modules")) else { return };
    std::fs::write(checkout.join("node_modules/dep.js"), "x").unwrap();
    let sup = supervisor_with(&btrfs.path.join("data"), &checkout);
    let err = new_conversation(&sup, "reflink").unwrap_err();
    assert!(err.contains("a mount of another filesystem inside the checkout"), "{err}");
    assert!(dir_entries(&btrfs.path.join("data/conversations")).is_empty());
}

/// A tmpfs mounted at a given place, unmounted on drop.
struct MountAt(PathBuf);

impl MountAt {
    fn tmpfs(path: &Path) -> Option<Self> {
        if !cc_tests::privileged("mounting a tmpfs") {
            return None;
        }
        std::fs::create_dir_all(path).unwrap();
        let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "tmpfs"]).arg(path).status().unwrap();
        assert!(ok.success());
        Some(Self(path.to_owned()))
    }
}

impl Drop for MountAt {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn removal_is_atomic_and_a_removed_conversation_is_not_swept_back() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let data = tmp.path().join("data");
    let sup = supervisor_with(&data, &checkout);
    let (id, copy) = new_conversation(&sup, "copy").unwrap();
    // An agent closed a directory of its copy: rm still works.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(copy.join("src"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = sup.ccctl(&["conversation", "rm", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir_entries(&data.join("conversations")).is_empty());
    drop(sup);

    // A directory with no record and no manifest is not ours to delete: it is kept.
    let stray = data.join("conversations/cdeadbeefdeadbeef");
    std::fs::create_dir_all(stray.join("repos/demo")).unwrap();
    std::fs::write(stray.join("repos/demo/work.txt"), "an agent's work").unwrap();
    let again = Supervisor::start_on(&data, Options::default());
    assert_eq!(std::fs::read_to_string(stray.join("repos/demo/work.txt")).unwrap(), "an agent's work");
    assert_eq!(conversation_count(&again), 0);
}
