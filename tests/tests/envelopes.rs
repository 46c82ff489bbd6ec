//! Native envelopes with real bubblewrap, driven through sandboxd's gRPC API
//! (issue 4; ATTACKS.md 1–20). Each attack is tried for real, and the host is checked
//! afterwards: files, processes, connections.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cc_proto::sandboxd::v1 as pb;
use cc_tests::fs::{make_checkout, snapshot};
use cc_tests::sandbox::{Client, Sandboxd, bytes, run};

#[path = "envelopes/interactive.rs"]
mod interactive;
#[path = "envelopes/links.rs"]
mod links;
#[path = "envelopes/sockets.rs"]
mod sockets;
#[path = "envelopes/warm.rs"]
mod warm;

const BASH: cc_proto::common::v1::EnvelopeKind = cc_proto::common::v1::EnvelopeKind::HarnessBash;
const OVERLAY: cc_proto::common::v1::EnvelopeKind = cc_proto::common::v1::EnvelopeKind::Overlay;

/// A conversation's layout next to the person's checkout and secrets.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    checkout: PathBuf,
    checkout_link: PathBuf,
    data: PathBuf,
    repo: PathBuf,
    agent_work: PathBuf,
    agent_config: PathBuf,
    secrets: PathBuf,
}

fn world() -> World {
    let tmp = tempfile::Builder::new().prefix("cc-env-").tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let checkout = make_checkout(&root.join("checkout"));
    let checkout_link = root.join("checkout-link");
    std::os::unix::fs::symlink(&checkout, &checkout_link).unwrap();
    let data = root.join("data");
    let conversation = data.join("conversations/c1");
    let repo = conversation.join("repos/demo");
    std::fs::create_dir_all(repo.parent().unwrap()).unwrap();
    let copied = std::process::Command::new("cp").arg("-a").arg(&checkout).arg(&repo).status().unwrap();
    assert!(copied.success());
    let agent_work = conversation.join("agents/a/work");
    let agent_config = conversation.join("agents/a/config");
    std::fs::create_dir_all(&agent_work).unwrap();
    std::fs::create_dir_all(&agent_config).unwrap();
    std::fs::write(agent_config.join("settings.json"), "{}").unwrap();
    std::fs::write(data.join("state.db"), "the supervisor's state").unwrap();
    let secrets = root.join("home");
    std::fs::create_dir_all(secrets.join(".ssh")).unwrap();
    std::fs::write(secrets.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::create_dir_all(secrets.join(".aws")).unwrap();
    std::fs::write(secrets.join(".aws/credentials"), "aws_secret_access_key=x").unwrap();
    // The run's files belong to the unprivileged user sandboxd launches as when it is
    // root (their owner); the person's checkout and secrets do not.
    if nix::unistd::geteuid().is_root() {
        let chown =
            std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(&conversation).status().unwrap();
        assert!(chown.success());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    World { _tmp: tmp, root, checkout, checkout_link, data, repo, agent_work, agent_config, secrets }
}

fn policy(w: &World) -> pb::RunPolicy {
    pb::RunPolicy {
        run_id: "r1".into(),
        agent_work: bytes(&w.agent_work),
        agent_config: bytes(&w.agent_config),
        repos: bytes(w.repo.parent().unwrap()),
        attachments: vec![],
        work_dir: bytes(&w.repo),
        write_deny: vec![bytes(&w.checkout_link), bytes(&w.checkout)],
        env: std::collections::HashMap::from([
            ("HTTP_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ("LD_PRELOAD".to_owned(), "/tmp/evil.so".to_owned()),
            ("OPENAI_API_KEY".to_owned(), "sk-live".to_owned()),
            ("GIT_CONFIG_COUNT".to_owned(), "1".to_owned()),
        ]),
        bridges: vec![],
        runner_socket_dir: vec![],
        shared_git: vec![],
        limits: Some(pb::EnvelopeLimits { cgroup_procs: vec![], tmp_size_bytes: 64 << 20, open_files_max: 1024 }),
    }
}

/// sandboxd with the native backend, and `w` registered as run "r1".
async fn native(w: &World, env: &[(&str, &str)]) -> Option<(Sandboxd, Client)> {
    if !cc_tests::privileged("building envelopes with bubblewrap as root") {
        return None;
    }
    let sbx = Sandboxd::start(&w.data, BTreeMap::from([("sandbox".to_owned(), "native".to_owned())]), env);
    let mut client = sbx.client().await;
    let probe = client.get_probe(pb::GetProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(
        probe.backend,
        cc_proto::common::v1::SandboxBackend::Native as i32,
        "no native backend: {}",
        probe.detail
    );
    cc_tests::assert_path_resolution(&probe.detail);
    client.register_run(cc_tests::sandbox::registration(policy(w))).await.expect("register the run");
    Some((sbx, client))
}

/// A unix socket of the run's own (a stand-in for its egress proxy or push gateway),
/// belonging to the run's user like its files.
/// A socket of the run's in a directory of its own inside the data directory (the
/// directory is what is bound).
fn run_socket(w: &World, name: &str) -> (PathBuf, std::os::unix::net::UnixListener) {
    use std::os::unix::fs::PermissionsExt;
    let dir = w.data.join("gateway/r1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join(name);
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&socket, Some(65534), Some(65534)).unwrap();
    }
    (socket, listener)
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_roots_fail_and_the_host_is_unchanged() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let checkout_before = snapshot(&w.checkout);
    let git_config_before = std::fs::read(w.repo.join(".git/config")).unwrap();
    let targets = [
        "/etc/cc-pwned".to_owned(),
        "/usr/bin/cc-pwned".to_owned(),
        "/root/cc-pwned".to_owned(),
        format!("{}/cc-pwned", w.checkout.display()),
        format!("{}//cc-pwned", w.checkout.display()),
        format!("{}/./src/../cc-pwned", w.checkout.display()),
        format!("{}/cc-pwned", w.checkout_link.display()),
        format!("{}/README.md", w.checkout.display()),
        format!("{}/../../../../checkout/cc-pwned", w.repo.display()),
        format!("{}/cc-pwned", w.data.display()),
        format!("{}/state.db", w.data.display()),
        format!("{}/.ssh/authorized_keys", w.secrets.display()),
        format!("{}/.git/hooks/pre-commit", w.repo.display()),
        format!("{}/.git/config", w.repo.display()),
        format!("{}/settings.json", w.agent_config.display()),
        format!("{}/.bashrc", w.agent_work.display()),
    ];
    for kind in [BASH, OVERLAY] {
        let mut script = String::new();
        for t in &targets {
            script.push_str(&format!("(echo pwned > '{t}') 2>/dev/null && echo \"WROTE {t}\"\n"));
        }
        // A symlink planted in the worktree, a dangling one, a hard link, a symlinked
        // ancestor, a rename of a protected directory, and git's own config writer.
        script.push_str(&format!(
            "ln -s {co}/README.md link-in && (echo pwned > link-in) 2>/dev/null && echo WROTE link-in\n\
             ln -s {co}/not-yet cc-dangling && (echo pwned > cc-dangling) 2>/dev/null && echo WROTE cc-dangling\n\
             ln {co}/README.md hard 2>/dev/null && echo WROTE hardlink\n\
             ln -s {co} anc && mkdir -p anc/new/dir 2>/dev/null && echo WROTE ancestor\n\
             mv .git/hooks .git/hooks-away 2>/dev/null && echo WROTE rename\n\
             git config core.hooksPath /tmp 2>/dev/null && echo WROTE git-config\n\
             rm -f link-in cc-dangling anc\n",
            co = q(&w.checkout)
        ));
        let out = run(&mut client, "r1", kind, &script).await;
        assert_eq!(out.envelope, "native");
        assert!(!out.stdout.contains("WROTE"), "{kind:?} escaped:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    }
    assert_eq!(snapshot(&w.checkout), checkout_before, "the registered checkout changed");
    assert_eq!(std::fs::read(w.repo.join(".git/config")).unwrap(), git_config_before);
    assert!(!w.repo.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read_to_string(w.data.join("state.db")).unwrap(), "the supervisor's state");
    assert!(!Path::new("/etc/cc-pwned").exists() && !Path::new("/root/cc-pwned").exists());
    assert!(!w.data.join("cc-pwned").exists());
    assert!(!w.secrets.join(".ssh/authorized_keys").exists());
    assert_eq!(std::fs::read_to_string(w.agent_config.join("settings.json")).unwrap(), "{}");

    // Inside the roots, work goes on, as the unprivileged owner of the run's files.
    let out =
        run(&mut client, "r1", BASH, "echo ok > new-file && git status --short new-file && cat new-file && id -u")
            .await;
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(w.repo.join("new-file")).unwrap(), "ok\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(w.repo.join("new-file")).unwrap().uid(),
        65534,
        "launched as the run's user, not root"
    );
    assert!(out.stdout.trim_end().ends_with("65534"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_the_supervisors_state_are_unreadable() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let script = format!(
        "for f in {s}/.ssh/id_ed25519 {s}/.aws/credentials {d}/state.db /etc/shadow /root/.ssh/id_rsa /proc/1/root{s}/.ssh/id_ed25519; do \
           cat \"$f\" 2>/dev/null | grep -q . && echo \"READ $f\"; done; \
         ls -A /etc/ssh | grep -q . && echo 'READ /etc/ssh'; \
         ls -A {d} 2>/dev/null | grep -qv '^conversations$' && echo 'SAW the data dir'; \
         ls {co} 2>/dev/null && echo 'SAW the checkout'; ls {s} 2>/dev/null && echo 'SAW the home'; echo checked",
        s = w.secrets.display(),
        d = w.data.display(),
        co = w.checkout.display()
    );
    for kind in [BASH, OVERLAY] {
        let out = run(&mut client, "r1", kind, &script).await;
        assert!(!out.stdout.contains("READ") && !out.stdout.contains("SAW"), "{kind:?}:\n{}", out.stdout);
        assert!(out.stdout.contains("checked"), "{kind:?}: the script did not run: {}", out.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_host_process_capability_or_namespace_escape() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let me = std::process::id();
    let script = format!(
        "echo pids=$(ls /proc | grep -c '^[0-9]')\n\
         kill -0 {me} 2>/dev/null && echo 'SAW host pid'\n\
         grep CapEff /proc/self/status\n\
         unshare -Ur true 2>/dev/null && echo 'ESCAPED unshare -Ur'\n\
         unshare -m true 2>/dev/null && echo 'ESCAPED unshare -m'\n\
         nsenter -t 1 -m true 2>/dev/null && echo 'ESCAPED nsenter'\n\
         mount -t tmpfs none /tmp 2>/dev/null && echo 'ESCAPED mount'\n\
         python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); print(\"io_uring\", l.syscall(425, 1, 0), ctypes.get_errno()); print(\"clone3\", l.syscall(435, 0, 0), ctypes.get_errno()); print(\"clone-newuser\", l.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno()); print(\"x32-unshare\", l.syscall(0x40000000 + 272, 0x10000000), ctypes.get_errno())'\n\
         python3 -c 'import socket\ntry:\n  socket.socket(40, socket.SOCK_STREAM); print(\"VSOCK opened\")\nexcept OSError as e: print(\"vsock errno\", e.errno)'\n\
         python3 -c 'import fcntl, termios, sys\ntry:\n  fcntl.ioctl(1, termios.TIOCSTI, b\"x\"); print(\"TIOCSTI worked\")\nexcept OSError as e: print(\"tiocsti errno\", e.errno)'\n"
    );
    for kind in [OVERLAY, BASH] {
        let out = run(&mut client, "r1", kind, &script).await;
        assert!(
            !out.stdout.contains("ESCAPED") && !out.stdout.contains("SAW"),
            "{kind:?}: {}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{kind:?}: {}", out.stdout);
    }
    let out = run(&mut client, "r1", BASH, &script).await;
    let pids: u32 = out.stdout.lines().find_map(|l| l.strip_prefix("pids=")).unwrap().trim().parse().unwrap();
    assert!(pids <= 6, "the envelope sees {pids} processes:\n{}", out.stdout);
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{}", out.stdout);
    assert!(out.stdout.contains("io_uring -1 1"), "io_uring_setup must fail with EPERM:\n{}", out.stdout);
    assert!(out.stdout.contains("clone3 -1 38"), "clone3 must fail with ENOSYS:\n{}", out.stdout);
    assert!(out.stdout.contains("clone-newuser -1 1"), "clone(CLONE_NEWUSER) must fail with EPERM:\n{}", out.stdout);
    assert!(out.stdout.contains("x32-unshare -1 1"), "x32 syscall numbers must fail with EPERM:\n{}", out.stdout);
    assert!(out.stdout.contains("vsock errno 1"), "{}", out.stdout);
    let io_uring_disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
    assert!(io_uring_disabled.trim() != "2", "the host disables io_uring itself: the EPERM would prove nothing");
    // The filter answers before the kernel looks at the descriptor (a pipe here).
    assert!(out.stdout.contains("tiocsti errno 1"), "{}", out.stdout);
    assert!(!out.stdout.contains("TIOCSTI worked"));
}

/// Issue 18: whatever the cgroup support, every envelope has no core dumps, the run's
/// open-file limit (which nothing inside can raise again), and a /tmp and /run of
/// the run's size rather than of the host's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_envelope_has_its_rlimits_and_a_sized_tmp() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let script = "ulimit -c; ulimit -Sn; ulimit -Hn; df -B1 --output=size /tmp /run | tail -2; \
                  (ulimit -n 4096 2>/dev/null && echo raised || echo kept); \
                  head -c 70000000 /dev/zero > /tmp/fill 2>/dev/null && echo filled || echo full";
    for kind in [BASH, OVERLAY] {
        let out = run(&mut client, "r1", kind, script).await;
        let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
        assert_eq!(lines, ["0", "1024", "1024", "67108864", "67108864", "kept", "full"], "{kind:?}: {}", out.stderr);
    }

    // sandboxd joins a launch to a cgroup.procs file under /sys/fs/cgroup, nothing else.
    for bad in ["/etc/cgroup.procs", "/sys/fs/cgroup/../../etc/passwd", "/sys/fs/cgroup/pids/tasks"] {
        let mut policy = policy(&w);
        policy.run_id = "r2".into();
        policy.limits = Some(pb::EnvelopeLimits { cgroup_procs: vec![bad.as_bytes().to_vec()], ..Default::default() });
        let refused = client.register_run(cc_tests::sandbox::registration(policy)).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{bad}");
        assert!(refused.message().contains("is not a cgroup.procs file"), "{}", refused.message());
    }
}

fn host_has_process(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == needle)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_a_launch_outlives_it() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    for (kind, base) in [(BASH, 1037), (OVERLAY, 1047)] {
        let script = format!(
            "(setsid sleep {a} &) ; (sleep {b} &) ; nohup sleep {c} >/dev/null 2>&1 & (trap '' TERM; exec sleep {d}) & echo started",
            a = base,
            b = base + 1,
            c = base + 2,
            d = base + 3
        );
        let out = run(&mut client, "r1", kind, &script).await;
        assert_eq!(out.code(), Some(0), "{}", out.stderr);
        assert!(out.stdout.contains("started"));
        for n in base..base + 4 {
            assert!(!host_has_process(&format!("sleep {n}")), "{kind:?}: sleep {n} outlived its launch");
        }
    }
}

/// The pid of the envelope's init whose command line holds `needle`.
fn init_running(needle: &str) -> Option<i32> {
    std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
        let cmdline = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?).replace('\0', " ");
        (cmdline.starts_with("/run/cc/init ") && cmdline.contains(" -- ") && cmdline.contains(needle))
            .then(|| e.file_name().to_str()?.parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_from_outside_reaches_the_command_through_our_init() {
    // The kernel drops a signal sent to PID 1 of a pid namespace unless PID 1 handles
    // it or has it blocked: our init must take SIGTERM and hand it on.
    use tokio_stream::StreamExt;
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let script = "trap 'echo got-term; exit 7' TERM; sleep 1051 & echo ready; wait";
    let request = pb::LaunchRequest {
        run_id: "r1".into(),
        kind: BASH as i32,
        argv: vec![b"/bin/sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()],
        timeout_seconds: 30,
        host: None,
        ..Default::default()
    };
    let mut stream = client.launch(request).await.unwrap().into_inner();
    let (mut stdout, mut exit, mut signalled) = (String::new(), None, false);
    while let Some(event) = stream.next().await {
        match event.unwrap().event {
            Some(pb::launch_response::Event::Stdout(b)) => stdout.push_str(&String::from_utf8_lossy(&b)),
            Some(pb::launch_response::Event::Exit(e)) => exit = Some(e),
            _ => {}
        }
        if stdout.contains("ready") && !signalled {
            let init = init_running("got-term").expect("the envelope's init is running");
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), nix::sys::signal::Signal::SIGTERM).unwrap();
            signalled = true;
        }
    }
    let exit = exit.expect("an exit event");
    assert_eq!(exit.code, Some(7), "the command's trap did not run: {stdout:?} {exit:?}");
    assert!(stdout.contains("got-term"));
    assert!(!host_has_process("sleep 1051"), "the background job outlived the envelope");
    // And the command starts as a fresh process would: nothing blocked, SIGPIPE not
    // ignored (`yes | head` must end `yes`).
    let out = run(&mut client, "r1", BASH, "grep -E '^Sig(Blk|Ign)' /proc/self/status").await;
    let field = |name: &str| {
        let line = out.stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{out:?}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "{}", out.stdout);
    assert_eq!(
        field("SigIgn:") & (1 << (nix::sys::signal::Signal::SIGPIPE as u32 - 1)),
        0,
        "SIGPIPE is ignored: {}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_is_sanitized_whatever_is_passed() {
    let w = world();
    let env = [
        ("GITHUB_TOKEN", "ghp_host"),
        ("NODE_OPTIONS", "--require=/x.js"),
        ("LD_LIBRARY_PATH", "/x"),
        ("BASH_ENV", "/x"),
        // A PATH with a directory under someone's home (issue 16, item 5).
        ("PATH", "/home/me/.cargo/bin:/home/me/bin:/usr/bin:/bin"),
    ];
    let Some((_sbx, mut client)) = native(&w, &env).await else { return };
    let out = run(&mut client, "r1", OVERLAY, "env").await;
    let path = out.stdout.lines().find_map(|l| l.strip_prefix("PATH=")).unwrap_or_default();
    assert_eq!(path, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "{}", out.stdout);
    for bad in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "NODE_OPTIONS",
        "BASH_ENV",
        "GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "GIT_CONFIG_COUNT",
        "ghp_",
        "sk-live",
    ] {
        assert!(!out.stdout.contains(bad), "{bad} reached the envelope:\n{}", out.stdout);
    }
    assert!(out.stdout.lines().any(|l| l == format!("HOME={}", w.agent_work.display())), "{}", out.stdout);
    assert!(out.stdout.contains("HTTP_PROXY=http://127.0.0.1:9"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_nothing_connects() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo CONNECTED dev-tcp\n\
         curl -s --max-time 3 http://127.0.0.1:{port}/ >/dev/null && echo CONNECTED curl\n\
         curl -s --max-time 3 http://example.com/ >/dev/null && echo CONNECTED dns\n\
         getent hosts example.com >/dev/null && echo CONNECTED resolver; true"
    );
    for kind in [BASH, OVERLAY] {
        let out = run(&mut client, "r1", kind, &script).await;
        assert!(!out.stdout.contains("CONNECTED"), "{kind:?}: {}", out.stdout);
    }
    assert!(listener.accept().is_err(), "a connection reached the host's loopback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_write_becomes_a_violation_event_with_its_path() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    let out =
        run(&mut client, "r1", BASH, "touch /etc/cc-violation; touch /etc/cc-violation; touch /usr/cc-other; true")
            .await;
    let paths: Vec<&str> = out.violations.iter().map(|v| v.attempted.as_str()).collect();
    assert_eq!(paths, ["/etc/cc-violation", "/usr/cc-other"], "deduplicated, in order: {:?}", out.violations);
    assert!(out.violations.iter().all(|v| v.blocked_by == "read-only file system"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwrapped_launches_say_so_and_are_still_sanitized() {
    let w = world();
    let sbx = Sandboxd::start(
        &w.data,
        BTreeMap::from([("sandbox".to_owned(), "off".to_owned())]),
        &[("GITHUB_TOKEN", "ghp_host")],
    );
    let mut client = sbx.client().await;
    let probe = client.get_probe(pb::GetProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(
        (probe.backend, probe.detail.split_once("; ").map(|(why, _)| why)),
        (cc_proto::common::v1::SandboxBackend::None as i32, Some("--sandbox off"))
    );
    cc_tests::assert_path_resolution(&probe.detail);
    client.register_run(cc_tests::sandbox::registration(policy(&w))).await.unwrap();
    let out = run(&mut client, "r1", BASH, "env; pwd").await;
    assert_eq!(out.envelope, "unwrapped");
    assert!(out.violations.is_empty());
    assert!(!out.stdout.contains("ghp_") && !out.stdout.contains("LD_PRELOAD"), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l == w.repo.display().to_string()), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_unregister_kills() {
    let w = world();
    let sbx = Sandboxd::start(&w.data, BTreeMap::from([("sandbox".to_owned(), "off".to_owned())]), &[]);
    let mut client = sbx.client().await;
    let mut relative = policy(&w);
    relative.work_dir = b"relative/dir".to_vec();
    let mut linked = policy(&w);
    linked.work_dir = bytes(&w.root.join("checkout-link"));
    let mut bad_id = policy(&w);
    bad_id.run_id = "../r".into();
    for (p, needle) in [(relative, "absolute"), (linked, "goes through a symlink"), (bad_id, "run id")] {
        let err = client.register_run(cc_tests::sandbox::registration(p)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains(needle), "{}", err.message());
    }
    let launch = |run: &str, kind: i32, argv: Vec<Vec<u8>>| pb::LaunchRequest {
        run_id: run.into(),
        kind,
        argv,
        timeout_seconds: 0,
        host: None,
        ..Default::default()
    };
    let err = client.launch(launch("nope", BASH as i32, vec![b"true".to_vec()])).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    client.register_run(cc_tests::sandbox::registration(policy(&w))).await.unwrap();
    for (kind, argv) in [
        (99, vec![b"true".to_vec()]),
        (0, vec![b"true".to_vec()]),
        (BASH as i32, vec![]),
        (BASH as i32, vec![b"a\0b".to_vec()]),
        // The runner kind is launched interactively only: its handshake is on its stdio.
        (cc_proto::common::v1::EnvelopeKind::Runner as i32, vec![]),
    ] {
        let err = client.launch(launch("r1", kind, argv)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }

    // A run's launches die with its unregistration.
    let mut stream =
        client.launch(launch("r1", BASH as i32, vec![b"sleep".to_vec(), b"1041".to_vec()])).await.unwrap().into_inner();
    use tokio_stream::StreamExt;
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first.event, Some(pb::launch_response::Event::Envelope(_))));
    let killed =
        client.unregister_run(pb::UnregisterRunRequest { run_id: "r1".into() }).await.unwrap().into_inner().killed;
    assert_eq!(killed, 1);
    let mut exit = None;
    while let Some(event) = stream.next().await {
        if let Some(pb::launch_response::Event::Exit(e)) = event.unwrap().event {
            exit = Some(e);
        }
    }
    assert_eq!(exit.unwrap().signal, Some(9));
    assert!(!host_has_process("sleep 1041"));
}

#[test]
fn ccctl_shows_the_probe_and_an_envelope_that_runs_as_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = make_checkout(&tmp.path().join("checkout"));
    let sup = cc_tests::Supervisor::start_on(&tmp.path().join("data"), cc_tests::Options::default());
    assert!(sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "demo"]).status.success());
    let out = sup.ccctl(&["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let probe = sup.ccctl_json(&["sandbox", "probe"]);
    if std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        assert_eq!(probe["backend"], "native", "{probe}");
    }
    let explained = sup.ccctl_json(&[
        "sandbox",
        "explain",
        "--conversation",
        &id,
        "--",
        "sh",
        "-c",
        "pwd; git status --porcelain | wc -l",
    ]);
    let argv: Vec<String> =
        explained["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    if explained["backend"] != "native" {
        return;
    }
    for flag in ["--unshare-net", "--unshare-user", "--clearenv", "--as-pid-1"] {
        assert!(argv.contains(&flag.to_owned()), "{flag}: {argv:?}");
    }
    let copy = std::fs::canonicalize(tmp.path().join(format!("data/conversations/{id}/repos/demo"))).unwrap();
    assert!(argv.windows(3).any(|w| w[0] == "--bind" && w[1] == copy.to_str().unwrap()), "{argv:?}");
    assert!(!argv.iter().any(|a| a == checkout.to_str().unwrap()), "the checkout is not even visible");
    // What is printed is what runs.
    let ran = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let stdout = String::from_utf8(ran.stdout).unwrap();
    assert!(stdout.starts_with(copy.to_str().unwrap()), "{stdout}");

    // A live run's envelope is its registered policy: the same roots, plus the write-deny
    // set its launches get, and it runs as printed too.
    let run = String::from_utf8(sup.ccctl(&["run", "start", "--conversation", &id]).stdout).unwrap().trim().to_owned();
    let explained = sup.ccctl_json(&["sandbox", "explain", "--run", &run, "--", "sh", "-c", "pwd"]);
    let argv: Vec<String> =
        explained["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    assert!(argv.windows(3).any(|w| w[0] == "--bind" && w[1] == copy.to_str().unwrap()), "{argv:?}");
    let config = format!("{}/.git/config", copy.display());
    assert!(argv.windows(3).any(|w| w[0] == "--ro-bind" && w[1] == config), "{argv:?}");
    let ran = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    assert!(String::from_utf8_lossy(&ran.stdout).starts_with(copy.to_str().unwrap()), "{ran:?}");
    sup.ccctl(&["run", "stop", &run]);

    // Bad requests: one line each.
    for (args, needle) in [
        (vec!["sandbox", "explain", "--conversation", "c-nope"], "no conversation named"),
        (vec!["sandbox", "explain", "--run", &run], "is stopped"),
        (vec!["sandbox", "explain", "--run", "r-nope"], "no run"),
        (vec!["sandbox", "explain", "--run", &run, "--conversation", &id], "cannot be used with"),
        (vec!["sandbox", "explain", "--conversation", &id, "--agent", "../x"], "may not start with"),
    ] {
        let out = sup.ccctl(&args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success() && err.contains(needle) && err.lines().count() == 1, "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_an_unprivileged_user_the_envelope_holds_too() {
    if !cc_tests::privileged("switching to an unprivileged uid") {
        return;
    }
    const NOBODY: u32 = 65534;
    let w = world();
    // The run's files belong to the unprivileged user; the person's checkout does not.
    let chown = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(&w.data).status().unwrap();
    assert!(chown.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&w.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sbx =
        Sandboxd::start_as(Some(NOBODY), &w.data, BTreeMap::from([("sandbox".to_owned(), "native".to_owned())]), &[]);
    let mut client = sbx.client().await;
    let probe = client.get_probe(pb::GetProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(
        probe.backend,
        cc_proto::common::v1::SandboxBackend::Native as i32,
        "unprivileged user namespaces: {}",
        probe.detail
    );
    client.register_run(cc_tests::sandbox::registration(policy(&w))).await.unwrap();
    let before = snapshot(&w.checkout);
    let script = format!(
        "id -u; grep CapEff /proc/self/status\n\
         for t in /etc/cc-pwned {co}/cc-pwned {co}/README.md {d}/state.db .git/hooks/pre-commit; do (echo x > \"$t\") 2>/dev/null && echo \"WROTE $t\"; done\n\
         unshare -Ur true 2>/dev/null && echo ESCAPED\n\
         echo ok > inside && cat inside",
        co = w.checkout.display(),
        d = w.data.display()
    );
    let out = run(&mut client, "r1", BASH, &script).await;
    assert!(!out.stdout.contains("WROTE") && !out.stdout.contains("ESCAPED"), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("CapEff:\t0000000000000000"));
    assert!(out.stdout.trim_end().ends_with("ok"), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(snapshot(&w.checkout), before);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(w.repo.join("inside")).unwrap().uid(), NOBODY, "written as the unprivileged user");
    // The next launch takes the envelope made, as the same user, when this one ended.
    let again = run(&mut client, "r1", BASH, &format!("tr '\\0' ' ' < /proc/1/cmdline; echo; {script}")).await;
    let init_line = again.stdout.lines().next().unwrap_or_default();
    assert!(init_line.starts_with("/run/cc/init ") && init_line.contains("--command-stdin"), "{}", again.stdout);
    assert!(!again.stdout.contains("WROTE") && !again.stdout.contains("ESCAPED"), "{}", again.stdout);
    assert!(again.stdout.contains("CapEff:\t0000000000000000"));
    assert_eq!(snapshot(&w.checkout), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_very_long_command_line_reaches_the_command_whole() {
    let w = world();
    let Some((_sbx, mut client)) = native(&w, &[]).await else { return };
    // 4,000 arguments, 400 KB, reach the command; bubblewrap's own options (with the
    // environment's values) travel on its stdin, not on a command line others can read.
    let mut argv =
        vec![b"/bin/sh".to_vec(), b"-c".to_vec(), b"echo $#; echo \"${4000}\"; cat".to_vec(), b"sh".to_vec()];
    argv.extend((1..=4000).map(|i| format!("{i:0100}").into_bytes()));
    let request = pb::LaunchRequest {
        run_id: "r1".into(),
        kind: BASH as i32,
        argv,
        timeout_seconds: 30,
        host: None,
        ..Default::default()
    };
    let mut stream = client.launch(request).await.unwrap().into_inner();
    use tokio_stream::StreamExt;
    let mut stdout = String::new();
    let mut code = None;
    while let Some(event) = stream.next().await {
        match event.unwrap().event {
            Some(pb::launch_response::Event::Stdout(b)) => stdout.push_str(&String::from_utf8_lossy(&b)),
            Some(pb::launch_response::Event::Exit(e)) => code = e.code,
            _ => {}
        }
    }
    assert_eq!(code, Some(0));
    // `cat` found its stdin at its end: the arguments were not left for the command.
    assert_eq!(stdout, format!("4000\n{:0100}\n", 4000));
}
