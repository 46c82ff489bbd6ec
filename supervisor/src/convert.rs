//! Between the registry's records and the wire, and errors to gRPC statuses.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cc_proto::supervisor::v1 as pb;
use tonic::Status;

use crate::conversations::ConversationError;
use crate::registry::{ConversationRecord, RegistryError, RepoRecord, Workspace};
use crate::worktree::Backend;

pub fn path_bytes(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().to_vec()
}

pub fn bytes_path(bytes: &[u8]) -> Result<PathBuf, Status> {
    if bytes.contains(&0) {
        return Err(Status::invalid_argument("a path may not contain a NUL byte"));
    }
    if bytes.len() > 4096 {
        return Err(Status::invalid_argument("a path may not be longer than 4096 bytes"));
    }
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// "" is the default workspace.
pub fn workspace_or_default(name: &str) -> &str {
    if name.is_empty() { "default" } else { name }
}

pub fn backend(value: i32) -> Result<Backend, Status> {
    match pb::WorktreeBackend::try_from(value) {
        Ok(pb::WorktreeBackend::Unspecified | pb::WorktreeBackend::Reflink) => Ok(Backend::Reflink),
        Ok(pb::WorktreeBackend::Copy) => Ok(Backend::Copy),
        Ok(pb::WorktreeBackend::GitWorktree) => Ok(Backend::GitWorktree),
        Err(_) => Err(Status::invalid_argument(format!("unknown worktree backend {value}"))),
    }
}

pub fn workspace(w: Workspace) -> pb::Workspace {
    pb::Workspace { name: w.name, created_unix_ms: w.created_unix_ms }
}

pub fn repo(r: RepoRecord) -> pb::Repo {
    pb::Repo {
        workspace: r.workspace,
        name: r.name,
        path: path_bytes(&r.path),
        resolved_path: path_bytes(&r.resolved_path),
        created_unix_ms: r.created_unix_ms,
    }
}

pub fn conversation(c: ConversationRecord) -> pb::Conversation {
    pb::Conversation {
        id: c.id,
        workspace: c.workspace,
        backend: c.backend,
        created_unix_ms: c.created_unix_ms,
        repos: c
            .repos
            .into_iter()
            .map(|r| pb::ConversationRepo {
                name: r.name,
                source_path: path_bytes(&r.source_path),
                source_resolved: path_bytes(&r.source_resolved),
                path: path_bytes(&r.path),
                branch: r.branch.unwrap_or_default(),
            })
            .collect(),
    }
}

impl From<ConversationError> for Status {
    fn from(e: ConversationError) -> Status {
        let message = e.to_string();
        match e {
            ConversationError::InvalidName(_) | ConversationError::InvalidPath(_) | ConversationError::NoRepos => {
                Status::invalid_argument(message)
            }
            ConversationError::Registry(RegistryError::NotFound { .. }) => Status::not_found(message),
            ConversationError::Registry(RegistryError::Exists { .. } | RegistryError::PathTaken { .. }) => {
                Status::already_exists(message)
            }
            ConversationError::Registry(RegistryError::Store(_)) => Status::internal(message),
            ConversationError::Provision { .. } => Status::failed_precondition(message),
            ConversationError::Io { .. } => Status::internal(message),
        }
    }
}
