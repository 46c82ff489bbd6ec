//! Envelopes made ahead of their launch (sandboxd/src/warm.rs): each launch still gets
//! an envelope of its own, and one made before something changed is never used.

use super::*;
use cc_tests::sandbox::{Outcome, eventually, gone, run_argv};

/// Our init's command line, as the launch's own `/proc/1/cmdline` shows it.
const INIT_LINE: &str = "tr '\\0' ' ' < /proc/1/cmdline; echo";

fn made_ahead(out: &Outcome) -> bool {
    out.stdout.lines().next().is_some_and(|init| init.starts_with("/run/cc/init") && init.contains("--command-stdin"))
}

/// The pid of the one envelope waiting for the run's next harness launch, once made.
fn next_envelope(sbx: &Sandboxd) -> i32 {
    eventually("the next envelope is made", || sbx.waiting_envelopes().len() == 1);
    sbx.waiting_envelopes()[0]
}

/// sandboxd with run "r1" registered, after one harness launch: the pid of the envelope
/// made for the next.
async fn native_with_one_waiting(w: &World) -> Option<(Sandboxd, Client, i32)> {
    let (sbx, mut client) = native(w, &[]).await?;
    assert_eq!(run(&mut client, "r1", BASH, "true").await.code(), Some(0));
    let waiting = next_envelope(&sbx);
    Some((sbx, client, waiting))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_launch_gets_an_envelope_of_its_own_even_when_made_ahead() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let first =
        run(&mut client, "r1", BASH, &format!("{INIT_LINE}; echo x > /tmp/left-behind; (setsid sleep 1061 &)")).await;
    assert_eq!(first.code(), Some(0), "{}", first.stderr);
    assert!(!made_ahead(&first), "the run's first launch has nothing made for it: {}", first.stdout);
    assert!(!host_has_process("sleep 1061"), "the first launch's job outlived it");

    // The second takes the envelope made when the first ended: a fresh /tmp and pid
    // namespace, the sanitized environment, its argv exactly, and stdin at its end.
    let argv = [
        "/bin/sh",
        "-c",
        &format!(
            "{INIT_LINE}; test -e /tmp/left-behind && echo LEFT-BEHIND; echo /proc/[0-9]*; env; cat; printf '[%s]' \"$@\""
        ),
        "sh",
        "",
        "a b",
        "--",
        "*",
    ];
    let second = run_argv(&mut client, "r1", BASH, argv.iter().map(|a| a.as_bytes().to_vec()).collect()).await;
    assert_eq!(second.code(), Some(0), "{}", second.stderr);
    assert!(made_ahead(&second), "the second launch did not use the envelope made for it: {}", second.stdout);
    let lines: Vec<&str> = second.stdout.lines().collect();
    assert_eq!(lines[1], "/proc/1 /proc/2", "only our init and sh are visible, /tmp is empty: {lines:?}");
    assert!(second.stdout.ends_with("[][a b][--][*]"), "{}", second.stdout);
    for leaked in ["LD_PRELOAD", "OPENAI_API_KEY", "GIT_CONFIG_COUNT"] {
        assert!(!second.stdout.contains(leaked), "{leaked} reached a warm envelope:\n{}", second.stdout);
    }

    // A command far longer than a pipe holds reaches it whole.
    let mut long: Vec<Vec<u8>> = vec![b"/bin/sh".to_vec(), b"-c".to_vec(), b"echo $# ${3000}".to_vec(), b"sh".to_vec()];
    long.extend((1..=3000).map(|n| format!("{n:0100}").into_bytes()));
    let out = run_argv(&mut client, "r1", BASH, long).await;
    assert_eq!(out.stdout, format!("3000 {:0100}\n", 3000), "{}", out.stderr);

    // Its writes are refused and reported as in any envelope, and nothing outlives it.
    let third =
        run(&mut client, "r1", BASH, &format!("{INIT_LINE}; touch /usr/cc-warm; (setsid sleep 1062 &); true")).await;
    assert!(made_ahead(&third), "{}", third.stdout);
    assert_eq!(third.violations.iter().map(|v| v.attempted.as_str()).collect::<Vec<_>>(), ["/usr/cc-warm"]);
    assert!(!Path::new("/usr/cc-warm").exists());
    assert!(!host_has_process("sleep 1062"), "a job of a warm envelope outlived it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_made_before_a_new_nested_repository_is_not_used() {
    let w = world();
    let Some((_sbx, mut client, stale)) = native_with_one_waiting(&w).await else { return };
    // The agent's own launch (Claude Code, overlay) makes a nested repository inside the
    // harness's working directory, whose hooks the waiting envelope does not protect.
    let made = run(&mut client, "r1", OVERLAY, &format!("cd {} && git init -q sub && echo made", q(&w.repo))).await;
    assert!(made.stdout.contains("made"), "{made:?}");
    let config_before = std::fs::read(w.repo.join("sub/.git/config")).unwrap();
    let out = run(
        &mut client,
        "r1",
        BASH,
        &format!(
            "{INIT_LINE}; echo 'touch /tmp/pwned' > sub/.git/hooks/pre-commit && echo 'WROTE hook'; \
             echo '[core] fsmonitor = evil' >> sub/.git/config && echo 'WROTE config'; true"
        ),
    )
    .await;
    assert!(!made_ahead(&out), "the envelope made before the repository existed was used: {}", out.stdout);
    assert!(!out.stdout.lines().skip(1).any(|l| l.contains("WROTE")), "{}", out.stdout);
    assert!(!w.repo.join("sub/.git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read(w.repo.join("sub/.git/config")).unwrap(), config_before);
    eventually("the stale envelope is killed", || gone(stale));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_file_replaced_since_is_seen_as_it_is_now() {
    let w = world();
    let Some((_sbx, mut client, _)) = native_with_one_waiting(&w).await else { return };
    // `git config` as the person runs it: a new file renamed over the old one. The
    // waiting envelope holds the old one, bound read-only.
    let config = w.repo.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[cc]\n\tprobe = fresh\n");
    let new = w.repo.join(".git/config.lock");
    std::fs::write(&new, text).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&new, Some(65534), Some(65534)).unwrap();
    }
    std::fs::rename(&new, &config).unwrap();
    // Renamed over, the old file's read-only mount is detached in the waiting envelope,
    // where the new one would be writable: it must not be used.
    let out = run(
        &mut client,
        "r1",
        BASH,
        &format!("{INIT_LINE}; git config cc.probe; echo '[x]' >> .git/config && echo WROTE"),
    )
    .await;
    assert!(!made_ahead(&out), "{}", out.stdout);
    assert!(out.stdout.contains("fresh\n"), "the launch saw an old .git/config: {out:?}");
    assert!(!out.stdout.lines().skip(1).any(|l| l.contains("WROTE")), "{}", out.stdout);
    assert!(!std::fs::read_to_string(&config).unwrap().contains("[x]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_directory_replaced_from_outside_is_not_trusted() {
    let w = world();
    let Some((_sbx, mut client, _)) = native_with_one_waiting(&w).await else { return };
    // From outside, .git is swapped for a new directory holding the same files: each
    // file keeps its inode (and its read-only mount, which follows it), but .git itself
    // is no longer the directory pinned as a mount point in the waiting envelope.
    let git = w.repo.join(".git");
    let old = w.repo.join(".git.old");
    std::fs::rename(&git, &old).unwrap();
    std::fs::create_dir(&git).unwrap();
    for entry in std::fs::read_dir(&old).unwrap() {
        let entry = entry.unwrap();
        std::fs::rename(entry.path(), git.join(entry.file_name())).unwrap();
    }
    std::fs::remove_dir(&old).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&git, Some(65534), Some(65534)).unwrap();
    }
    let config_before = std::fs::read(git.join("config")).unwrap();
    let script = format!(
        "{INIT_LINE}; mv .git .git-away 2>/dev/null && mkdir .git && echo '[core] fsmonitor = evil' > .git/config && echo REPLACED; true"
    );
    let out = run(&mut client, "r1", BASH, &script).await;
    assert!(!made_ahead(&out), "{}", out.stdout);
    assert!(!out.stdout.lines().skip(1).any(|l| l.contains("REPLACED")), "{}", out.stdout);
    assert_eq!(std::fs::read(git.join("config")).unwrap(), config_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_made_ahead_is_the_one_a_cold_launch_gets() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    // Everything a workload can see of its confinement, ids and sizes aside.
    let probe = "sed -E 's/^[0-9]+ [0-9]+ [0-9]+:[0-9]+ //; s/ (shared|master|propagate_from):[0-9]+//g' /proc/self/mountinfo; \
                 grep -E '^(Uid|Gid|Groups|NoNewPrivs|Seccomp|Seccomp_filters|Cap[A-Za-z]+|Sig(Blk|Ign)):' /proc/self/status; \
                 ls -l /proc/self/fd | sed 1d | awk '{print $9, $10, $11}' | sed -E 's/:\\[[0-9]+\\]//; s|/proc/[0-9]+/|/proc/N/|'; env | sort; pwd; id; ulimit -a; umask; hostname; \
                 echo /proc/[0-9]*";
    let cold = run(&mut client, "r1", BASH, probe).await;
    let warm = run(&mut client, "r1", BASH, &format!("{INIT_LINE}; {probe}")).await;
    assert_eq!(cold.code(), Some(0), "{}", cold.stderr);
    assert!(made_ahead(&warm), "{}", warm.stdout);
    let warm_probe = warm.stdout.split_once('\n').unwrap().1;
    assert!(cold.stdout.contains("Seccomp:\t2") && cold.stdout.contains("0 -> /dev/null"), "{}", cold.stdout);
    // Only its stdio (and the listing's own descriptor) reach the workload, whatever
    // sandboxd inherited: this test's harness passes its own on.
    let fds: Vec<&str> = cold.stdout.lines().filter(|l| l.contains(" -> ")).collect();
    assert_eq!(fds.len(), 4, "{fds:?}");
    assert_eq!(cold.stdout, warm_probe, "a warm envelope differs from a cold one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiting_envelope_and_concurrent_launches_fall_back_to_envelopes_of_their_own() {
    let w = world();
    let Some((sbx, mut client, waiting)) = native_with_one_waiting(&w).await else { return };
    // Killed from outside while it waits: the next launch notices and makes its own.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(waiting), nix::sys::signal::Signal::SIGKILL).unwrap();
    eventually("the killed envelope is gone", || gone(waiting));
    let out = run(&mut client, "r1", BASH, &format!("{INIT_LINE}; echo after")).await;
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(!made_ahead(&out) && out.stdout.ends_with("after\n"), "{}", out.stdout);
    next_envelope(&sbx);

    // Four at once: one takes the waiting envelope, the others make their own (or take
    // one made when another of them ended). No two share one: each has its pid namespace.
    let launches: Vec<_> = (0..4)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let out =
                    run(&mut client, "r1", BASH, &format!("{INIT_LINE}; readlink /proc/self/ns/pid; echo launch-{i}"))
                        .await;
                (i, out)
            })
        })
        .collect();
    let (mut warm, mut namespaces) = (0, std::collections::BTreeSet::new());
    for launch in launches {
        let (i, out) = launch.await.unwrap();
        assert_eq!(out.code(), Some(0), "{}", out.stderr);
        assert!(out.stdout.ends_with(&format!("launch-{i}\n")), "{}", out.stdout);
        warm += usize::from(made_ahead(&out));
        namespaces.insert(out.stdout.lines().nth(1).unwrap_or_default().to_owned());
    }
    assert!(warm >= 1, "the waiting envelope served none of them");
    assert_eq!(namespaces.len(), 4, "two launches shared an envelope: {namespaces:?}");
    // Each ending made the next one, and each replaced (and killed) the one before.
    eventually("one envelope waits", || sbx.waiting_envelopes().len() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_again_or_unregistering_kills_the_envelope_made_ahead() {
    let w = world();
    let Some((sbx, mut client, first)) = native_with_one_waiting(&w).await else { return };
    client.register_run(cc_tests::sandbox::registration(policy(&w))).await.unwrap();
    eventually("the envelope made for the replaced policy is killed", || gone(first));

    let out = run(&mut client, "r1", BASH, &format!("{INIT_LINE}; true")).await;
    assert!(!made_ahead(&out), "a launch under the new policy used an envelope of the old: {}", out.stdout);
    let second = next_envelope(&sbx);
    let killed =
        client.unregister_run(pb::UnregisterRunRequest { run_id: "r1".into() }).await.unwrap().into_inner().killed;
    assert_eq!(killed, 0, "no launch was running: a waiting envelope is not counted");
    eventually("the run's waiting envelope dies with it", || gone(second));
    assert!(sbx.waiting_envelopes().is_empty());
}
