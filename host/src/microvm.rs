//! The microVM backend's probe: what this host has of what a microVM needs (QEMU, a
//! usable accelerator, the project's guest image, a vsock transport), gathered once at
//! start and judged by a pure function, so that the startup line and `ccctl sandbox
//! probe` say exactly what was found and why the backend is or is not available.
//! Asking for a microVM where it is unavailable is an error, never a quiet native.

use std::path::{Path, PathBuf};

/// How guests would be accelerated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accel {
    /// `/dev/kvm` opens and runs a stock guest kernel.
    Kvm,
    /// `/dev/kvm` is KVM's PVM flavour (a host that is itself a guest): it runs only
    /// PVM-aware kernels, and Debian's faults on its first privileged instructions.
    /// Guests are emulated (TCG) instead, seconds to boot rather than a fraction of one.
    TcgUnderPvm,
    /// No `/dev/kvm` to open: emulation only.
    TcgWithoutKvm(String),
}

/// How the host talks to a guest's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vsock {
    /// The kernel's vhost-vsock (`/dev/vhost-vsock`) and no daemon: not yet a transport
    /// this build's launcher uses.
    VhostVsock,
    /// rust-vmm's `vhost-device-vsock`, a vhost-user backend that exposes the guest's
    /// ports as Unix sockets (Firecracker's `CONNECT <port>` protocol).
    VhostUser(PathBuf),
    None,
}

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `qemu-system-x86_64 --version`'s version, if it runs.
    pub qemu: Option<String>,
    pub accel: Accel,
    /// The guest image's kernel release, if `vmlinux` and `initramfs.gz` are there.
    pub image: Result<String, String>,
    pub vsock: Vsock,
    /// QEMU's virtiofsd, for the shared directories.
    pub virtiofsd: Option<PathBuf>,
    /// Whether this build can launch microVMs at all.
    pub launcher_built: bool,
}

/// The verdict: available or not, and the line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrovmProbe {
    pub available: bool,
    /// `microvm=available (qemu 7.2.22, tcg: …, vhost-user-vsock)` or
    /// `microvm=unavailable (why; found: …)`.
    pub line: String,
}

/// Where the guest image is looked for when the configuration names none: `microvm/`
/// beside the helper binaries (`deploy/microvm/build-image` writes it).
pub fn default_image_dir(helper_dir: &Path) -> PathBuf {
    helper_dir.join("microvm")
}

/// Gathers the facts (a few stats and one `qemu --version`).
pub fn gather(image_dir: &Path, launcher_built: bool) -> Facts {
    let qemu = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| parse_qemu_version(&String::from_utf8_lossy(&o.stdout)));
    let accel = match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Err(e) => Accel::TcgWithoutKvm(format!("/dev/kvm: {e}")),
        Ok(_) if Path::new("/sys/module/kvm_pvm").exists() => Accel::TcgUnderPvm,
        Ok(_) => Accel::Kvm,
    };
    let image = if image_dir.join("vmlinux").is_file() && image_dir.join("initramfs.gz").is_file() {
        match std::fs::read_to_string(image_dir.join("release")) {
            Ok(release) if image_dir.join("agent").is_file() => Ok(release.trim().to_owned()),
            Ok(_) => Err(format!(
                "the guest image in {} has no agent (deploy/microvm/build-image DIR cc-vm-agent)",
                image_dir.display()
            )),
            Err(e) => Err(format!("{}: {e}", image_dir.join("release").display())),
        }
    } else {
        Err(format!("no guest image in {} (deploy/microvm/build-image builds it)", image_dir.display()))
    };
    // The daemon first: this build's launcher speaks vhost-user only, so a host with
    // both uses the daemon, and one with only /dev/vhost-vsock is said to be so.
    // The system's places before PATH: as root, the daemon runs as the service user,
    // who cannot reach a copy in root's home that PATH may name first.
    let daemon = ["/usr/local/bin/vhost-device-vsock", "/usr/bin/vhost-device-vsock"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| find_program("vhost-device-vsock"));
    let vsock = match daemon {
        Some(daemon) => Vsock::VhostUser(daemon),
        None if Path::new("/dev/vhost-vsock").exists() => Vsock::VhostVsock,
        None => Vsock::None,
    };
    let virtiofsd = ["/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| find_program("virtiofsd"));
    Facts { qemu, accel, image, vsock, virtiofsd, launcher_built }
}

fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// `QEMU emulator version 7.2.22 (Debian …)` → `7.2.22`.
pub fn parse_qemu_version(stdout: &str) -> Option<String> {
    let rest = stdout.lines().next()?.split("version ").nth(1)?;
    let version = rest.split_whitespace().next()?;
    version.chars().next()?.is_ascii_digit().then(|| version.to_owned())
}

/// Judges the facts. Every missing part is named, and what was found besides.
pub fn judge(f: &Facts) -> MicrovmProbe {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    match &f.qemu {
        Some(v) => found.push(format!("qemu {v}")),
        None => missing.push("qemu-system-x86_64 does not run (apt-get install qemu-system-x86)".to_owned()),
    }
    found.push(match &f.accel {
        Accel::Kvm => "kvm".to_owned(),
        Accel::TcgUnderPvm => "tcg (this host's /dev/kvm is kvm_pvm, which runs no stock guest)".to_owned(),
        Accel::TcgWithoutKvm(why) => format!("tcg ({why})"),
    });
    match &f.image {
        Ok(release) => found.push(format!("image {release}")),
        Err(why) => missing.push(why.clone()),
    }
    match &f.vsock {
        Vsock::VhostUser(_) => found.push("vhost-user-vsock".to_owned()),
        Vsock::VhostVsock => missing.push(
            "/dev/vhost-vsock is here, but this build launches guests with vhost-device-vsock only (cargo install vhost-device-vsock --root /usr/local)"
                .to_owned(),
        ),
        Vsock::None => {
            missing.push("no vsock transport (no /dev/vhost-vsock, no vhost-device-vsock on PATH)".to_owned())
        }
    }
    match &f.virtiofsd {
        Some(_) => found.push("virtiofsd".to_owned()),
        None => missing.push("no virtiofsd (apt-get install qemu-system-common)".to_owned()),
    }
    if !f.launcher_built {
        missing.insert(0, "this build has no microVM launcher yet".to_owned());
    }
    let found = found.join(", ");
    if missing.is_empty() {
        MicrovmProbe { available: true, line: format!("microvm=available ({found})") }
    } else {
        MicrovmProbe { available: false, line: format!("microvm=unavailable ({}; found: {found})", missing.join("; ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete() -> Facts {
        Facts {
            qemu: Some("7.2.22".into()),
            accel: Accel::Kvm,
            image: Ok("6.1.0-57-cloud-amd64".into()),
            vsock: Vsock::VhostUser("/usr/local/bin/vhost-device-vsock".into()),
            virtiofsd: Some("/usr/lib/qemu/virtiofsd".into()),
            launcher_built: true,
        }
    }

    #[test]
    fn everything_found_is_available_and_says_what() {
        let p = judge(&complete());
        assert!(p.available);
        assert_eq!(
            p.line,
            "microvm=available (qemu 7.2.22, kvm, image 6.1.0-57-cloud-amd64, vhost-user-vsock, virtiofsd)"
        );
    }

    #[test]
    fn each_missing_part_makes_it_unavailable_and_is_named() {
        let cases: Vec<(Facts, &str)> = vec![
            (Facts { qemu: None, ..complete() }, "qemu-system-x86_64 does not run"),
            (Facts { image: Err("no guest image in /x".into()), ..complete() }, "no guest image in /x"),
            (Facts { vsock: Vsock::None, ..complete() }, "no vsock transport"),
            (Facts { vsock: Vsock::VhostVsock, ..complete() }, "launches guests with vhost-device-vsock only"),
            (Facts { virtiofsd: None, ..complete() }, "no virtiofsd"),
            (Facts { launcher_built: false, ..complete() }, "no microVM launcher yet"),
        ];
        for (facts, why) in cases {
            let p = judge(&facts);
            assert!(!p.available, "{why}");
            assert!(p.line.starts_with("microvm=unavailable (") && p.line.contains(why), "{}", p.line);
        }
    }

    #[test]
    fn pvm_is_said_to_fall_back_to_emulation() {
        let p = judge(&Facts { accel: Accel::TcgUnderPvm, ..complete() });
        assert!(p.available);
        assert!(p.line.contains("tcg (this host's /dev/kvm is kvm_pvm"), "{}", p.line);
    }

    #[test]
    fn qemu_versions() {
        assert_eq!(
            parse_qemu_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7)\nCopyright"),
            Some("7.2.22".into())
        );
        assert_eq!(parse_qemu_version("QEMU emulator version 10.0.2\n"), Some("10.0.2".into()));
        assert_eq!(parse_qemu_version("something else"), None);
        assert_eq!(parse_qemu_version(""), None);
    }
}
