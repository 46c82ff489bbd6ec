//! Registering checkouts and provisioning conversations (DESIGN.md §3, §4).
//!
//! A conversation is made whole or not at all: its directory is filled first, with a
//! manifest saying what is being made, and its row is written only once every
//! repository is in place. A failure removes what was made; a supervisor that died
//! half-way leaves a directory with a manifest and no row, which the next start sweeps.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cc_proto::helper::unix_ms;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::events::EventLog;
use crate::ids::ConversationId;
use crate::names;
use crate::paths::DataDir;
use crate::registry::{ConversationRecord, ConversationRepo, RegistryError, RepoRecord, Workspace};
use crate::store::Store;
use cc_worktree::{self as worktree, Backend, CloneMode, TreeEvent, WorktreeError};

/// Written first into a conversation directory, removed once the row exists.
const MANIFEST: &str = ".provisioning.json";
/// A conversation being removed is renamed to this prefix and its id first.
const TRASH_PREFIX: &str = ".trash-";

#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    #[error(transparent)]
    InvalidName(#[from] crate::names::NameError),
    #[error(transparent)]
    Id(#[from] crate::ids::MintError),
    #[error("{0}")]
    InvalidPath(String),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("cannot provision repository {repo}: {source}")]
    Provision { repo: String, source: WorktreeError },
    #[error("cannot {action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("a conversation needs at least one --repo")]
    NoRepos,
    #[error("network allowlist entry {0}")]
    InvalidEgressEntry(String),
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ConversationError + 'a {
    move |source| ConversationError::Io { action, path: path.to_owned(), source }
}

/// What provisioning reports while it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionEvent {
    Planned { repo: String, files: u64 },
    Progress { repo: String, files_done: u64, files_total: u64 },
    Warning(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    backend: Backend,
    /// (repo name, resolved checkout) — enough to undo a git worktree.
    repos: Vec<(String, PathBuf)>,
}

/// Everything a run's envelope is computed from, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPaths {
    pub agent_work: PathBuf,
    pub agent_config: PathBuf,
    pub repos: PathBuf,
    pub attachments: Option<PathBuf>,
    pub work_dir: PathBuf,
    pub write_deny: Vec<PathBuf>,
    /// git-worktree conversations: each registered repository's git directory, with
    /// this conversation's worktree git directory inside it.
    pub shared_git: Vec<(PathBuf, PathBuf)>,
}

/// The agent's private directories inside a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDirs {
    pub work: PathBuf,
    pub config: PathBuf,
}

pub struct Conversations {
    data: DataDir,
    store: Arc<Store>,
    events: Arc<EventLog>,
}

impl Conversations {
    pub fn new(data: DataDir, store: Arc<Store>, events: Arc<EventLog>) -> Self {
        Self { data, store, events }
    }

