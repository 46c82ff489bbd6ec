//! The microVM backend's groundwork: the probe says what this host has of what a
//! microVM needs, a microVM terminal is refused with the probe's reason (never a quiet
//! native), and the guest image `deploy/microvm/build-image` makes from Debian's
//! packages boots under QEMU's microvm machine. CI builds the image into
//! `target/debug/microvm` and has QEMU, so there `CC_REQUIRE_PRIVILEGED=1` makes a
//! missing image or QEMU fail rather than skip.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cc_tests::{Options, Supervisor, bin};

fn required() -> bool {
    std::env::var("CC_REQUIRE_PRIVILEGED").as_deref() == Ok("1")
}

fn image_dir() -> PathBuf {
    bin("cc-sandboxd").with_file_name("microvm")
}

#[test]
fn the_probe_says_what_it_found() {
    let sup = Supervisor::start(Options::default());
    let line = sup.stdout_lines.iter().find(|l| l.starts_with("cc-supervisor: microvm=")).cloned().unwrap_or_default();
    assert!(line.starts_with("cc-supervisor: microvm="), "{:?}", sup.stdout_lines);
    if required() {
        assert!(line.starts_with("cc-supervisor: microvm=available (qemu "), "CI has every part: {line}");
        assert!(line.contains(", image ") && line.contains("vhost-user-vsock") && line.contains("virtiofsd"), "{line}");
    }
    // sandboxd's own probe, through the API, says the same.
    let probe = sup.ccctl(&["sandbox", "probe"]);
    let shown = String::from_utf8_lossy(&probe.stdout);
    assert!(shown.lines().any(|l| l == line.trim_start_matches("cc-supervisor: ")), "{shown}");
}

