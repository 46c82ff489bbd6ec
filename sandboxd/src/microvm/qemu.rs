//! The microVM's command lines, as pure functions: QEMU's `microvm` machine with direct
//! kernel boot, no firmware, no PCI and no network device; its memory shared (a memfd)
//! with the vhost-user daemons that serve its vsock and its virtio-fs shares.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The guest's vsock port its agent serves on.
pub const AGENT_PORT: u32 = 1024;

/// One directory shared into the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// virtio-fs tag, also the socket's name.
    pub tag: String,
    /// On the host.
    pub source: PathBuf,
    /// Where the guest mounts it (absolute).
    pub guest_path: String,
    /// Read-only on the host's side (its daemon serves a read-only mount of it), not
    /// only in the guest's mount, which the guest's root could remount.
    pub read_only: bool,
}

/// Everything a VM's command lines are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `vmlinux` and `initramfs.gz`.
    pub image: PathBuf,
    /// The VM's own directory: its sockets and its console log.
    pub dir: PathBuf,
    pub memory_mib: u32,
    pub cpus: u32,
    /// KVM when it runs a stock guest here, else emulation.
    pub kvm: bool,
    /// The host's TSC rate: a guest under emulation that calibrates its clock itself
    /// hangs in some boots.
    pub tsc_khz: Option<u64>,
    pub shares: Vec<Share>,
    /// Guest ports the agent bridges to the host's vsock ports of the same number.
    pub bridges: Vec<u16>,
}

impl Layout {
    pub fn vhost_vsock_socket(&self) -> PathBuf {
        self.dir.join("vhost-vsock.sock")
    }

    /// Where vhost-device-vsock exposes the guest's ports (`CONNECT <port>`).
    pub fn vsock_socket(&self) -> PathBuf {
        self.dir.join("vsock.sock")
    }

    pub fn share_socket(&self, share: &Share) -> PathBuf {
        self.dir.join(format!("fs-{}.sock", share.tag))
    }

    /// Where vhost-device-vsock connects a guest's connection to host port `port`.
    pub fn bridge_socket(&self, port: u16) -> PathBuf {
        let mut path = self.vsock_socket().into_os_string();
        path.push(format!("_{port}"));
        path.into()
    }

