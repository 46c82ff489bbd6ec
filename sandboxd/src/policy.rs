//! A run's policy, as sandboxd keeps it: every path resolved once and checked.
//! Envelopes are computed from this alone; a caller never passes a bind list.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cc_proto::sandboxd::v1 as pb;

use crate::beneath::Identity;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPolicy {
    pub run_id: String,
    pub agent_work: Option<PathBuf>,
    pub agent_config: Option<PathBuf>,
    pub repos: Option<PathBuf>,
    pub attachments: Option<PathBuf>,
    pub work_dir: PathBuf,
    pub write_deny: Vec<PathBuf>,
    pub env: BTreeMap<String, String>,
    /// Loopback port inside the envelope → the run's unix socket on the host.
    pub bridges: BTreeMap<u16, PathBuf>,
    /// The directory of the run's runner socket (the runner kind binds it writable).
    pub runner_socket_dir: Option<PathBuf>,
    /// git-worktree conversations: the shared git directories (see the proto).
    pub shared_git: Vec<SharedGit>,
    /// Each root's device and inode at registration, checked again before every
    /// launch: a root replaced by a symlink (or moved) since is refused. The shared
    /// git directories count as roots here.
    pub identities: Vec<(PathBuf, (u64, u64))>,
    /// What bounds every envelope of the run.
    pub limits: EnvelopeLimits,
}

/// What bounds every envelope of a run (see the proto).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvelopeLimits {
    /// The run's `cgroup.procs` files, each checked to be one under /sys/fs/cgroup.
    pub cgroup_procs: Vec<PathBuf>,
    /// The /tmp and /run tmpfs size; 0: unbounded.
    pub tmp_size_bytes: u64,
    /// RLIMIT_NOFILE; 0: inherited.
    pub open_files_max: u64,
}

/// A git directory that a git-worktree conversation's worktrees share with the
/// registered checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedGit {
    pub common_dir: PathBuf,
    pub worktree_dir: PathBuf,
    /// What git in a worktree must write: the shared objects, refs and logs (those
    /// that exist), and the worktree's own git directory (index, HEAD). Everything
    /// else of the common directory (config, hooks, info, packed-refs) stays read-only.
    pub writable: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("run id {0:?} must be 1 to 64 letters, digits, '-' or '_'")]
    BadRunId(String),
    #[error("{field} {path:?} must be an absolute path without NUL bytes")]
    NotAbsolute { field: &'static str, path: String },
    #[error("{field} {path} does not exist or cannot be resolved: {reason}")]
    Unresolvable { field: &'static str, path: PathBuf, reason: String },
    #[error(
        "{field} {path} goes through a symlink (to {resolved}): give the resolved path; a root is never widened to a link's target"
    )]
    CrossesSymlink { field: &'static str, path: PathBuf, resolved: PathBuf },
    #[error("{field} {path} is not a directory")]
    NotADirectory { field: &'static str, path: PathBuf },
    #[error("work_dir is required")]
    NoWorkDir,
    #[error("bridge port {0} must be between 1024 and 65535, once each")]
    BadPort(u32),
    #[error(
        "bridge socket {0} is not in an existing directory of its own inside the data directory, reached with no link (its directory is what is bound)"
    )]
    BadBridgeDir(PathBuf),
    #[error(
        "{field} {path} is not inside the data directory {data_dir}: sandboxd binds only the run's own directories"
    )]
    OutsideDataDir { field: &'static str, path: PathBuf, data_dir: PathBuf },
    #[error("the run's {path} changed since it was registered (moved or replaced by a link): refusing to launch")]
    Changed { path: PathBuf },
    #[error("shared git directory {worktree} must be a worktree directory of {common} (<common>/worktrees/<name>)")]
    NotAWorktreeOf { common: PathBuf, worktree: PathBuf },
    #[error("cgroup file {0:?} is not a cgroup.procs file under /sys/fs/cgroup")]
    NotACgroup(String),
}

