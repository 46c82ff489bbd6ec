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
fn the_probe_says_what_it_found_and_a_microvm_terminal_is_refused_with_it() {
    let sup = Supervisor::start(Options::default());
    let line = sup.stdout_lines.iter().find(|l| l.starts_with("cc-supervisor: microvm=")).cloned().unwrap_or_default();
    assert!(line.starts_with("cc-supervisor: microvm=unavailable (this build has no microVM launcher yet"), "{line}");
    if required() {
        assert!(line.contains("found: qemu "), "CI has QEMU: {line}");
        assert!(line.contains(", image "), "CI builds the guest image: {line}");
        assert!(line.contains("virtiofsd"), "CI has virtiofsd: {line}");
    }
    // sandboxd's own probe, through the API, says the same.
    let probe = sup.ccctl(&["sandbox", "probe"]);
    let shown = String::from_utf8_lossy(&probe.stdout);
    assert!(shown.lines().any(|l| l == line.trim_start_matches("cc-supervisor: ")), "{shown}");
    let out = sup.ccctl(&["terminal", "new", "--backend", "microvm"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.starts_with("ccctl: microvm terminals are not available on this host: unavailable (this build has no"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(sup.ccctl_json(&["terminal", "list"]).as_array().unwrap().is_empty(), "nothing was started instead");
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
            shares: vec![Share { tag: "work".into(), source: work.clone(), guest_path: "/work".into() }],
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