    pub fn console_log(&self) -> PathBuf {
        self.dir.join("console.log")
    }
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

fn path_arg(prefix: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(prefix);
    arg.push(path);
    arg
}

/// The guest kernel's command line: our agent's settings after the kernel's.
pub fn kernel_command_line(layout: &Layout) -> String {
    let mut line = "console=ttyS0 reboot=t panic=-1 quiet".to_owned();
    if !layout.kvm
        && let Some(khz) = layout.tsc_khz
    {
        line.push_str(&format!(" tsc_early_khz={khz}"));
    }
    line.push_str(&format!(" cc.port={AGENT_PORT}"));
    for share in &layout.shares {
        let mode = if share.read_only { "ro" } else { "rw" };
        line.push_str(&format!(" cc.share={}:{}:{mode}", share.tag, share.guest_path));
    }
    for port in &layout.bridges {
        line.push_str(&format!(" cc.bridge={port}"));
    }
    line
}

/// QEMU's arguments (without the program).
pub fn qemu_args(layout: &Layout) -> Vec<OsString> {
    let memory = format!("{}M", layout.memory_mib);
    let mut args: Vec<OsString> = [
        "-M",
        "microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem",
        "-accel",
        if layout.kvm { "kvm" } else { "tcg" },
        "-cpu",
        if layout.kvm { "host" } else { "max" },
    ]
    .into_iter()
    .map(os)
    .collect();
    args.extend([os("-m"), os(&memory), os("-smp"), os(layout.cpus.to_string())]);
    args.extend(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"].map(os));
    args.push(os("-serial"));
    args.push(path_arg("file:", &layout.console_log()));
    args.extend([os("-object"), os(format!("memory-backend-memfd,id=mem,size={memory},share=on"))]);
    // virtio-fs needs the modern virtio-mmio transport: with the legacy one its
    // daemon fails and the guest's mount waits for ever.
    args.extend([os("-global"), os("virtio-mmio.force-legacy=false")]);
    args.push(os("-chardev"));
    args.push(path_arg("socket,id=vsock,path=", &layout.vhost_vsock_socket()));
    args.extend([os("-device"), os("vhost-user-vsock-device,chardev=vsock")]);
    for (i, share) in layout.shares.iter().enumerate() {
        args.push(os("-chardev"));
        args.push(path_arg(&format!("socket,id=fs{i},path="), &layout.share_socket(share)));
        args.extend([os("-device"), os(format!("vhost-user-fs-device,chardev=fs{i},tag={}", share.tag))]);
    }
    args.push(os("-kernel"));
    args.push(layout.image.join("vmlinux").into_os_string());
    args.push(os("-initrd"));
    args.push(layout.image.join("initramfs.gz").into_os_string());
    args.extend([os("-append"), os(kernel_command_line(layout))]);
    args
}

/// vhost-device-vsock's arguments: guest CID 3 (each VM has a daemon of its own, so
/// every guest can be 3).
pub fn vsock_args(layout: &Layout) -> Vec<OsString> {
    vec![
        os("--guest-cid=3"),
        path_arg("--socket=", &layout.vhost_vsock_socket()),
        path_arg("--uds-path=", &layout.vsock_socket()),
    ]
}

/// unshare's arguments before virtiofsd's own: a user namespace in which the daemon's
/// user is root (so that it may make its own mount and pid namespaces), a pid
/// namespace it leads, the daemon killed with unshare, and a /run of its own (it keeps
/// a pid file there, which the service user may not write on the host). A read-only
/// share is first bound onto itself read-only in that mount namespace, so that the
/// daemon itself cannot write it, whatever the guest asks.
pub fn unshare_args(virtiofsd: &Path, share: &Share) -> Vec<OsString> {
    let mut args: Vec<OsString> =
        ["--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-c"]
            .map(os)
            .into();
    let read_only = r#"mount --bind "$CC_SHARE" "$CC_SHARE" && mount -o remount,bind,ro "$CC_SHARE" && "#;
    let script = format!(
        r#"{}mount -t tmpfs -o mode=0700 cc-virtiofsd /run && exec "$0" "$@""#,
        if share.read_only { read_only } else { "" }
    );
    args.push(os(script));
    args.push(virtiofsd.as_os_str().to_owned());
    args
}

/// virtiofsd's arguments for one share (QEMU 7.2's C daemon).
pub fn virtiofsd_args(layout: &Layout, share: &Share) -> Vec<OsString> {
    vec![
        path_arg("--socket-path=", &layout.share_socket(share)),
        os("-o"),
        path_arg("source=", &share.source),
        os("-o"),
        os("cache=none"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            image: "/opt/cc/microvm".into(),
            dir: "/data/vms/v1".into(),
            memory_mib: 256,
            cpus: 1,
            kvm: false,
            tsc_khz: Some(2_600_000),
            shares: vec![Share {
                tag: "work".into(),
                source: "/data/c/repos".into(),
                guest_path: "/work".into(),
                read_only: false,
            }],
            bridges: vec![],
        }
    }

    fn joined(args: &[OsString]) -> String {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_machine_has_no_firmware_no_nic_and_only_our_devices() {
        let args = joined(&qemu_args(&layout()));
        assert!(args.starts_with("-M microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem -accel tcg -cpu max -m 256M -smp 1"), "{args}");
        assert!(args.contains("-nodefaults -no-user-config -nographic -no-reboot"), "{args}");
        assert!(args.contains("-object memory-backend-memfd,id=mem,size=256M,share=on"), "{args}");
        assert!(args.contains("-device vhost-user-vsock-device,chardev=vsock"), "{args}");
        assert!(args.contains("-chardev socket,id=fs0,path=/data/vms/v1/fs-work.sock -device vhost-user-fs-device,chardev=fs0,tag=work"), "{args}");
        assert!(args.contains("-kernel /opt/cc/microvm/vmlinux -initrd /opt/cc/microvm/initramfs.gz"), "{args}");
        for absent in ["-netdev", "-nic", "virtio-net", "-bios", "pci"] {
            assert!(!args.contains(absent), "{absent}: {args}");
        }
    }

    #[test]
    fn the_kernel_line_tells_the_agent_its_port_and_shares() {
        let line = kernel_command_line(&layout());
        assert_eq!(
            line,
            "console=ttyS0 reboot=t panic=-1 quiet tsc_early_khz=2600000 cc.port=1024 cc.share=work:/work:rw"
        );
        let bridged = Layout { bridges: vec![41080, 41081], ..layout() };
        assert!(kernel_command_line(&bridged).ends_with("cc.share=work:/work:rw cc.bridge=41080 cc.bridge=41081"));
        assert_eq!(bridged.bridge_socket(41080), PathBuf::from("/data/vms/v1/vsock.sock_41080"));
        let kvm = Layout { kvm: true, ..layout() };
        assert!(!kernel_command_line(&kvm).contains("tsc_early_khz"));
        assert!(joined(&qemu_args(&kvm)).contains("-accel kvm -cpu host"));
    }

    #[test]
    fn the_daemons_listen_in_the_vms_directory() {
        let l = layout();
        assert_eq!(
            joined(&vsock_args(&l)),
            "--guest-cid=3 --socket=/data/vms/v1/vhost-vsock.sock --uds-path=/data/vms/v1/vsock.sock"
        );
        assert_eq!(
            joined(&virtiofsd_args(&l, &l.shares[0])),
            "--socket-path=/data/vms/v1/fs-work.sock -o source=/data/c/repos -o cache=none"
        );
        let rw = joined(&unshare_args(Path::new("/usr/lib/qemu/virtiofsd"), &l.shares[0]));
        assert!(!rw.contains("remount,bind,ro") && rw.ends_with("/usr/lib/qemu/virtiofsd"), "{rw}");
        let ro = Share { read_only: true, ..l.shares[0].clone() };
        assert!(joined(&unshare_args(Path::new("/v"), &ro)).contains(r#"mount -o remount,bind,ro "$CC_SHARE""#));
        let ro_layout = Layout { shares: vec![ro], ..l };
        assert!(kernel_command_line(&ro_layout).ends_with("cc.share=work:/work:ro"));
    }
}