fn path_of(field: &'static str, bytes: &[u8]) -> Result<Option<PathBuf>, PolicyError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let path = Path::new(OsStr::from_bytes(bytes));
    if bytes.contains(&0) || !path.is_absolute() || bytes.len() > 4096 {
        return Err(PolicyError::NotAbsolute {
            field,
            path: String::from_utf8_lossy(bytes).chars().take(200).collect(),
        });
    }
    Ok(Some(path.to_owned()))
}

/// A root that will be bound: a directory reached with no link anywhere on its path
/// (so that a symlink can never point a bind somewhere else), and its device and inode.
/// Opened by handle, one component at a time: a root may lie inside another that the
/// agent writes (the working directory inside `repos/`).
fn bind_root(field: &'static str, bytes: &[u8]) -> Result<Option<(PathBuf, Identity)>, PolicyError> {
    use nix::errno::Errno;
    let Some(path) = path_of(field, bytes)? else { return Ok(None) };
    match crate::beneath::open_dir_no_links(&path) {
        Ok(dir) => {
            let id = crate::beneath::identity(&dir)
                .ok_or_else(|| PolicyError::NotADirectory { field, path: path.clone() })?;
            Ok(Some((path, id)))
        }
        // A link on the way, or something that is not a directory: which one, and where
        // the link leads, is read from the parent's handle (a link further up leads
        // nowhere we say).
        Err(Errno::ELOOP | Errno::EINVAL | Errno::ENOTDIR) => {
            let last = path.file_name().map(std::ffi::OsStr::to_owned).unwrap_or_default();
            let parent = path.parent().and_then(|p| crate::beneath::open_dir_no_links(p).ok());
            match parent.as_ref().map(|dir| (dir, crate::beneath::entry_at(dir, &last))) {
                Some((_, Ok(crate::beneath::Entry::Other))) => Err(PolicyError::NotADirectory { field, path }),
                Some((dir, _)) => {
                    let resolved = nix::fcntl::readlinkat(dir, last.as_os_str()).map(PathBuf::from).unwrap_or_default();
                    Err(PolicyError::CrossesSymlink { field, path, resolved })
                }
                None => Err(PolicyError::CrossesSymlink { field, path, resolved: PathBuf::new() }),
            }
        }
        Err(e) => Err(PolicyError::Unresolvable { field, path, reason: e.desc().to_owned() }),
    }
}

