//! The host's read-only system view for envelopes, found once: which system
//! directories exist, which are merged-/usr symlinks, and which secrets under /etc
//! exist and must be masked.

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
