//! Issue 16, item 1 (ATTACKS.md 44, 45): links planted where sandboxd, as root, looks
//! for repositories. Nothing privileged follows them: the next launch is refused with
//! the link's path, nothing outside the roots is read, created or mounted, and a
//! directory swapped for a link while launches are made never gets its target mounted.

use super::*;
use std::collections::BTreeMap as Map;

/// A host directory shaped like a place holding repositories: a subdirectory with a
/// file named `config`, as the red team's was. Its name is what mountinfo is searched
/// for.
fn shaped_host_dir(w: &World) -> PathBuf {
    let host = w.root.join("canary-host");
    std::fs::create_dir_all(host.join("repo")).unwrap();
    std::fs::write(host.join("repo/config"), "[core]\n").unwrap();
    std::fs::write(host.join("config"), "[core]\n").unwrap();
    host
}

/// A snapshot of `dir` without the run's own copy (which the launches write).
fn outside_the_copy(dir: &Path, w: &World) -> Map<PathBuf, String> {
    let copy = w.repo.strip_prefix(dir).map(Path::to_owned).ok();
    snapshot(dir).into_iter().filter(|(rel, _)| copy.as_ref().is_none_or(|c| !rel.starts_with(c))).collect()
}

async fn refused(client: &mut Client, kind: cc_proto::common::v1::EnvelopeKind) -> tonic::Status {
    let request = pb::LaunchRequest {
        run_id: "r1".into(),
        kind: kind as i32,
        argv: vec![b"/bin/true".to_vec()],
        timeout_seconds: 5,
        host: None,
        ..Default::default()
    };
    match client.launch(request).await {
        Err(status) => status,
        Ok(stream) => {
            use tokio_stream::StreamExt;
            let events: Vec<_> = stream.into_inner().collect().await;
            panic!("the launch was not refused: {events:?}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_where_repositories_are_kept_refuse_the_next_launch_and_touch_nothing_outside() {
    let w = world();
    let host = shaped_host_dir(&w);
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    // A first launch creates the copy's missing vectors, so that what follows changes
    // nothing of the run's own either.
    for kind in [BASH, OVERLAY] {
        assert_eq!(run(&mut client, "r1", kind, "true").await.code(), Some(0));
    }
    let ancestor = w.repo.parent().unwrap().parent().unwrap().to_owned();
    let targets: [(&str, PathBuf); 4] =
        [("host", host.clone()), ("/", PathBuf::from("/")), ("data dir", w.data.clone()), ("ancestor", ancestor)];
    let places = [
        (".git/modules", "true"),
        (".git/modules/x", "mkdir -p .git/modules"),
        (".git/worktrees", "true"),
        ("vendor/.git", "mkdir -p vendor"),
    ];
    for (target_name, target) in &targets {
        for (place, prepare) in places {
            // The agent plants it, from inside its own envelope.
            let plant = format!("{prepare} && ln -s {} {place} && echo PLANTED", q(target));
            let out = run(&mut client, "r1", BASH, &plant).await;
            assert!(out.stdout.contains("PLANTED"), "{place} -> {target_name}: {}", out.stderr);
            let host_before = snapshot(&host);
            let checkout_before = snapshot(&w.checkout);
            let data_before = outside_the_copy(&w.data, &w);
            for kind in [BASH, OVERLAY] {
                let status = refused(&mut client, kind).await;
                let link = w.repo.join(place);
                assert!(
                    status.message().contains(&format!("{} is a symlink", link.display())),
                    "{place} -> {target_name} ({kind:?}): {}",
                    status.message()
                );
                let (reason, metadata) = cc_proto::reasons::reason_of(&status).expect("an ErrorInfo reason");
                assert_eq!(reason, cc_proto::reasons::LINK_IN_ROOT);
                assert_eq!(metadata["path"], link.to_string_lossy());
            }
            assert_eq!(snapshot(&host), host_before, "{place} -> {target_name}: the host directory changed");
            assert_eq!(snapshot(&w.checkout), checkout_before, "{place} -> {target_name}: the checkout changed");
            assert_eq!(outside_the_copy(&w.data, &w), data_before, "{place} -> {target_name}: the data dir changed");
            for made in ["hooks", "commondir", "config.worktree"] {
                assert!(!host.join("repo").join(made).exists(), "{place} -> {target_name}: {made} made outside");
            }
            // The person removes the link; the run goes on, and nothing of the host is
            // mounted in its envelope.
            std::fs::remove_file(w.repo.join(place)).unwrap();
            for made in [".git/modules", "vendor"] {
                let _ = std::fs::remove_dir(w.repo.join(made));
            }
            let out = run(&mut client, "r1", BASH, "cat /proc/self/mountinfo").await;
            assert_eq!(out.code(), Some(0), "{place} -> {target_name}: {}", out.stderr);
            assert!(!out.stdout.contains("canary-host"), "{}", out.stdout);
        }
    }
    assert!(!Path::new("/hooks").exists() && !Path::new("/commondir").exists());
}

/// ATTACKS.md 45: `.git/modules` flipped between a real directory (holding a submodule
/// repository, so that its vectors and the directories above them are bound) and a link
/// to a host directory shaped the same, as fast as the host can, while launches are
/// made. Every launch either runs with only the run's own files mounted, or fails: none
/// mounts or writes what the link points at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_link_during_launches_is_never_what_gets_mounted() {
    let w = world();
    let host = shaped_host_dir(&w);
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let modules = w.repo.join(".git/modules");
    std::fs::create_dir_all(modules.join("repo")).unwrap();
    std::fs::write(modules.join("repo/config"), "[core]\n").unwrap();
    if nix::unistd::geteuid().is_root() {
        let chown = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(&modules).status().unwrap();
        assert!(chown.success());
    }
    let host_before = snapshot(&host);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, modules, host) = (stop.clone(), modules.clone(), host.clone());
        let aside = modules.with_file_name("modules-aside");
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            // bubblewrap makes a missing bind destination as it mounts: while the real
            // directory is aside, an envelope being made may put an empty mount point
            // where it was. The agent then meets a directory there and swaps on.
            let clear = |path: &Path| match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
                Ok(_) => std::fs::remove_file(path).unwrap(),
                Err(_) => {}
            };
            let retry = |what: &str, step: &mut dyn FnMut() -> std::io::Result<()>| {
                for _ in 0..1000 {
                    if step().is_ok() {
                        return;
                    }
                    clear(&modules);
                }
                panic!("{what}: {:?}", step());
            };
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(&modules, &aside).unwrap();
                retry("plant the link", &mut || std::os::unix::fs::symlink(&host, &modules));
                clear(&modules);
                retry("put the directory back", &mut || std::fs::rename(&aside, &modules));
                swaps += 1;
            }
            swaps
        })
    };
    let (mut ran, mut failed) = (0, 0);
    for _ in 0..60 {
        let request = pb::LaunchRequest {
            run_id: "r1".into(),
            kind: BASH as i32,
            argv: vec![b"/bin/cat".to_vec(), b"/proc/self/mountinfo".to_vec()],
            timeout_seconds: 10,
            host: None,
            ..Default::default()
        };
        let Ok(stream) = client.launch(request).await else {
            failed += 1;
            continue;
        };
        use tokio_stream::StreamExt;
        let (mut stdout, mut code) = (String::new(), None);
        let mut stream = stream.into_inner();
        while let Some(Ok(event)) = stream.next().await {
            match event.event {
                Some(pb::launch_response::Event::Stdout(b)) => stdout.push_str(&String::from_utf8_lossy(&b)),
                Some(pb::launch_response::Event::Exit(e)) => code = e.code,
                _ => {}
            }
        }
        assert!(!stdout.contains("canary-host"), "the link's target was mounted:\n{stdout}");
        if code == Some(0) { ran += 1 } else { failed += 1 }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    assert_eq!(snapshot(&host), host_before, "the host directory changed");
    for made in ["hooks", "commondir", "config.worktree"] {
        assert!(!host.join("repo").join(made).exists(), "{made} was made in the host directory");
    }
    eprintln!("{ran} launches ran, {failed} failed or were refused, over {swaps} swaps");
    // With the swapping over, the run works again.
    assert_eq!(run(&mut client, "r1", BASH, "true").await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protections_survive_renames_swaps_and_planted_links() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let config_before = std::fs::read(w.repo.join(".git/config")).unwrap();
    // Rename the repository's .git away and make a new one; rename the repository.
    let script = "mv .git .git-old 2>/dev/null && echo 'MOVED .git'\n\
                  mkdir -p .git-new/hooks && mv -T .git-new .git 2>/dev/null && echo 'REPLACED .git'\n\
                  rm -rf .git/hooks 2>/dev/null && echo 'REMOVED hooks'\n\
                  (echo evil > .git/commondir) 2>/dev/null && echo 'WROTE commondir'\n\
                  (echo '[core] fsmonitor = evil' >> .git/config.worktree) 2>/dev/null && echo 'WROTE config.worktree'\n\
                  true";
    for kind in [BASH, OVERLAY] {
        let out = run(&mut client, "r1", kind, script).await;
        assert!(
            !out.stdout.contains("MOVED")
                && !out.stdout.contains("REPLACED")
                && !out.stdout.contains("REMOVED")
                && !out.stdout.contains("WROTE"),
            "{kind:?}:\n{}",
            out.stdout
        );
    }
    assert_eq!(std::fs::read(w.repo.join(".git/config")).unwrap(), config_before);
    assert!(!w.repo.join(".git-old").exists());

    // An overlay launch swaps the harness's working directory for a link to /: the next
    // launch is refused, not pointed at /.
    let out = run(
        &mut client,
        "r1",
        OVERLAY,
        &format!("cd {r} && mv demo demo-away && ln -s / demo && echo SWAPPED", r = w.repo.parent().unwrap().display()),
    )
    .await;
    assert!(!out.stdout.contains("SWAPPED"), "the working directory is pinned: it cannot be moved away");
    // The same swap made from outside (a sibling process, the person): the next launch
    // is refused rather than bound to what the link points at.
    std::fs::rename(&w.repo, w.repo.with_file_name("demo-away")).unwrap();
    std::os::unix::fs::symlink("/", &w.repo).unwrap();
    let refused = client
        .launch(pb::LaunchRequest {
            run_id: "r1".into(),
            kind: BASH as i32,
            argv: vec![b"/bin/true".to_vec()],
            timeout_seconds: 5,
            host: None,
            ..Default::default()
        })
        .await;
    let err = refused.expect_err("a launch into a swapped root must be refused");
    assert!(err.message().contains("changed since it was registered"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_at_a_code_execution_vector_refuses_the_launch() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let config = w.repo.join(".git/config");
    std::fs::rename(&config, w.repo.join("evil-config")).unwrap();
    std::os::unix::fs::symlink("../evil-config", &config).unwrap();
    let err = client
        .launch(pb::LaunchRequest {
            run_id: "r1".into(),
            kind: BASH as i32,
            argv: vec![b"/bin/true".to_vec()],
            timeout_seconds: 5,
            host: None,
            ..Default::default()
        })
        .await
        .expect_err("a launch with a linked .git/config must be refused");
    assert!(err.message().contains("is a symlink"), "{}", err.message());
}

/// Issue 16, item 1: bubblewrap places each bind by path. Our init checks, inside the
/// envelope and before the command, that every path bound inside the roots is reached
/// with no link and that the read-only ones are: otherwise the command never runs.
#[test]
fn our_init_refuses_to_run_when_a_bound_path_is_not_as_bound() {
    if !cc_tests::privileged("running bubblewrap") {
        return;
    }
    let init = cc_tests::bin("cc-init");
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/usr", tmp.path().join("link")).unwrap();
    let link = tmp.path().join("link");
    let run = |checks: &[&str]| {
        std::process::Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind"])
            .arg(tmp.path())
            .arg(tmp.path())
            .args(["--unshare-pid", "--as-pid-1", "--"])
            .arg(&init)
            .args(checks)
            .args(["--", "/bin/echo", "ran"])
            .output()
            .unwrap()
    };
    let tmp_path = tmp.path().to_str().unwrap();
    let ok = run(&["--check-ro", "/usr", "--check-rw", tmp_path]);
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "ran\n", "{}", String::from_utf8_lossy(&ok.stderr));
    for (checks, why) in [
        (vec!["--check-ro", tmp_path], "is not read-only"),
        (vec!["--check-rw", link.to_str().unwrap()], "is not where it was bound"),
        (vec!["--check-ro", "/nonexistent-cc"], "is not where it was bound"),
    ] {
        let out = run(&checks);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{checks:?}: {stderr}");
        assert!(out.stdout.is_empty() && stderr.contains(why) && stderr.contains("refusing to run"), "{stderr}");
    }
}