impl RunPolicy {
    /// Every root must lie inside `data_dir` (canonical), where the supervisor keeps
    /// the run's directories.
    pub fn from_proto(p: &pb::RunPolicy, data_dir: &Path) -> Result<Self, PolicyError> {
        let id_ok = !p.run_id.is_empty()
            && p.run_id.len() <= 64
            && p.run_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !id_ok {
            return Err(PolicyError::BadRunId(p.run_id.chars().take(64).collect()));
        }
        let mut write_deny = Vec::new();
        for bytes in &p.write_deny {
            // Both spellings: the path as given, and resolved.
            if let Some(path) = path_of("write_deny", bytes)? {
                if let Ok(resolved) = std::fs::canonicalize(&path)
                    && resolved != path
                {
                    write_deny.push(resolved);
                }
                write_deny.push(path);
            }
        }
        let mut bridges = BTreeMap::new();
        for bridge in &p.bridges {
            let port =
                u16::try_from(bridge.port).ok().filter(|p| *p >= 1024).ok_or(PolicyError::BadPort(bridge.port))?;
            let socket = path_of("bridge socket", &bridge.socket)?.ok_or(PolicyError::BadPort(bridge.port))?;
            // The directory is bound, not the socket: the helper that serves it may
            // make it again after a restart (or only after this), and the envelope
            // must see the new one. So the directory must be there, a real one inside
            // the data directory, reached by handle with no link on its path.
            let dir = socket.parent().filter(|_| socket.file_name().is_some());
            let dir = dir.ok_or_else(|| PolicyError::BadBridgeDir(socket.clone()))?;
            let reached = bind_root("bridge directory", dir.as_os_str().as_bytes())
                .map_err(|_| PolicyError::BadBridgeDir(socket.clone()))?;
            if reached.is_none_or(|(dir, _)| !dir.starts_with(data_dir) || dir == data_dir) {
                return Err(PolicyError::BadBridgeDir(socket));
            }
            if bridges.insert(port, socket).is_some() {
                return Err(PolicyError::BadPort(bridge.port));
            }
        }
        let mut identities = Vec::new();
        // Outside the data directory by nature (the person's repository), so not
        // through `root`; no link on the way all the same, and each a worktree of its own.
        let mut shared_git = Vec::new();
        for shared in &p.shared_git {
            let missing = |field| PolicyError::NotAbsolute { field, path: String::new() };
            let (common_dir, id) = bind_root("shared git dir", &shared.common_dir)?.ok_or(missing("shared git dir"))?;
            let (worktree_dir, _) =
                bind_root("shared worktree dir", &shared.worktree_dir)?.ok_or(missing("shared worktree dir"))?;
            if worktree_dir.parent() != Some(&common_dir.join("worktrees")) {
                return Err(PolicyError::NotAWorktreeOf { common: common_dir, worktree: worktree_dir });
            }
            // Looked at through the directory's handle: never through a link.
            let common = crate::beneath::open_dir_no_links(&common_dir).map_err(|e| PolicyError::Unresolvable {
                field: "shared git dir",
                path: common_dir.clone(),
                reason: e.desc().to_owned(),
            })?;
            let mut writable: Vec<PathBuf> = ["objects", "refs", "logs"]
                .iter()
                .filter(|d| {
                    crate::beneath::entry_at(&common, std::ffi::OsStr::new(d)) == Ok(crate::beneath::Entry::Dir)
                })
                .map(|d| common_dir.join(d))
                .collect();
            writable.push(worktree_dir.clone());
            identities.push((common_dir.clone(), id));
            shared_git.push(SharedGit { common_dir, worktree_dir, writable });
        }
        let mut root = |field: &'static str, bytes: &[u8]| -> Result<Option<PathBuf>, PolicyError> {
            let Some((path, id)) = bind_root(field, bytes)? else { return Ok(None) };
            // Strictly inside: the data directory itself holds state.db and the sockets.
            if !path.starts_with(data_dir) || path == data_dir {
                return Err(PolicyError::OutsideDataDir { field, path, data_dir: data_dir.to_owned() });
            }
            identities.push((path.clone(), id));
            Ok(Some(path))
        };
        let work_dir = root("work_dir", &p.work_dir)?.ok_or(PolicyError::NoWorkDir)?;
        let limits = p.limits.clone().unwrap_or_default();
        let mut cgroup_procs = Vec::new();
        for bytes in &limits.cgroup_procs {
            let path = Path::new(std::ffi::OsStr::from_bytes(bytes));
            if !cc_host::cgroup::parse::is_procs_file(path) {
                return Err(PolicyError::NotACgroup(String::from_utf8_lossy(bytes).chars().take(200).collect()));
            }
            cgroup_procs.push(path.to_owned());
        }
        let limits = EnvelopeLimits {
            cgroup_procs,
            tmp_size_bytes: limits.tmp_size_bytes,
            open_files_max: limits.open_files_max,
        };
        Ok(Self {
            run_id: p.run_id.clone(),
            bridges,
            agent_work: root("agent_work", &p.agent_work)?,
            agent_config: root("agent_config", &p.agent_config)?,
            repos: root("repos", &p.repos)?,
            attachments: root("attachments", &p.attachments)?,
            runner_socket_dir: root("runner_socket_dir", &p.runner_socket_dir)?,
            work_dir,
            write_deny,
            env: p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            shared_git,
            identities,
            limits,
        })
    }

    /// Before every launch: each root is still the directory that was registered, with
    /// no symlink on its path. (A launch binds the descriptors it opens then, checked
    /// again the same way, so nothing can change between the check and the bind.)
    pub fn verify(&self) -> Result<(), PolicyError> {
        for (path, id) in &self.identities {
            let dir = crate::beneath::open_dir_no_links(path);
            if dir.ok().and_then(|d| crate::beneath::identity(&d)) != Some(*id) {
                return Err(PolicyError::Changed { path: path.clone() });
            }
        }
        Ok(())
    }

    /// HOME inside the envelope: the agent's work dir, else the working directory.
    pub fn home(&self) -> &Path {
        self.agent_work.as_deref().unwrap_or(&self.work_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(work: &Path) -> pb::RunPolicy {
        pb::RunPolicy { run_id: "r1".into(), work_dir: work.as_os_str().as_bytes().to_vec(), ..Default::default() }
    }

    #[test]
    fn resolves_and_checks_roots() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap();
        let p = RunPolicy::from_proto(&proto(&work), work.parent().unwrap()).unwrap();
        assert_eq!(p.work_dir, work);
        assert_eq!(p.home(), work);
        p.verify().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(matches!(
            RunPolicy::from_proto(&proto(&work), &std::fs::canonicalize(elsewhere.path()).unwrap()),
            Err(PolicyError::OutsideDataDir { .. })
        ));
        assert!(matches!(RunPolicy::from_proto(&proto(&work), &work), Err(PolicyError::OutsideDataDir { .. })));

        let link = work.join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        assert!(matches!(
            RunPolicy::from_proto(&proto(&link), Path::new("/")),
            Err(PolicyError::CrossesSymlink { .. })
        ));
        assert!(matches!(
            RunPolicy::from_proto(&proto(Path::new("relative")), Path::new("/")),
            Err(PolicyError::NotAbsolute { .. })
        ));
        assert!(matches!(
            RunPolicy::from_proto(&proto(&work.join("missing")), Path::new("/")),
            Err(PolicyError::Unresolvable { .. })
        ));
        let mut bad = proto(&work);
        bad.work_dir = b"/tmp/a\0b".to_vec();
        assert!(matches!(RunPolicy::from_proto(&bad, Path::new("/")), Err(PolicyError::NotAbsolute { .. })));
        for id in ["", "../x", "a b", &"x".repeat(65)] {
            let mut bad = proto(&work);
            bad.run_id = id.into();
            assert!(matches!(RunPolicy::from_proto(&bad, Path::new("/")), Err(PolicyError::BadRunId(_))), "{id:?}");
        }
    }

    #[test]
    fn a_root_replaced_after_registration_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let work = base.join("work");
        std::fs::create_dir(&work).unwrap();
        let policy = RunPolicy::from_proto(&proto(&work), &base).unwrap();
        std::fs::rename(&work, base.join("moved")).unwrap();
        std::os::unix::fs::symlink("/", &work).unwrap();
        assert!(matches!(policy.verify(), Err(PolicyError::Changed { .. })));
        std::fs::remove_file(&work).unwrap();
        std::fs::create_dir(&work).unwrap();
        assert!(
            matches!(policy.verify(), Err(PolicyError::Changed { .. })),
            "a new directory is not the registered one"
        );
    }

    #[test]
    fn write_deny_keeps_both_spellings() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(work.join("real")).unwrap();
        std::os::unix::fs::symlink(work.join("real"), work.join("alias")).unwrap();
        let mut p = proto(&work);
        p.write_deny = vec![work.join("alias").as_os_str().as_bytes().to_vec()];
        let policy = RunPolicy::from_proto(&p, work.parent().unwrap()).unwrap();
        assert!(policy.write_deny.contains(&work.join("alias")));
        assert!(policy.write_deny.contains(&work.join("real")));
    }
}
