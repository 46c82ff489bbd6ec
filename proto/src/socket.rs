//! Unix sockets that only their owner can reach: a 0700 directory we own, a 0600 socket in it.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// `sun_path` holds 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot create socket directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("socket directory {path} is not a directory we own (a symlink or another user's): refusing to use it")]
    UntrustedDir { path: PathBuf },
    #[error(
        "socket path {path} is {len} bytes, over the kernel's limit of {MAX_SOCKET_PATH}: choose a shorter data directory"
    )]
    PathTooLong { path: PathBuf, len: usize },
    #[error("refusing to replace {path}: it exists and is not a socket")]
    NotASocket { path: PathBuf },
    #[error("cannot bind {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
}

/// Creates `dir` (and its parents) and makes sure it is a real directory owned by
/// us with mode 0700. Refuses a symlink or a directory owned by someone else.
pub fn prepare_private_dir(dir: &Path) -> Result<(), SocketError> {
    let create_err = |source| SocketError::CreateDir { path: dir.to_owned(), source };
    fs::create_dir_all(dir).map_err(create_err)?;
    let meta = fs::symlink_metadata(dir).map_err(create_err)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(SocketError::UntrustedDir { path: dir.to_owned() });
    }
    if meta.mode() & 0o777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(create_err)?;
    }
    Ok(())
}

/// Binds a listening socket at `path` with mode 0600. A stale socket left by a
/// previous process is replaced; anything else at that path is not touched.
///
/// The caller must already own the path exclusively (the supervisor holds the
/// data directory lock; a helper is told its path by the supervisor).
pub fn bind_private(path: &Path) -> Result<UnixListener, SocketError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(SocketError::PathTooLong { path: path.to_owned(), len });
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            fs::remove_file(path).map_err(|source| SocketError::Bind { path: path.to_owned(), source })?
        }
        Ok(_) => return Err(SocketError::NotASocket { path: path.to_owned() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(SocketError::Bind { path: path.to_owned(), source }),
    }
    let bind_err = |source| SocketError::Bind { path: path.to_owned(), source };
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    Ok(listener)
}

/// Removes the socket file at `path` once we no longer serve it, unless another
/// process serves it now: a helper of a supervisor that died may stop after its
/// successor's helper has bound the same path, and must not take that socket away.
/// (An inode and its times cannot tell the two files apart: the inode number is
/// reused at once, and change times are as coarse as the kernel's tick.)
pub fn remove_socket_unless_served(path: &Path) {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        tracing::info!(path = %path.display(), "another process serves this socket now: leaving it");
        return;
    }
    remove_socket(path);
}

/// Removes a socket file we bound, ignoring one that is already gone.
pub fn remove_socket(path: &Path) {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if let Err(e) = fs::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove socket");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_0600_in_a_0700_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sock");
        prepare_private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let path = dir.join("a.sock");
        let _listener = bind_private(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    #[tokio::test]
    async fn replaces_a_stale_socket_but_not_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.sock");
        drop(bind_private(&path).unwrap());
        let _again = bind_private(&path).unwrap();

        let file = tmp.path().join("precious");
        fs::write(&file, "keep").unwrap();
        assert!(matches!(bind_private(&file), Err(SocketError::NotASocket { .. })));
        assert_eq!(fs::read_to_string(&file).unwrap(), "keep");
    }

    #[tokio::test]
    async fn a_socket_bound_again_by_a_successor_is_not_removed_by_its_predecessor() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.sock");
        drop(bind_private(&path).unwrap());
        let successor = bind_private(&path).unwrap();
        remove_socket_unless_served(&path);
        assert!(path.exists(), "the successor's socket was removed");
        drop(successor);
        remove_socket_unless_served(&path);
        assert!(!path.exists(), "a socket nobody serves is removed");
    }

    #[test]
    fn refuses_a_symlinked_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(prepare_private_dir(&link), Err(SocketError::UntrustedDir { .. })));
    }

    #[tokio::test]
    async fn refuses_an_overlong_path() {
        let path = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        assert!(matches!(bind_private(&path), Err(SocketError::PathTooLong { .. })));
    }
}