/// Where the backend is unavailable, asking for it is an error that says why, and
/// nothing is started instead.
#[test]
fn an_unavailable_microvm_is_refused_with_the_probes_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let config = format!("[sandbox]\nmicrovm_image = \"{}\"\n", tmp.path().join("none").display());
    let sup = Supervisor::start(Options { config: Some(config), ..Default::default() });
    let out = sup.ccctl(&["terminal", "new", "--backend", "microvm", "--conversation", "c0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.starts_with("ccctl: microvm terminals are not available on this host: unavailable (no guest image in"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(sup.ccctl_json(&["terminal", "list"]).as_array().unwrap().is_empty(), "nothing was started instead");
    let out = sup.ccctl(&["rig", "start", "--conversation", "c0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("ccctl: microVM rigs are not available on this host: unavailable (no guest image"),
        "{err}"
    );
}

/// The host's TSC rate in kHz, which the guest is told: without it, a guest under
/// emulation calibrates its clock against an emulated timer and hangs in 6 boots of 10.
fn tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info.lines().find(|l| l.starts_with("cpu MHz"))?.split(':').nth(1)?.trim().parse().ok()?;
    Some((mhz * 1000.0) as u64)
}

#[test]
fn the_guest_image_boots_under_qemu_microvm() {
    let dir = image_dir();
    let qemu = Command::new("qemu-system-x86_64").arg("--version").output().is_ok_and(|o| o.status.success());
    if !dir.join("vmlinux").is_file() || !qemu {
        assert!(!required(), "CI builds the guest image into {} and has QEMU", dir.display());
        eprintln!("skipping: no guest image in {} or no QEMU", dir.display());
        return;
    }
    let mut append = "console=ttyS0 reboot=t panic=-1 quiet".to_owned();
    if let Some(khz) = tsc_khz() {
        append.push_str(&format!(" tsc_early_khz={khz}"));
    }
    let started = Instant::now();
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on", "-accel", "tcg", "-cpu", "max"])
        .args(["-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio"])
        .args(["-no-reboot", "-kernel"])
        .arg(dir.join("vmlinux"))
        .arg("-initrd")
        .arg(dir.join("initramfs.gz"))
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("qemu starts");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = qemu.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    // The script init says READY; the agent, when the image has it, says it serves.
    let ready = loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.trim() == "READY" || line.starts_with("cc-vm-agent: serving on vsock port") => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    let _ = qemu.kill();
    let _ = qemu.wait();
    assert!(ready, "the guest did not say READY within 60 s; its console:\n{}", seen.join("\n"));
    // Every module loaded: a failed insmod prints on the console.
    assert!(!seen.iter().any(|l| l.contains("insmod:")), "{}", seen.join("\n"));
    eprintln!("the guest was ready after {:?}", started.elapsed());
}

mod launcher {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use cc_proto::vmagent::v1 as pb;
    use cc_proto::vmagent::v1::exec_request::Input;
    use cc_proto::vmagent::v1::exec_response::Event;
    use cc_sandboxd::microvm::{Layout, Programs, Share, Vm};
    use tokio_stream::StreamExt;

    use super::{image_dir, required, tsc_khz};

    /// What a command in the guest printed, and how it exited.
    struct Ran {
        stdout: String,
        stderr: String,
        code: Option<i32>,
    }

    async fn run(vm: &Vm, script: &str) -> Ran {
        let start = pb::ExecStart {
            argv: vec![b"/bin/sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()],
            env: [("PATH".to_owned(), "/bin".to_owned())].into(),
            ..Default::default()
        };
        let input = tokio_stream::iter([pb::ExecRequest { input: Some(Input::Start(start)) }]);
        let mut events = vm.exec(input).await.expect("exec");
        let mut ran = Ran { stdout: String::new(), stderr: String::new(), code: None };
        let reading = async {
            while let Some(Ok(pb::ExecResponse { event: Some(event) })) = events.next().await {
                match event {
                    Event::Stdout(b) => ran.stdout.push_str(&String::from_utf8_lossy(&b)),
                    Event::Stderr(b) => ran.stderr.push_str(&String::from_utf8_lossy(&b)),
                    Event::Exit(e) => {
                        ran.code = e.code;
                        break;
                    }
                    Event::Started(_) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), reading).await.expect("the command ends");
        ran
    }

    fn program(name: &str, known: &[&str]) -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()));
        on_path.or_else(|| known.iter().map(PathBuf::from).find(|p| p.is_file()))
    }

    fn programs() -> Option<Programs> {
        Some(Programs {
            qemu: program("qemu-system-x86_64", &[])?,
            vhost_device_vsock: program("vhost-device-vsock", &[])?,
            virtiofsd: program("virtiofsd", &["/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd"])?,
            unshare: program("unshare", &[])?,
            user: None,
        })
    }

    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
    }

    /// A VM with the conversation's work shared in: commands run and exit with their
    /// codes, a file written in the guest's share appears on the host, nothing else of
    /// the host is visible, there is no network at all, and killing QEMU ends it with
    /// its daemons gone once it is stopped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_microvm_runs_commands_and_sees_only_its_share() {
        let image = image_dir();
        let has_agent = image.join("agent").is_file();
        let (Some(programs), true) = (programs(), has_agent) else {
            assert!(!required(), "CI builds the image with the agent into {} and has its programs", image.display());
            eprintln!("skipping: no guest image with an agent, or no qemu/vhost-device-vsock/virtiofsd");
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("from-host.txt"), "hello guest\n").unwrap();
        let secret = tmp.path().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("key"), "s3cret\n").unwrap();
        let kvm = matches!(cc_host::microvm::gather(&image, false).accel, cc_host::microvm::Accel::Kvm);
        let layout = Layout {
            image: image.clone(),
            dir: tmp.path().join("vm"),
            memory_mib: 256,
            cpus: 1,
            kvm,
            tsc_khz: tsc_khz(),
            shares: vec![Share {
                tag: "work".into(),
                source: work.clone(),
                guest_path: "/work".into(),
                read_only: false,
            }],
            bridges: vec![],
        };
        let mut vm = Vm::boot(layout, &programs, Duration::from_secs(60)).await.expect("the VM boots");
        eprintln!("the guest's agent answered {:?} after QEMU started", vm.boot_time);
        let status = vm.status().await.unwrap();
        assert!(status.mounts.contains(&"work on /work (rw)".to_owned()), "{:?}", status.mounts);

        let ran = run(&vm, "echo out; echo err >&2; exit 3").await;
        assert_eq!((ran.stdout.as_str(), ran.stderr.as_str(), ran.code), ("out\n", "err\n", Some(3)));
        let ran = run(&vm, "cat /work/from-host.txt && echo written > /work/from-guest.txt").await;
        assert_eq!((ran.stdout.as_str(), ran.code), ("hello guest\n", Some(0)), "{}", ran.stderr);
        assert_eq!(std::fs::read_to_string(work.join("from-guest.txt")).unwrap(), "written\n");
        // Nothing of the host but the share: not the secret's path, not the host's root.
        let probe = format!("cat {}/key; ls /usr /home /root 2>&1; echo done", secret.display());
        let ran = run(&vm, &probe).await;
        assert!(!ran.stdout.contains("s3cret") && ran.stdout.contains("done"), "{}", ran.stdout);
        assert!(ran.stderr.contains("No such file or directory"), "{}", ran.stderr);
        // No network device at all: only the loopback, and no route anywhere.
        let ran = run(&vm, "ls /sys/class/net").await;
        assert_eq!(ran.stdout, "lo\n");
        let ran = run(&vm, "cat /proc/net/route").await;
        assert!(ran.stdout.lines().count() <= 1, "a header at most, no route: {}", ran.stdout);
        let ran = run(&vm, "busybox nc -w 2 10.0.2.2 80 </dev/null").await;
        assert_ne!(ran.code, Some(0));
        assert!(ran.stderr.contains("unreachable"), "{}", ran.stderr);

        // QEMU killed: the VM ends; stopping it leaves no daemon behind.
        let qemu = vm.qemu_pid().unwrap();
        let daemons = vm.daemon_pids();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(qemu as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
        tokio::time::timeout(Duration::from_secs(10), vm.wait()).await.expect("QEMU's end is seen").unwrap();
        vm.stop().await;
        for pid in daemons {
            assert!(!alive(pid), "daemon {pid} is gone");
        }
    }
}

