//! Filesystems of the tests' own: loopback btrfs, xfs (reflink=1) and ext4 images,
//! and tmpfs, mounted as root and unmounted on drop. Sparse, so they cost little.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Mount {
    pub path: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Mount {
    /// `kind`: "btrfs", "xfs", "ext4" or "tmpfs". `None` when not root and privileged
    /// tests may be skipped (see [`crate::privileged`]).
    pub fn new(kind: &str, size_mb: u64) -> Option<Self> {
        if !crate::privileged(&format!("mounting a {kind} filesystem")) {
            return None;
        }
        let tmp = tempfile::Builder::new().prefix("cc-fs-").tempdir().expect("tempdir");
        let path = tmp.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        if kind == "tmpfs" {
            run(Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"]).arg(&path));
        } else {
            let image = tmp.path().join(format!("{kind}.img"));
            let file = std::fs::File::create(&image).unwrap();
            file.set_len(size_mb * 1024 * 1024).unwrap();
            drop(file);
            match kind {
                "btrfs" => run(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&image)),
                "xfs" => run(Command::new("mkfs.xfs").args(["-q", "-f", "-m", "reflink=1"]).arg(&image)),
                "ext4" => run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image)),
                other => panic!("unknown filesystem {other}"),
            }
            run(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&path));
        }
        Some(Self { path, _tmp: tmp })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs git with a fixed identity and no user or system configuration. The test is
/// the person here, looking into copies that (as root) belong to the service user.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.invalid", "-c", "init.defaultBranch=main"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A checkout with what real ones have: history, a branch, untracked and ignored files,
/// symlinks (inside, outside, dangling), an executable, and a file big enough to span
/// several extents.
pub fn make_checkout(root: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(root.join("src/nested")).unwrap();
    git(root, &["init", "-q"]);
    std::fs::write(root.join("README.md"), "# demo\n").unwrap();
    std::fs::write(root.join("src/nested/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "first"]);
    std::fs::write(root.join("big.bin"), (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect::<Vec<_>>()).unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "second"]);
    git(root, &["branch", "feature"]);
    std::fs::write(root.join("untracked.txt"), "not added\n").unwrap();
    std::fs::write(root.join("build.log"), "ignored\n").unwrap();
    std::os::unix::fs::symlink("README.md", root.join("link-inside")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("link-outside")).unwrap();
    std::os::unix::fs::symlink("nowhere/at/all", root.join("link-dangling")).unwrap();
    root.to_owned()
}

/// Every entry below `root` (not following links): relative path → kind, mode, content
/// or link target, and mtime to the nanosecond. Two equal snapshots are equal trees.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false).min_depth(1) {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        let rel = entry.path().strip_prefix(root).unwrap().to_owned();
        let kind = meta.file_type();
        let mtime = format!("{}.{:09}", meta.mtime(), meta.mtime_nsec());
        let value = if kind.is_symlink() {
            format!("link {} mtime {mtime}", std::fs::read_link(entry.path()).unwrap().display())
        } else if kind.is_dir() {
            format!("dir {:o} mtime {mtime}", meta.mode() & 0o7777)
        } else {
            let content = std::fs::read(entry.path()).unwrap();
            format!("file {:o} {} {:x} mtime {mtime}", meta.mode() & 0o7777, content.len(), fnv(&content))
        };
        out.insert(rel, value);
    }
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100000001b3))
}
