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
    let ready = loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.trim() == "READY" => break true,
            Ok(line) => seen.push(line),
            Err(_) => break false,
        }
    };
    let _ = qemu.kill();
    let _ = qemu.wait();
    assert!(ready, "the guest did not say READY within 60 s; its console:\n{}", seen.join("\n"));
    // Every module loaded: a failed modprobe prints on the console.
    assert!(!seen.iter().any(|l| l.contains("modprobe:")), "{}", seen.join("\n"));
    eprintln!("the guest was ready after {:?}", started.elapsed());
}
