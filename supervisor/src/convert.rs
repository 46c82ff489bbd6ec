//! Between the registry's records and the wire, and the conversations' errors to gRPC
//! statuses: the one place either crosses the RPC edge.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cc_proto::common::v1::WorktreeBackend;
use cc_proto::reasons;
use cc_proto::supervisor::v1 as pb;
use cc_proto::time::timestamp;
use tonic::{Code, Status};

use crate::conversations::ConversationError;
use crate::registry::{ConversationRecord, RegistryError, RepoRecord, Resource, Workspace};
use cc_worktree::{Backend, WorktreeError};

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

/// The worktree backend of a request; unspecified is reflink.
pub fn backend(value: i32) -> Result<Backend, Status> {
    match WorktreeBackend::try_from(value) {
        Ok(WorktreeBackend::Unspecified | WorktreeBackend::Reflink) => Ok(Backend::Reflink),
        Ok(WorktreeBackend::Copy) => Ok(Backend::Copy),
        Ok(WorktreeBackend::GitWorktree) => Ok(Backend::GitWorktree),
        Err(_) => Err(Status::invalid_argument(format!("unknown worktree backend {value}"))),
    }
}

pub fn wire_backend(backend: Backend) -> WorktreeBackend {
    match backend {
        Backend::Reflink => WorktreeBackend::Reflink,
        Backend::Copy => WorktreeBackend::Copy,
        Backend::GitWorktree => WorktreeBackend::GitWorktree,
    }
}

pub fn workspace(w: Workspace) -> pb::Workspace {
    pb::Workspace {
        workspace_id: w.name,
        create_time: Some(timestamp(w.created_unix_ms)),
        linked_github_repositories: w.linked,
        egress_allowlist: w.egress,
    }
}

pub fn repository(r: RepoRecord) -> pb::Repository {
    pb::Repository {
        workspace_id: r.workspace,
        name: r.name,
        path: path_bytes(&r.path),
        resolved_path: path_bytes(&r.resolved_path),
        create_time: Some(timestamp(r.created_unix_ms)),
    }
}

pub fn conversation(c: ConversationRecord) -> pb::Conversation {
    pb::Conversation {
        conversation_id: c.id.into_string(),
        workspace_id: c.workspace,
        backend: wire_backend(c.backend) as i32,
        create_time: Some(timestamp(c.created_unix_ms)),
        repositories: c
            .repos
            .into_iter()
            .map(|r| pb::ConversationRepository {
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
        let refusal = |code, reason, metadata: &[(&str, String)]| reasons::refusal(code, &*message, reason, metadata);
        match e {
            ConversationError::InvalidName(_)
            | ConversationError::InvalidPath(_)
            | ConversationError::NoRepos
            | ConversationError::InvalidEgressEntry(_) => Status::invalid_argument(message),
            ConversationError::Registry(RegistryError::NotFound { kind, name }) => {
                let (reason, key) = match kind {
                    Resource::Workspace => (reasons::WORKSPACE_NOT_FOUND, "workspace_id"),
                    Resource::Repository => (reasons::REPOSITORY_NOT_FOUND, "name"),
                    Resource::Conversation => (reasons::CONVERSATION_NOT_FOUND, "conversation_id"),
                    Resource::GitHubLink => (reasons::LINK_NOT_FOUND, "github_repository"),
                    Resource::EgressEntry => (reasons::NOT_LISTED, "entry"),
                };
                refusal(Code::NotFound, reason, &[(key, name)])
            }
            ConversationError::Registry(RegistryError::Exists { kind: Resource::GitHubLink, name }) => {
                refusal(Code::AlreadyExists, reasons::ALREADY_LINKED, &[("github_repository", name)])
            }
            ConversationError::Registry(RegistryError::Exists { kind: Resource::EgressEntry, name }) => {
                refusal(Code::AlreadyExists, reasons::ALREADY_LISTED, &[("entry", name)])
            }
            ConversationError::Registry(RegistryError::Exists { name, .. }) => {
                refusal(Code::AlreadyExists, reasons::NAME_TAKEN, &[("name", name)])
            }
            ConversationError::Registry(RegistryError::PathTaken { name, .. }) => {
                refusal(Code::AlreadyExists, reasons::ALREADY_REGISTERED, &[("name", name)])
            }
            ConversationError::Registry(RegistryError::Store(_)) => Status::internal(message),
            ConversationError::Provision {
                source: WorktreeError::OtherVolume { checkout, .. } | WorktreeError::CannotReflink { checkout, .. },
                ..
            } => refusal(
                Code::FailedPrecondition,
                reasons::REFLINK_UNSUPPORTED,
                &[("path", checkout.to_string_lossy().into_owned())],
            ),
            ConversationError::Provision { .. } => Status::failed_precondition(message),
            ConversationError::Io { .. } | ConversationError::Id(_) => Status::internal(message),
        }
    }
}