/// Whether this host can boot rigs (CI can: a missing part fails the suite there).
fn rigs_here(sup: &Supervisor) -> bool {
    let available = sup.stdout_lines.iter().any(|l| l.starts_with("cc-supervisor: microvm=available"));
    assert!(available || !required(), "CI boots microVMs: {:?}", sup.stdout_lines);
    if !available {
        eprintln!("skipping: the microVM backend is unavailable here");
    }
    available
}

fn text(out: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A rig through ccctl: it boots, runs command lines with their exit codes, writes
/// into the conversation's copy, cannot reach the registered checkout, is gated as
/// bash is, and ends clearly when its QEMU is killed (its run stopped, nothing left).
#[test]
fn a_rig_runs_gated_commands_in_the_conversations_copy_and_ends_clearly() {
    let f = cc_tests::runs::fixture(None);
    if !rigs_here(&f.sup) {
        return;
    }
    let attachments = f.sup.data_dir.join("workspaces/default/attachments");
    std::fs::write(attachments.join("notes.txt"), "attached\n").unwrap();
    let out = f.sup.ccctl(&["rig", "start", "--conversation", &f.conversation, "--memory", "256"]);
    let (name, err) = text(&out);
    assert!(out.status.success(), "{err}");
    let name = name.trim().to_owned();
    assert!(name.starts_with("rigs/v"), "{name}");
    assert!(err.contains("repos on /work (rw)"), "{err}");

    let out = f.sup.ccctl(&[
        "rig",
        "exec",
        &name,
        "--",
        "pwd; cat README.md | head -1; echo from-rig > made-in-rig.txt; exit 7",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stdout.starts_with("/work/demo\n"), "{stdout}");
    assert_eq!(std::fs::read_to_string(f.copy().join("made-in-rig.txt")).unwrap(), "from-rig\n");
    // The workspace's attachments: readable, not writable (a microVM terminal, which is
    // not gated, tries the guest root's remount too).
    let script = "cat /attachments/notes.txt; echo x > /attachments/new.txt";
    let out = f.sup.ccctl(&["rig", "exec", &name, "--", script]);
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "attached\n", "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(!attachments.join("new.txt").exists());
    // The registered checkout and the data dir are not in the guest.
    let probe = format!("ls {} {} 2>&1; echo done", f.checkout.display(), f.sup.data_dir.display());
    let out = f.sup.ccctl(&["rig", "exec", &name, "--", &probe]);
    let (stdout, _) = text(&out);
    assert_eq!(stdout.matches("No such file or directory").count(), 2, "{stdout}");
    // Gated as bash: the command policy's denial, before anything ran.
    let out = f.sup.ccctl(&["rig", "exec", &name, "--", "rm -rf /"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.starts_with("ccctl: denied: "), "{stderr}");

    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    let rig = rigs.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone();
    assert_eq!(rig["running"], true);
    let (qemu, run) = (rig["qemu_pid"].as_u64().unwrap() as i32, rig["run_id"].as_str().unwrap().to_owned());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(qemu), nix::sys::signal::Signal::SIGKILL).unwrap();
    cc_tests::eventually(Duration::from_secs(30), "the rig says its VM ended", || {
        let rigs = f.sup.ccctl_json(&["rig", "list"]);
        rigs.as_array().unwrap().iter().any(|r| r["name"] == name.as_str() && r["running"] == false)
    });
    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    let rig = rigs.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone();
    assert!(rig["ended_reason"].as_str().unwrap().starts_with("QEMU exited"), "{rig}");
    cc_tests::eventually(Duration::from_secs(30), "the rig's run is stopped", || {
        f.sup.ccctl_json(&["run", "show", &run])["state"] != "running"
    });
    let out = f.sup.ccctl(&["rig", "exec", &name, "--", "true"]);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("has ended"), "{stderr}");
    assert!(f.sup.ccctl(&["rig", "stop", &name]).status.success());
    let socket_dir = f.sup.data_dir.join("vms").join(name.trim_start_matches("rigs/"));
    let left: Vec<_> =
        std::fs::read_dir(&socket_dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(!left.iter().any(|n| n.to_string_lossy().ends_with(".sock")), "sockets left: {left:?}");
}

/// A microVM terminal: typed into as any terminal, the guest's own kernel, its exit
/// the terminal's, and its rig gone with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_microvm_terminal_runs_a_shell_in_its_own_vm() {
    use cc_proto::supervisor::v1 as pb;
    let f = cc_tests::runs::fixture(None);
    if !rigs_here(&f.sup) {
        return;
    }
    let mut client = f.sup.client().await;
    let terminal =
        cc_tests::terminal::create(&mut client, pb::TerminalBackend::Microvm, &f.conversation, &[]).await.unwrap();
    assert!(terminal.confinement.starts_with("microVM rigs/v"), "{}", terminal.confinement);
    let mut t = cc_tests::terminal::attach(&mut client, &terminal.name).await.unwrap();
    // The guest's root remounts the attachments read-write: the daemon's side is
    // read-only, so the write still fails.
    t.type_text("mount -o remount,rw /attachments; echo x > /attachments/by-root.txt; echo wrote=$?-z\n").await;
    t.read_until("wrote=1-z", 0, Duration::from_secs(30)).await;
    assert!(!f.sup.data_dir.join("workspaces/default/attachments/by-root.txt").exists());
    t.type_text("echo in-guest-$((6*7)); uname -r; ls /work\n").await;
    let at = t.read_until("in-guest-42", 0, Duration::from_secs(30)).await;
    t.read_until("demo", at, Duration::from_secs(30)).await;
    let release = std::fs::read_to_string(image_dir().join("release")).unwrap();
    t.read_until(release.trim(), at, Duration::from_secs(30)).await;
    t.type_text("exit 6\n").await;
    t.read_to_end(Duration::from_secs(30)).await;
    assert_eq!(t.exit.as_ref().and_then(|e| e.code), Some(6));
    cc_tests::eventually(Duration::from_secs(30), "the terminal's rig is gone", || {
        f.sup.ccctl_json(&["rig", "list"]).as_array().unwrap().is_empty()
    });

    // A terminal opened in a running rig: the rig outlives it, and a deleted one's
    // command is ended in the guest.
    let out = f.sup.ccctl(&["rig", "start", "--conversation", &f.conversation, "--memory", "256"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let rig = text(&out).0.trim().to_owned();
    let in_rig = |client: &mut cc_client::Client| {
        let request = pb::CreateTerminalRequest {
            backend: pb::TerminalBackend::Microvm as i32,
            rig: rig.clone(),
            size: Some(pb::TerminalSize { columns: 80, rows: 24 }),
            ..Default::default()
        };
        let mut client = client.clone();
        async move { client.terminals.create_terminal(request).await.unwrap().into_inner().terminal.unwrap() }
    };
    let terminal = in_rig(&mut client).await;
    assert!(terminal.confinement.contains(&rig), "{}", terminal.confinement);
    let mut t = cc_tests::terminal::attach(&mut client, &terminal.name).await.unwrap();
    t.type_text("exit 3\n").await;
    t.read_to_end(Duration::from_secs(30)).await;
    assert_eq!(t.exit.as_ref().and_then(|e| e.code), Some(3));
    let second = in_rig(&mut client).await;
    let t = cc_tests::terminal::attach(&mut client, &second.name).await.unwrap();
    t.type_text("exec sleep 4242\n").await;
    let ps = || text(&f.sup.ccctl(&["rig", "exec", &rig, "--", "ps"])).0;
    cc_tests::eventually(Duration::from_secs(30), "the terminal's command runs in the guest", || {
        ps().contains("sleep 4242")
    });
    client.terminals.delete_terminal(pb::DeleteTerminalRequest { name: second.name.clone() }).await.unwrap();
    cc_tests::eventually(Duration::from_secs(30), "the deleted terminal's command is gone", || {
        !ps().contains("sleep 4242")
    });
    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    assert_eq!(rigs[0]["running"], true, "the rig outlives its terminals: {rigs}");
    assert!(f.sup.ccctl(&["rig", "stop", &rig]).status.success());
}

/// kill -9 of the supervisor: sandboxd goes with it, and every VM's QEMU and daemons
/// with sandboxd (PR_SET_PDEATHSIG).
#[test]
fn a_supervisor_sigkill_leaves_no_qemu_running() {
    let mut f = cc_tests::runs::fixture(None);
    if !rigs_here(&f.sup) {
        return;
    }
    let out = f.sup.ccctl(&["rig", "start", "--conversation", &f.conversation, "--memory", "256"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    let qemu = rigs[0]["qemu_pid"].as_u64().unwrap() as u32;
    assert!(cc_tests::alive(qemu));
    f.sup.child.kill().unwrap();
    f.sup.child.wait().unwrap();
    cc_tests::eventually(Duration::from_secs(30), "QEMU is gone", || !cc_tests::alive(qemu));
    // The next start sweeps what the killed one left (the rig's run's cgroup).
    drop(Supervisor::start_on(&f.sup.data_dir, Options::default()));
}

/// The guest's agent killed from inside (a command kills its own parent, the agent's
/// server): the guest ends, and the rig says so, its run stopped, nothing left.
#[test]
fn killing_the_guest_agent_ends_the_rig_clearly() {
    let f = cc_tests::runs::fixture(None);
    if !rigs_here(&f.sup) {
        return;
    }
    let out = f.sup.ccctl(&["rig", "start", "--conversation", &f.conversation, "--memory", "256"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let name = text(&out).0.trim().to_owned();
    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    let qemu = rigs[0]["qemu_pid"].as_u64().unwrap() as u32;
    // $PPID of the guest's sh is the agent's server.
    let out = f.sup.ccctl(&["rig", "exec", &name, "--", "kill -9 $PPID"]);
    assert!(!out.status.success(), "the command's exit cannot be told: {:?}", text(&out));
    cc_tests::eventually(Duration::from_secs(30), "the rig says its VM ended", || {
        let rigs = f.sup.ccctl_json(&["rig", "list"]);
        rigs.as_array().unwrap().iter().any(|r| r["name"] == name.as_str() && r["running"] == false)
    });
    let rigs = f.sup.ccctl_json(&["rig", "list"]);
    assert!(rigs[0]["ended_reason"].as_str().unwrap().starts_with("QEMU exited"), "{rigs}");
    cc_tests::eventually(Duration::from_secs(30), "QEMU is gone", || !cc_tests::alive(qemu));
    let run = rigs[0]["run_id"].as_str().unwrap().to_owned();
    cc_tests::eventually(Duration::from_secs(30), "the rig's run is stopped", || {
        f.sup.ccctl_json(&["run", "show", &run])["state"] != "running"
    });
}

/// An HTTP server of the test's own on loopback: one answer to every request.
fn upstream(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let (mut buf, mut head) = ([0u8; 4096], Vec::new());
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = conn.write_all(answer.as_bytes());
            });
        }
    });
    port
}

/// A rig's network: off, the guest has no route (its proxy port does not even
/// answer); on, an allowed name works through the run's egress proxy, bridged over
/// vsock, and a name off the allowlist is refused by that proxy.
#[test]
fn a_rigs_network_is_the_runs_proxy_or_nothing() {
    // On loopback, which the proxy reaches only where an exact rule allows it.
    let port = upstream("hello from upstream");
    let rules = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(rules.path(), "[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n").unwrap();
    std::fs::set_permissions(rules.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let config = format!(
        "[gate]\nrules = \"{}\"\n\n[egress]\nallow = [\"allowed.example.test\", \"127.0.0.1:{port}\"]\n\
         [egress.resolve]\n\"allowed.example.test\" = [\"127.0.0.1\"]\n\"other.example.test\" = [\"127.0.0.1\"]\n",
        rules.path().display()
    );
    let f = cc_tests::runs::fixture(Some(&config));
    if !rigs_here(&f.sup) {
        return;
    }
    let start = |network: &str| {
        let out =
            f.sup.ccctl(&["rig", "start", "--conversation", &f.conversation, "--memory", "256", "--network", network]);
        assert!(out.status.success(), "{}", text(&out).1);
        text(&out).0.trim().to_owned()
    };
    let fetch = |rig: &str, host: &str| {
        let line = format!("wget -q -O - http://{host}:{port}/ 2>&1; echo exit=$?");
        text(&f.sup.ccctl(&["rig", "exec", rig, "--", &line])).0
    };
    let on = start("on");
    let got = fetch(&on, "allowed.example.test");
    assert!(got.contains("hello from upstream") && got.contains("exit=0"), "{got}");
    let refused = fetch(&on, "other.example.test");
    assert!(refused.contains("403") && !refused.contains("exit=0"), "{refused}");
    let off = start("off");
    let nothing = fetch(&off, "allowed.example.test");
    assert!(!nothing.contains("hello from upstream") && !nothing.contains("exit=0"), "{nothing}");
    let ran = text(&f.sup.ccctl(&["rig", "exec", &off, "--", "echo $http_proxy; ls /sys/class/net"])).0;
    assert_eq!(ran, "\nlo\n", "no proxy variable, no device but lo");
    for rig in [&on, &off] {
        assert!(f.sup.ccctl(&["rig", "stop", rig]).status.success());
    }
}
