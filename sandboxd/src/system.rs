//! The host's read-only system view for envelopes, found once: which system
//! directories exist, which are merged-/usr symlinks, and which secrets under /etc
//! exist. Which of those a launch masks is decided per launch ([`SystemView::for_reader`]):
//! only the ones its user could open at all.

use std::path::{Path, PathBuf};

const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt"];

/// Files under /etc that hold secrets: replaced by /dev/null.
const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
    "/etc/machine-id",
    "/etc/krb5.keytab",
    "/etc/ipsec.secrets",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/containers/auth.json",
];

/// Directories under /etc that hold secrets: replaced by an empty read-only tmpfs.
const SECRET_DIRS: &[&str] = &[
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/sudoers.d",
    "/etc/docker",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/cups/ssl",
    "/etc/letsencrypt",
    "/etc/netplan",
    "/etc/wpa_supplicant",
    "/etc/apt/auth.conf.d",
    "/etc/ipsec.d",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemEntry {
    Dir(PathBuf),
    Symlink { link: PathBuf, target: PathBuf },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemView {
    pub entries: Vec<SystemEntry>,
    pub secret_files: Vec<PathBuf>,
    pub secret_dirs: Vec<PathBuf>,
}

impl SystemView {
    pub fn discover() -> Self {
        let mut view = Self::default();
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        view.entries.push(SystemEntry::Symlink { link: path.to_owned(), target });
                    }
                }
                Ok(m) if m.is_dir() => view.entries.push(SystemEntry::Dir(path.to_owned())),
                _ => {}
            }
        }
        let exists = |p: &&&str| std::fs::symlink_metadata(p).is_ok();
        view.secret_files = SECRET_FILES.iter().filter(exists).map(PathBuf::from).collect();
        view.secret_dirs = SECRET_DIRS.iter().filter(exists).map(PathBuf::from).collect();
        view
    }
}

/// Who a launch runs as, for deciding which secrets it could open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// sandboxd's own user (a person's supervisor): the kernel's own check, groups and
    /// ACLs included.
    Ourselves,
    /// The user sandboxd, as root, switches to: no supplementary groups.
    User { uid: u32, gid: u32 },
}

impl SystemView {
    /// The view for one launch. A secret is masked only when the launch's user could
    /// open it: one it cannot open (`/etc/shadow` for anyone but root and the shadow
    /// group) stays unreadable inside without a mount, and every mount costs bubblewrap
    /// a pass over the mount table on each launch. Whenever it cannot tell, it masks.
    pub fn for_reader(&self, reader: Reader) -> SystemView {
        SystemView {
            entries: self.entries.clone(),
            secret_files: self.secret_files.iter().filter(|p| could_open(p, false, reader)).cloned().collect(),
            secret_dirs: self.secret_dirs.iter().filter(|p| could_open(p, true, reader)).cloned().collect(),
        }
    }
}

fn could_open(path: &Path, dir: bool, reader: Reader) -> bool {
    use nix::unistd::{AccessFlags, access};
    use std::os::unix::fs::MetadataExt;
    match reader {
        Reader::Ourselves => {
            access(path, AccessFlags::R_OK).is_ok() || (dir && access(path, AccessFlags::X_OK).is_ok())
        }
        Reader::User { uid, gid } => match std::fs::metadata(path) {
            Ok(m) => permits(m.mode(), m.uid(), m.gid(), uid, gid, dir) || has_acl(path),
            Err(_) => true,
        },
    }
}

/// Whether the mode bits let `uid`/`gid` (no other groups) read a file, or read or
/// search a directory. An ACL's named entries are bounded by the group bits (its
/// mask), which is why a file with an ACL is judged by [`has_acl`] as well.
pub fn permits(mode: u32, owner: u32, group: u32, uid: u32, gid: u32, dir: bool) -> bool {
    if uid == 0 {
        return true;
    }
    let bits = if uid == owner {
        mode >> 6
    } else if gid == group {
        mode >> 3
    } else {
        mode
    } & 0o7;
    bits & if dir { 0o5 } else { 0o4 } != 0
}

/// A POSIX access ACL may grant a user or group more than the owner/group/other
/// classes say: present, or impossible to tell, counts as yes.
fn has_acl(path: &Path) -> bool {
    use rustix::io::Errno;
    #[cfg(target_os = "linux")]
    const ABSENT: Errno = Errno::NODATA;
    #[cfg(not(target_os = "linux"))]
    const ABSENT: Errno = Errno::NOATTR;
    match rustix::fs::getxattr(path, "system.posix_acl_access", &mut [0u8; 0][..]) {
        Ok(_) => true,
        Err(e) => e != ABSENT && e != Errno::NOTSUP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_bits_decide_for_a_switched_user() {
        // /etc/shadow: 0640 root:shadow.
        assert!(!permits(0o640, 0, 42, 65534, 65534, false));
        assert!(permits(0o640, 0, 42, 1000, 42, false));
        assert!(permits(0o640, 0, 42, 0, 0, false), "root reads everything");
        // The owner class decides for the owner, even when it is the narrower one.
        assert!(!permits(0o044, 1000, 1000, 1000, 1000, false));
        assert!(permits(0o444, 0, 0, 65534, 65534, false));
        // A directory it may only search is still one whose known names it can open.
        assert!(permits(0o711, 0, 0, 65534, 65534, true));
        assert!(!permits(0o711, 0, 0, 65534, 65534, false));
        assert!(!permits(0o710, 0, 42, 65534, 65534, true));
        assert!(permits(0o710, 0, 42, 1000, 42, true));
    }

    #[test]
    fn a_secret_the_reader_cannot_open_is_not_masked() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let closed = tmp.path().join("closed");
        let open = tmp.path().join("open");
        let missing = tmp.path().join("missing");
        std::fs::write(&closed, "secret").unwrap();
        std::fs::write(&open, "secret").unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let view = SystemView {
            entries: vec![],
            secret_files: vec![closed.clone(), open.clone(), missing.clone()],
            secret_dirs: vec![tmp.path().to_owned()],
        };
        let me = nix::unistd::geteuid().as_raw();
        let stranger = Reader::User { uid: me.wrapping_add(4242), gid: me.wrapping_add(4242) };
        let masked = view.for_reader(stranger);
        // Unknown (it vanished) counts as could-open: masked.
        assert_eq!(masked.secret_files, vec![open.clone(), missing.clone()]);
        assert!(masked.secret_dirs.is_empty(), "a 0700 directory of someone else's");
        assert_eq!(masked.for_reader(Reader::Ourselves).secret_files.first(), Some(&open));
    }
}