    /// `workspaces/<ws>/attachments`, made if missing, which runs (the service user, as
    /// root) read through their envelopes: the modes are set, not left to the umask of
    /// whoever started us. By path, because every directory on it is root's, under the
    /// data directory, and shown to agents read-only: no agent can write any of them.
    pub fn make_attachments_dir(&self, workspace: &str) -> Result<PathBuf, ConversationError> {
        use std::os::unix::fs::PermissionsExt;
        let attachments = self.data.attachments_dir(workspace);
        fs::create_dir_all(&attachments).map_err(io_err("create", &attachments))?;
        let mode = |path: &Path, mode: u32| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err("set the mode of", path))
        };
        if let Some(workspace_dir) = attachments.parent() {
            if let Some(workspaces) = workspace_dir.parent() {
                mode(workspaces, 0o711)?;
            }
            mode(workspace_dir, 0o711)?;
        }
        mode(&attachments, 0o755)?;
        Ok(attachments)
    }

    pub fn create_workspace(&self, name: &str) -> Result<Workspace, ConversationError> {
        names::check("workspace", name).map_err(ConversationError::InvalidName)?;
        // The directory first (creating it again is harmless), so that a failure never
        // leaves a workspace row without its directory.
        self.make_attachments_dir(name)?;
        let workspace = self.store.create_workspace(name, now())?;
        self.events.record("workspace_created", &format!("workspace:{name}"), json!({}));
        Ok(workspace)
    }

    pub fn workspaces(&self) -> Result<Vec<Workspace>, ConversationError> {
        Ok(self.store.workspaces()?)
    }

    /// Links a GitHub repository to a workspace (see [`github_repository`]).
    pub fn link_github_repository(&self, workspace: &str, repository: &str) -> Result<Workspace, ConversationError> {
        let repository = names::github_repository(repository).map_err(ConversationError::InvalidName)?;
        let linked = self.store.link_github(workspace, &repository, now())?;
        self.events.record(
            "github_repository_linked",
            &format!("workspace:{workspace}"),
            json!({ "github_repository": repository }),
        );
        Ok(linked)
    }

    pub fn unlink_github_repository(&self, workspace: &str, repository: &str) -> Result<Workspace, ConversationError> {
        let repository = names::github_repository(repository).map_err(ConversationError::InvalidName)?;
        let unlinked = self.store.unlink_github(workspace, &repository)?;
        self.events.record(
            "github_repository_unlinked",
            &format!("workspace:{workspace}"),
            json!({ "github_repository": repository }),
        );
        Ok(unlinked)
    }

    /// Adds an entry to a workspace's network allowlist, in its canonical spelling.
    pub fn add_egress_entry(&self, workspace: &str, entry: &str) -> Result<Workspace, ConversationError> {
        let entry = canonical_egress_entry(entry)?;
        let added = self.store.add_egress(workspace, &entry, now())?;
        self.events.record("egress_entry_added", &format!("workspace:{workspace}"), json!({ "entry": entry }));
        Ok(added)
    }

    pub fn remove_egress_entry(&self, workspace: &str, entry: &str) -> Result<Workspace, ConversationError> {
        let entry = canonical_egress_entry(entry)?;
        let removed = self.store.remove_egress(workspace, &entry)?;
        self.events.record("egress_entry_removed", &format!("workspace:{workspace}"), json!({ "entry": entry }));
        Ok(removed)
    }

    /// Registers a checkout. `path` must be absolute (the client resolves its own
    /// working directory); it is recorded as given and with every symlink resolved.
    pub fn add_repo(&self, workspace: &str, path: &Path, name: Option<&str>) -> Result<RepoRecord, ConversationError> {
        self.store.require_workspace(workspace)?;
        if !path.is_absolute() {
            return Err(ConversationError::InvalidPath(format!("{} is not an absolute path", path.display())));
        }
        let literal = std::path::absolute(path).map_err(io_err("resolve", path))?;
        let resolved = fs::canonicalize(&literal).map_err(io_err("resolve", &literal))?;
        if !resolved.is_dir() {
            return Err(ConversationError::InvalidPath(format!("{} is not a directory", literal.display())));
        }
        match git2::Repository::open(&resolved) {
            Ok(repo) if repo.is_bare() => {
                return Err(ConversationError::InvalidPath(format!(
                    "{} is a bare repository: register a checkout",
                    literal.display()
                )));
            }
            Ok(repo) if repo.workdir().and_then(|w| fs::canonicalize(w).ok()).as_deref() != Some(&resolved) => {
                return Err(ConversationError::InvalidPath(format!(
                    "{} is inside a git checkout but not its top level: register the top level",
                    literal.display()
                )));
            }
            Ok(_) => worktree::check_git_dir(&resolved).map_err(ConversationError::InvalidPath)?,
            Err(_) if git2::Repository::discover(&resolved).is_ok() => {
                return Err(ConversationError::InvalidPath(format!(
                    "{} is inside a git checkout but not its top level: register the top level",
                    literal.display()
                )));
            }
            Err(_) => {
                return Err(ConversationError::InvalidPath(format!("{} is not a git checkout", literal.display())));
            }
        }
        let data_root = fs::canonicalize(self.data.root()).map_err(io_err("resolve", self.data.root()))?;
        if data_root.starts_with(&resolved) {
            return Err(ConversationError::InvalidPath(format!(
                "the data dir {} is inside {}: a copy would contain itself; move the data dir out",
                data_root.display(),
                literal.display()
            )));
        }
        if resolved.starts_with(&data_root) {
            return Err(ConversationError::InvalidPath(format!(
                "{} is inside the data dir: register the person's checkout, not a copy",
                literal.display()
            )));
        }
        let name = match name {
            Some(n) => n.to_owned(),
            None => resolved.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        names::check("repository", &name).map_err(ConversationError::InvalidName)?;
        let record = RepoRecord {
            workspace: workspace.to_owned(),
            name,
            path: literal,
            resolved_path: resolved,
            created_unix_ms: now(),
        };
        self.store.add_repo(&record)?;
        self.events.record(
            "repo_added",
            &format!("repo:{workspace}/{}", record.name),
            json!({ "path": record.path.to_string_lossy(), "resolved": record.resolved_path.to_string_lossy() }),
        );
        Ok(record)
    }

    pub fn repos(&self, workspace: &str) -> Result<Vec<RepoRecord>, ConversationError> {
        self.store.require_workspace(workspace)?;
        Ok(self.store.repos(workspace)?)
    }

    /// Unregisters a checkout. Nothing on disk is touched, and existing conversations
    /// keep their copies (and keep it in their write-deny set).
    pub fn remove_repo(&self, workspace: &str, name: &str) -> Result<(), ConversationError> {
        self.store.remove_repo(workspace, name)?;
        self.events.record("repo_removed", &format!("repo:{workspace}/{name}"), json!({}));
        Ok(())
    }

    /// Provisions a new conversation with a copy of each named repository.
    pub fn create(
        &self,
        workspace: &str,
        repo_names: &[String],
        backend: Backend,
        progress: &(dyn Fn(ProvisionEvent) + Sync),
    ) -> Result<ConversationRecord, ConversationError> {
        self.store.require_workspace(workspace)?;
        if repo_names.is_empty() {
            return Err(ConversationError::NoRepos);
        }
        let registered = self.store.repos(workspace)?;
        let mut repos: Vec<&RepoRecord> = Vec::new();
        for name in repo_names {
            let repo = registered.iter().find(|r| &r.name == name).ok_or_else(|| RegistryError::NotFound {
                kind: crate::registry::Resource::Repository,
                name: name.chars().take(64).collect(),
            })?;
            if !repos.iter().any(|r| r.name == repo.name) {
                repos.push(repo);
            }
        }
        if backend == Backend::GitWorktree {
            progress(ProvisionEvent::Warning(worktree::GIT_WORKTREE_WARNING.into()));
        }

        let id = new_id()?;
        let conversations = self.data.conversations_dir();
        fs::create_dir_all(&conversations).map_err(io_err("create", &conversations))?;
        let dir = self.data.conversation_dir(&id);
        let repos_dir = dir.join("repos");
        fs::create_dir(&dir).map_err(io_err("create", &dir))?;
        let result = self.fill(&id, &dir, &repos_dir, &repos, backend, progress);
        let record = match result {
            Ok(repos) => ConversationRecord {
                id: id.clone(),
                workspace: workspace.to_owned(),
                backend,
                created_unix_ms: now(),
                repos,
            },
            Err(e) => {
                undo(&dir, &id, backend, repos.iter().map(|r| (r.name.clone(), r.resolved_path.clone())));
                return Err(e);
            }
        };
        if let Err(e) = self.store.insert_conversation(&record) {
            undo(&dir, &id, backend, repos.iter().map(|r| (r.name.clone(), r.resolved_path.clone())));
            return Err(e.into());
        }
        let _ = fs::remove_file(dir.join(MANIFEST));
        self.events.record(
            "conversation_created",
            &format!("conversation:{id}"),
            json!({ "workspace": workspace, "backend": backend.as_str(), "repos": repo_names }),
        );
        Ok(record)
    }

    fn fill(
        &self,
        id: &str,
        dir: &Path,
        repos_dir: &Path,
        repos: &[&RepoRecord],
        backend: Backend,
        progress: &(dyn Fn(ProvisionEvent) + Sync),
    ) -> Result<Vec<ConversationRepo>, ConversationError> {
        let manifest =
            Manifest { backend, repos: repos.iter().map(|r| (r.name.clone(), r.resolved_path.clone())).collect() };
        let manifest_path = dir.join(MANIFEST);
        fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap_or_default())
            .map_err(io_err("write", &manifest_path))?;
        fs::create_dir(repos_dir).map_err(io_err("create", repos_dir))?;

        // Every check before any copy: a refusal leaves nothing behind. The checkout may
        // have changed since it was registered.
        for repo in repos {
            if backend != Backend::GitWorktree {
                worktree::check_git_dir(&repo.resolved_path).map_err(|message| ConversationError::Provision {
                    repo: repo.name.clone(),
                    source: WorktreeError::Io {
                        action: "copy",
                        path: repo.resolved_path.clone(),
                        source: std::io::Error::other(message),
                    },
                })?;
            }
        }
        if backend == Backend::Reflink {
            for repo in repos {
                worktree::check_reflink(&repo.resolved_path, repos_dir, self.data.root())
                    .map_err(|source| ConversationError::Provision { repo: repo.name.clone(), source })?;
            }
        }
        let mut made = Vec::with_capacity(repos.len());
        for repo in repos {
            let target = repos_dir.join(&repo.name);
            let provision_err = |source| ConversationError::Provision { repo: repo.name.clone(), source };
            let on_tree = |event: TreeEvent| match event {
                TreeEvent::Planned { files } => progress(ProvisionEvent::Planned { repo: repo.name.clone(), files }),
                TreeEvent::Cloned { files_done, files_total } => {
                    progress(ProvisionEvent::Progress { repo: repo.name.clone(), files_done, files_total })
                }
                TreeEvent::Skipped { path, kind } => {
                    progress(ProvisionEvent::Warning(format!("{}: skipped {kind} {}", repo.name, path.display())))
                }
            };
            let clone_started = std::time::Instant::now();
            let branch = match backend {
                Backend::Reflink | Backend::Copy => {
                    let mode = if backend == Backend::Reflink { CloneMode::Reflink } else { CloneMode::Copy };
                    worktree::clone_tree(&repo.resolved_path, &target, mode, service_user(), &on_tree)
                        .map_err(provision_err)?;
                    worktree::verify_clone(&target).map_err(provision_err)?;
                    give_to_service_user(repos_dir, &repo.name, Give::TopOnly).map_err(provision_err)?;
                    None
                }
                Backend::GitWorktree => {
                    let branch =
                        worktree::add_worktree(&repo.resolved_path, &target, id, &repo.name).map_err(provision_err)?;
                    give_to_service_user(repos_dir, &repo.name, Give::Tree).map_err(provision_err)?;
                    // Its index and HEAD live in the registered repository.
                    let git_dir = worktree::worktree_git_dir(&repo.resolved_path, id, &repo.name);
                    let (worktrees, name) =
                        (git_dir.parent().unwrap_or(&git_dir), git_dir.file_name().unwrap_or_default());
                    give_to_service_user(worktrees, &name.to_string_lossy(), Give::Tree).map_err(provision_err)?;
                    Some(branch)
                }
            };
            tracing::info!(
                repo = repo.name,
                backend = backend.as_str(),
                ms = clone_started.elapsed().as_millis() as u64,
                "provisioned"
            );
            made.push(ConversationRepo {
                name: repo.name.clone(),
                source_path: repo.path.clone(),
                source_resolved: repo.resolved_path.clone(),
                path: target,
                branch,
            });
        }
        Ok(made)
    }

    pub fn list(&self, workspace: Option<&str>) -> Result<Vec<ConversationRecord>, ConversationError> {
        if let Some(ws) = workspace {
            self.store.require_workspace(ws)?;
        }
        Ok(self.store.conversations(workspace)?)
    }

    /// Removes the conversation's copies and its row. Never touches a registered
    /// checkout's files: links inside the copies are removed, not followed.
    pub fn remove(&self, id: &ConversationId) -> Result<ConversationRecord, ConversationError> {
        let record = self.store.conversation(id)?;
        let backend = record.backend;
        let dir = self.data.conversation_dir(&record.id);
        // Out of the way in one rename, then the row, then the files: a failure or a crash
        // part-way leaves either the whole conversation or a trash directory that the next
        // start removes, never a registered conversation with half its files.
        let trash = self.data.conversations_dir().join(format!("{TRASH_PREFIX}{}", record.id));
        match fs::rename(&dir, &trash) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &dir)(e)),
        }
        self.store.remove_conversation(&record.id)?;
        worktree::remove_tree(&trash).map_err(io_err("remove", &trash))?;
        if backend == Backend::GitWorktree {
            for repo in &record.repos {
                if let Err(e) = worktree::remove_worktree(&repo.source_resolved, &record.id, &repo.name) {
                    tracing::warn!(conversation = %record.id, repo = repo.name, error = %e, "cannot forget the git worktree");
                }
            }
        }
        self.events.record("conversation_removed", &format!("conversation:{}", record.id), json!({}));
        Ok(record)
    }

    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord, ConversationError> {
        Ok(self.store.conversation(id)?)
    }

    /// What a run of `agent` in `conversation` may touch: its directories, the
    /// conversation's copies (the first is the working directory), the workspace's
    /// attachments, and the registered checkouts, which no envelope may write.
    pub fn run_paths(&self, conversation: &ConversationId, agent: &str) -> Result<RunPaths, ConversationError> {
        let record = self.store.conversation(conversation)?;
        let dirs = self.agent_dirs(&record.id, agent)?;
        let repos = self.data.conversation_dir(&record.id).join("repos");
        let work_dir = record.repos.first().map(|r| r.path.clone()).unwrap_or_else(|| dirs.work.clone());
        let canon = |p: &Path| fs::canonicalize(p).map_err(io_err("resolve", p));
        let attachments = self.data.attachments_dir(&record.workspace);
        Ok(RunPaths {
            agent_work: canon(&dirs.work)?,
            agent_config: canon(&dirs.config)?,
            repos: canon(&repos)?,
            attachments: attachments.is_dir().then(|| canon(&attachments)).transpose()?,
            work_dir: canon(&work_dir)?,
            write_deny: record.repos.iter().flat_map(|r| [r.source_path.clone(), r.source_resolved.clone()]).collect(),
            shared_git: if record.backend == Backend::GitWorktree {
                record
                    .repos
                    .iter()
                    .map(|r| {
                        let common = r.source_resolved.join(".git");
                        (common, worktree::worktree_git_dir(&r.source_resolved, &record.id, &r.name))
                    })
                    .collect()
            } else {
                vec![]
            },
        })
    }

    /// Creates `agents/<agent>/{work,config}` on first use; private to that agent.
    pub fn agent_dirs(&self, conversation: &ConversationId, agent: &str) -> Result<AgentDirs, ConversationError> {
        names::check("agent", agent).map_err(ConversationError::InvalidName)?;
        let record = self.store.conversation(conversation)?;
        let base = self.data.conversation_dir(&record.id).join("agents").join(agent);
        let dirs = AgentDirs { work: base.join("work"), config: base.join("config") };
        for dir in [&dirs.work, &dirs.config] {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_err("create", dir))?;
        }
        // Each level must be a real directory: a link planted by an agent would aim the
        // next run's binds elsewhere.
        for dir in [base.parent().unwrap_or(&base), &base, &dirs.work, &dirs.config] {
            let meta = fs::symlink_metadata(dir).map_err(io_err("inspect", dir))?;
            if !meta.is_dir() {
                return Err(ConversationError::InvalidPath(format!("{} is not a directory of ours", dir.display())));
            }
        }
        Ok(dirs)
    }

    /// Removes what a supervisor that died left behind: conversations being provisioned
    /// (a manifest and no row, or an empty directory) and conversations being removed
    /// (trash). Anything else without a row is left alone and reported: it may be an
    /// agent's work under a restored state.db. Called at start-up, before the API serves.
    pub fn sweep_unfinished(&self) -> Vec<String> {
        let mut swept = Vec::new();
        let Ok(entries) = fs::read_dir(self.data.conversations_dir()) else { return swept };
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            let dir = entry.path();
            if id.starts_with(TRASH_PREFIX) {
                if let Err(e) = worktree::remove_tree(&dir) {
                    tracing::error!(path = %dir.display(), error = %e, "cannot remove a removed conversation's files");
                }
                continue;
            }
            if self.store.conversation_exists(&ConversationId::from_wire(id.as_str())).unwrap_or(true) {
                continue;
            }
            let unfinished = dir.join(MANIFEST).exists() || fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
            if !unfinished {
                tracing::warn!(path = %dir.display(), "a conversation directory with no record and no manifest: left alone");
                continue;
            }
            let manifest: Option<Manifest> =
                fs::read(dir.join(MANIFEST)).ok().and_then(|b| serde_json::from_slice(&b).ok());
            let backend = manifest.as_ref().map(|m| m.backend).unwrap_or_default();
            undo(&dir, &id, backend, manifest.map(|m| m.repos).unwrap_or_default());
            self.events.record("conversation_swept", &format!("conversation:{id}"), json!({ "reason": "unfinished" }));
            swept.push(id);
        }
        swept
    }
}

