//! Pure reading of what the kernel says about cgroups: `/proc/self/cgroup`,
//! `/proc/self/mountinfo`, and the flat keyed files (`memory.events`, `pids.events`,
//! `cpu.stat`, `memory.oom_control`). No I/O here, so every case is a unit test.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/cgroup`: `ID:CONTROLLERS:PATH`. Controllers are empty for
/// the unified (v2) hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn memberships(proc_self_cgroup: &str) -> Vec<Membership> {
    proc_self_cgroup
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let controllers = controllers.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect();
            Some(Membership { controllers, path: path.to_owned() })
        })
        .collect()
}

/// A cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The hierarchy's directory that is mounted (`/` unless in a cgroup namespace or a
    /// bind of a sub-tree).
    pub root: String,
    pub mount_point: PathBuf,
    /// `cgroup2`, or `cgroup` (v1) with its controllers.
    pub v2: bool,
    pub controllers: Vec<String>,
}

pub fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS
            let (head, tail) = line.split_once(" - ")?;
            let head: Vec<&str> = head.split(' ').collect();
            let tail: Vec<&str> = tail.split(' ').collect();
            let (root, mount_point) = (*head.get(3)?, *head.get(4)?);
            let (fstype, super_options) = (*tail.first()?, tail.get(2).copied().unwrap_or(""));
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            let controllers = if v2 {
                vec![]
            } else {
                super_options
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                    .map(str::to_owned)
                    .collect()
            };
            Some(CgroupMount {
                root: unescape(root),
                mount_point: PathBuf::from(unescape(mount_point)),
                v2,
                controllers,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(digits) = bytes.get(i + 1..i + 4)
            && let Some(value) = std::str::from_utf8(digits).ok().and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(value);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of our cgroup in `mount`'s hierarchy: the mount point plus our path
/// below the mounted root. `None` when our cgroup is outside what is mounted.
pub fn directory(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let below = if mount.root == "/" {
        path.trim_start_matches('/')
    } else {
        path.strip_prefix(mount.root.as_str())?.trim_start_matches('/')
    };
    if below.split('/').any(|part| part == "..") {
        return None;
    }
    Some(if below.is_empty() { mount.mount_point.clone() } else { mount.mount_point.join(below) })
}

/// The value of `key` in a flat keyed file (`KEY VALUE` per line).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A number file (`pids.current`, `memory.current`, `cpuacct.usage`).
pub fn number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Whether `path` names a `cgroup.procs` file under `/sys/fs/cgroup`, with no `..`:
/// what sandboxd accepts to join a launch to.
pub fn is_procs_file(path: &Path) -> bool {
    use std::path::Component;
    path.starts_with("/sys/fs/cgroup")
        && path.file_name().is_some_and(|name| name == "cgroup.procs")
        && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/4c31\n1:cpu:/\n2:cpuacct:/\n0::/\n";

    #[test]
    fn memberships_are_read_per_hierarchy() {
        let m = memberships(HYBRID);
        assert_eq!(m.len(), 6);
        assert_eq!(m[2], Membership { controllers: vec!["memory".into()], path: "/process_api/4c31".into() });
        assert_eq!(m[5], Membership { controllers: vec![], path: "/".into() });
        let joint = memberships("3:cpu,cpuacct:/user.slice\n");
        assert_eq!(joint[0].controllers, vec!["cpu", "cpuacct"]);
        assert!(memberships("garbage\n\n").is_empty());
    }

    #[test]
    fn mounts_of_both_versions_are_found() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
                    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
                    41 31 0:38 /sub /sys/fs/cgroup/unified\\040x rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = cgroup_mounts(info);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].controllers, vec!["memory"]);
        assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(m[1].mount_point, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(
            !m[2].controllers.iter().any(|c| c == "pids" || c == "memory"),
            "a named hierarchy holds no controller"
        );
        assert!(m[3].v2);
        assert_eq!((m[3].root.as_str(), m[3].mount_point.as_path()), ("/sub", Path::new("/sys/fs/cgroup/unified x")));
    }

    #[test]
    fn our_directory_is_below_the_mounted_root() {
        let mount = |root: &str| CgroupMount {
            root: root.into(),
            mount_point: "/sys/fs/cgroup".into(),
            v2: true,
            controllers: vec![],
        };
        assert_eq!(directory(&mount("/"), "/"), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(directory(&mount("/"), "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/a/b")));
        assert_eq!(directory(&mount("/a"), "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/b")));
        assert_eq!(directory(&mount("/x"), "/a/b"), None, "outside what is mounted");
        assert_eq!(directory(&mount("/"), "/a/../../etc"), None);
    }

    #[test]
    fn keyed_files_and_numbers() {
        let events = "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "max"), Some(3));
        assert_eq!(keyed(events, "nope"), None);
        assert_eq!(keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n", "oom_kill"), Some(4));
        assert_eq!(number("12345\n"), Some(12345));
        assert_eq!(number("max\n"), None);
    }

    #[test]
    fn only_cgroup_procs_files_are_joined() {
        assert!(is_procs_file(Path::new("/sys/fs/cgroup/pids/cc-1/r1/cgroup.procs")));
        assert!(!is_procs_file(Path::new("/sys/fs/cgroup/pids/../../etc/cgroup.procs")));
        assert!(!is_procs_file(Path::new("/tmp/cgroup.procs")));
        assert!(!is_procs_file(Path::new("/sys/fs/cgroup/pids/r1/tasks")));
        assert!(!is_procs_file(Path::new("sys/fs/cgroup/pids/cgroup.procs")));
    }
}
