//! One supervisor per data directory, enforced by an exclusive `flock` held for the
//! supervisor's lifetime. The kernel drops it when the process dies, however it dies,
//! so a crash never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("data directory {dir} is not writable: {source}; choose another with --data-dir")]
    NotWritable { dir: PathBuf, source: io::Error },
    #[error("another cc-supervisor{} is already running on {dir}; stop it first or choose another --data-dir", holder.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Held { dir: PathBuf, holder: Option<u32> },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: Errno },
}

/// Held while the supervisor runs; dropping it releases the data directory.
#[derive(Debug)]
pub struct DataDirLock {
    _lock: Flock<File>,
}

impl DataDirLock {
    pub fn acquire(lock_path: &Path) -> Result<Self, LockError> {
        let dir = lock_path.parent().unwrap_or(Path::new("/")).to_owned();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // A symlink planted at the lock's path must not make us truncate its target.
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(lock_path)
            .map_err(|source| LockError::NotWritable { dir: dir.clone(), source })?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held { dir, holder: text.trim().parse().ok() });
            }
            Err((_, source)) => return Err(LockError::Lock { path: lock_path.to_owned(), source }),
        };
        // Who holds the lock, for the error the next supervisor prints.
        let write_pid = |f: &mut File| -> io::Result<()> {
            f.set_len(0)?;
            f.rewind()?;
            writeln!(f, "{}", std::process::id())?;
            f.sync_data()
        };
        write_pid(&mut lock).map_err(|source| LockError::NotWritable { dir, source })?;
        Ok(Self { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("supervisor.lock");
        let first = DataDirLock::acquire(&path).unwrap();
        match DataDirLock::acquire(&path) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(&path).unwrap();
    }
}