use std::os::unix::fs::DirBuilderExt;

/// Removes a half-made conversation.
fn undo(dir: &Path, id: &str, backend: Backend, repos: impl IntoIterator<Item = (String, PathBuf)>) {
    if backend == Backend::GitWorktree {
        let _ = worktree::remove_tree(dir);
        for (name, checkout) in repos {
            if let Err(e) = worktree::undo_worktree(&checkout, id, &name) {
                tracing::warn!(conversation = id, repo = name, error = %e, "cannot forget the git worktree");
            }
        }
    }
    if let Err(e) = worktree::remove_tree(dir) {
        tracing::error!(path = %dir.display(), error = %e, "cannot remove an unfinished conversation");
    }
}

fn now() -> i64 {
    unix_ms(SystemTime::now())
}

/// As root, the unprivileged service user that every launch of a conversation's agents
/// runs as (sandboxd launches as the owner of the working directory); otherwise nobody
/// else: what we make is ours.
fn service_user() -> Option<cc_host::ServiceUser> {
    cc_host::ServiceUser::when_root()
}

/// What of a copy is given to the service user after it is made.
enum Give {
    /// Its top and `.git`: [`worktree::clone_tree`] gave the rest as it made it.
    TopOnly,
    /// All of it (a git worktree, and its git directory in the registered repository,
    /// which git wrote as us), by a walk that follows no link ([`worktree::give_tree`]).
    Tree,
}

