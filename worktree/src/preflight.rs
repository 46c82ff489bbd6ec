//! Before anything is written: is the data directory on the checkout's volume, and can
//! that filesystem actually reflink? The second is answered by trying, inside the data
//! directory, never by guessing from the filesystem's name and never in the checkout.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::WorktreeError;

/// Fails with the cause and the fixes unless files under `checkout` can be reflinked
/// into `target_dir` (an existing directory in the data dir, which `data_dir` names in
/// messages). The probe clones a real file of the checkout (its `.git/HEAD`, read only)
/// when there is one, so that a lower overlayfs layer or a NOCOW file is caught too.
pub fn check_reflink(checkout: &Path, target_dir: &Path, data_dir: &Path) -> Result<(), WorktreeError> {
    let source_dev = fs::metadata(checkout).map_err(WorktreeError::io("inspect", checkout))?.dev();
    let target_dev = fs::metadata(target_dir).map_err(WorktreeError::io("inspect", target_dir))?.dev();
    if source_dev != target_dev {
        return Err(WorktreeError::OtherVolume { data_dir: data_dir.to_owned(), checkout: checkout.to_owned() });
    }
    let probe = target_dir.join(format!(".reflink-probe-{}", std::process::id()));
    let clone = probe.with_extension("clone");
    let real = checkout.join(".git/HEAD");
    let result = (|| {
        if fs::symlink_metadata(&real).is_ok_and(|m| m.is_file()) {
            return reflink_copy::reflink(&real, &clone);
        }
        let mut file = OpenOptions::new().write(true).create_new(true).open(&probe)?;
        // More than one block, so that no filesystem keeps it inline.
        file.write_all(&[0x5a; 8192])?;
        drop(file);
        reflink_copy::reflink(&probe, &clone)
    })();
    let _ = fs::remove_file(&probe);
    let _ = fs::remove_file(&clone);
    result.map_err(|source| WorktreeError::CannotReflink {
        fs: filesystem_name(checkout),
        checkout: checkout.to_owned(),
        source,
    })
}

/// `ext4`, `btrfs`, `xfs`, … for messages; the magic number in hex when unknown.
pub fn filesystem_name(path: &Path) -> String {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::statfs::*;
        let Ok(stat) = statfs(path) else { return "unknown".into() };
        let kind = stat.filesystem_type();
        let known = [
            (EXT4_SUPER_MAGIC, "ext4"),
            (BTRFS_SUPER_MAGIC, "btrfs"),
            (XFS_SUPER_MAGIC, "xfs"),
            (TMPFS_MAGIC, "tmpfs"),
            (OVERLAYFS_SUPER_MAGIC, "overlayfs"),
            (NFS_SUPER_MAGIC, "nfs"),
        ];
        known
            .iter()
            .find(|(magic, _)| *magic == kind)
            .map(|(_, name)| (*name).to_owned())
            .unwrap_or_else(|| format!("{:#x}", kind.0))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        "this filesystem".into()
    }
}
