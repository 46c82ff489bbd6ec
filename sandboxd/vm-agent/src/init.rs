//! PID 1 of the guest, in a straight line: the kernel's filesystems, the modules, the
//! shares, then the server as a child of ours; from then on we reap every orphan, and
//! when the server ends the VM ends (a reboot, which QEMU's `-no-reboot` turns into its
//! exit).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use nix::mount::{MsFlags, mount};

/// How long one virtio-fs mount may take: a share whose daemon went wrong leaves the
/// mount waiting for ever.
const MOUNT_WITHIN: Duration = Duration::from_secs(10);

fn say(message: &str) {
    eprintln!("cc-vm-agent: {message}");
}

fn mount_fs(source: &str, target: &str, fstype: &str, flags: MsFlags, data: Option<&str>) -> Result<(), String> {
    std::fs::create_dir_all(target).map_err(|e| format!("cannot make {target}: {e}"))?;
    mount(Some(source), target, Some(fstype), flags, data)
        .map_err(|e| format!("cannot mount {fstype} on {target}: {e}"))
}

/// Loads each module `/lib/modules/load` lists, in order.
fn load_modules() -> Result<(), String> {
    let list = std::fs::read_to_string("/lib/modules/load").map_err(|e| format!("/lib/modules/load: {e}"))?;
    for path in list.lines().filter(|l| !l.is_empty()) {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        match nix::kmod::finit_module(&file, c"", nix::kmod::ModuleInitFlags::empty()) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(format!("cannot load {path}: {e}")),
        }
    }
    Ok(())
}

/// Mounts a virtio-fs share, or gives up after [`MOUNT_WITHIN`].
fn mount_share(share: &crate::Share) -> Result<(), String> {
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if share.read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    let (tag, path) = (share.tag.clone(), share.path.clone());
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(mount_fs(&tag, &path, "virtiofs", flags, None));
    });
    done.recv_timeout(MOUNT_WITHIN)
        .unwrap_or_else(|_| Err(format!("the share {} did not mount within {MOUNT_WITHIN:?}", share.tag)))
}

fn set_up() -> Result<(), String> {
    let none = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV;
    mount_fs("proc", "/proc", "proc", none, None)?;
    mount_fs("sysfs", "/sys", "sysfs", none, None)?;
    mount_fs("devtmpfs", "/dev", "devtmpfs", MsFlags::MS_NOSUID, None)?;
    mount_fs("devpts", "/dev/pts", "devpts", MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, Some("ptmxmode=0666"))?;
    mount_fs("tmpfs", "/tmp", "tmpfs", MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("mode=1777"))?;
    load_modules()?;
    let cmdline = std::fs::read_to_string("/proc/cmdline").map_err(|e| format!("/proc/cmdline: {e}"))?;
    let settings = crate::settings(&cmdline)?;
    for share in &settings.shares {
        mount_share(share)?;
    }
    // The loopback, where the bridges listen; there is no other device.
    if !settings.bridges.is_empty() {
        let up = std::process::Command::new("/bin/ip").args(["link", "set", "lo", "up"]).status();
        if !up.is_ok_and(|s| s.success()) {
            return Err("cannot bring the loopback up for the bridges".into());
        }
    }
    Ok(())
}

pub fn run() -> ExitCode {
    if let Err(e) = set_up() {
        say(&format!("{e}; the VM stops"));
        end();
    }
    let server = std::process::Command::new(Path::new("/proc/self/exe")).arg("--serve").spawn();
    let server = match server {
        Ok(child) => nix::unistd::Pid::from_raw(child.id() as i32),
        Err(e) => {
            say(&format!("cannot start the server: {e}; the VM stops"));
            end();
        }
    };
    // Every orphan of the guest is ours to reap; the server's end is the VM's.
    loop {
        match nix::sys::wait::wait() {
            Ok(status) if status.pid() == Some(server) => {
                say(&format!("the server ended ({status:?}); the VM stops"));
                end();
            }
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => {
                say(&format!("cannot wait: {e}; the VM stops"));
                end();
            }
        }
    }
}

/// Ends the VM: a reboot, which QEMU (`-no-reboot`) turns into its own exit.
fn end() -> ! {
    nix::unistd::sync();
    let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_AUTOBOOT);
    // Only if the reboot was refused; PID 1 must never return.
    loop {
        std::thread::park();
    }
}