/// Gives `name` in `dir` to the service user, as root, before any agent process exists:
/// nothing privileged ever walks it once an agent can write it.
fn give_to_service_user(dir: &Path, name: &str, what: Give) -> Result<(), WorktreeError> {
    let Some(owner) = service_user() else { return Ok(()) };
    let handle: std::os::fd::OwnedFd = fs::File::open(dir).map_err(WorktreeError::io("open", dir))?.into();
    let name = std::ffi::OsStr::new(name);
    match what {
        Give::TopOnly => worktree::give_top(&handle, name, owner),
        Give::Tree => worktree::give_tree(&handle, name, owner, 0),
    }
    .map_err(WorktreeError::io("give to the service user", &dir.join(name)))
}

fn new_id() -> Result<ConversationId, crate::ids::MintError> {
    ConversationId::mint()
}

/// An allowlist entry as the proxies read it (`Example.COM.` is `example.com`).
fn canonical_egress_entry(entry: &str) -> Result<String, ConversationError> {
    cc_policy::egress::allowlist::Entry::parse(entry, "workspace")
        .map(|e| e.to_string())
        .map_err(ConversationError::InvalidEgressEntry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn setup() -> (tempfile::TempDir, Conversations, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let data = DataDir::locate(Some(&tmp.path().join("data"))).unwrap();
        data.prepare().unwrap();
        let store = Arc::new(Store::open(&data.state_db()).unwrap());
        let events = Arc::new(EventLog::new(store.clone()));
        let checkout = tmp.path().join("checkout");
        git2::Repository::init(&checkout).unwrap();
        fs::write(checkout.join("file"), "x").unwrap();
        (tmp, Conversations::new(data, store, events), checkout)
    }

    #[test]
    fn agent_dirs_are_private_and_named_safely() {
        let (_tmp, conversations, checkout) = setup();
        conversations.add_repo("default", &checkout, Some("demo")).unwrap();
        let c = conversations.create("default", &["demo".into()], Backend::Copy, &|_| {}).unwrap();
        let dirs = conversations.agent_dirs(&c.id, "coder").unwrap();
        for dir in [&dirs.work, &dirs.config] {
            assert_eq!(fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700);
            assert!(dir.starts_with(conversations.data.conversation_dir(&c.id).join("agents/coder")));
        }
        assert_eq!(conversations.agent_dirs(&c.id, "coder").unwrap(), dirs, "idempotent");
        for bad in ["../other", "", ".hidden", "a/b"] {
            assert!(matches!(conversations.agent_dirs(&c.id, bad), Err(ConversationError::InvalidName(_))), "{bad}");
        }
        assert!(matches!(
            conversations.agent_dirs(&ConversationId::from_wire("c-missing"), "coder"),
            Err(ConversationError::Registry(RegistryError::NotFound { .. }))
        ));
    }

    #[test]
    fn a_duplicate_repo_in_one_request_is_copied_once() {
        let (_tmp, conversations, checkout) = setup();
        conversations.add_repo("default", &checkout, Some("demo")).unwrap();
        let c = conversations.create("default", &["demo".into(), "demo".into()], Backend::Copy, &|_| {}).unwrap();
        assert_eq!(c.repos.len(), 1);
        assert!(matches!(
            conversations.create("default", &[], Backend::Copy, &|_| {}),
            Err(ConversationError::NoRepos)
        ));
    }
}
