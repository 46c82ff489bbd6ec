//! Workspaces, registered repositories and conversations in `state.db`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rusqlite::{OptionalExtension, params};

use crate::ids::ConversationId;
use crate::store::{Store, StoreError};
use cc_worktree::Backend;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no {kind} named {name:?}")]
    NotFound { kind: Resource, name: String },
    #[error("{kind} {name:?} already exists")]
    Exists { kind: Resource, name: String },
    #[error("{path} is already registered in workspace {workspace} as {name:?}")]
    PathTaken { path: PathBuf, workspace: String, name: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for RegistryError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(StoreError::Sql(e))
    }
}

/// What the registry keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Workspace,
    Repository,
    Conversation,
    GitHubLink,
    EgressEntry,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::Workspace => "workspace",
            Resource::Repository => "repository",
            Resource::Conversation => "conversation",
            Resource::GitHubLink => "linked GitHub repository",
            Resource::EgressEntry => "network allowlist entry",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub name: String,
    pub created_unix_ms: i64,
    /// GitHub repositories linked to it (OWNER/NAME, lower case, sorted).
    pub linked: Vec<String>,
    /// Its runs' network allowlist entries (canonical, sorted).
    pub egress: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRecord {
    pub workspace: String,
    pub name: String,
    /// As the person gave it, made absolute.
    pub path: PathBuf,
    /// With every symlink resolved.
    pub resolved_path: PathBuf,
    pub created_unix_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationRepo {
    pub name: String,
    pub source_path: PathBuf,
    pub source_resolved: PathBuf,
    /// The copy (or worktree) the agents work in.
    pub path: PathBuf,
    /// git-worktree only: the branch it is on.
    pub branch: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationRecord {
    pub id: ConversationId,
    pub workspace: String,
    pub backend: Backend,
    pub created_unix_ms: i64,
    pub repos: Vec<ConversationRepo>,
}

fn blob(path: &Path) -> &[u8] {
    path.as_os_str().as_bytes()
}

fn path_of(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&bytes))
}

impl Store {
    pub fn create_workspace(&self, name: &str, now: i64) -> Result<Workspace, RegistryError> {
        let conn = self.conn()?;
        let inserted = conn.execute(
            "INSERT INTO workspaces (name, created_unix_ms) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![name, now],
        )?;
        if inserted == 0 {
            return Err(RegistryError::Exists { kind: Resource::Workspace, name: name.to_owned() });
        }
        Ok(Workspace { name: name.to_owned(), created_unix_ms: now, linked: Vec::new(), egress: Vec::new() })
    }

    pub fn workspaces(&self) -> Result<Vec<Workspace>, RegistryError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT name, created_unix_ms FROM workspaces ORDER BY name")?;
        let rows = stmt.query_map([], |r| {
            Ok(Workspace { name: r.get(0)?, created_unix_ms: r.get(1)?, linked: vec![], egress: vec![] })
        })?;
        let mut workspaces: Vec<Workspace> = rows.collect::<Result<_, _>>()?;
        let mut links =
            conn.prepare_cached("SELECT workspace, repository FROM workspace_github_links ORDER BY repository")?;
        for link in links.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (workspace, repository) = link?;
            if let Some(w) = workspaces.iter_mut().find(|w| w.name == workspace) {
                w.linked.push(repository);
            }
        }
        let mut entries = conn.prepare_cached("SELECT workspace, entry FROM workspace_egress ORDER BY entry")?;
        for listed in entries.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (workspace, entry) = listed?;
            if let Some(w) = workspaces.iter_mut().find(|w| w.name == workspace) {
                w.egress.push(entry);
            }
        }
        Ok(workspaces)
    }

    /// Adds `entry` (already checked and canonical) to `workspace`'s network allowlist.
    pub fn add_egress(&self, workspace: &str, entry: &str, now: i64) -> Result<Workspace, RegistryError> {
        self.require_workspace(workspace)?;
        let inserted = self.conn()?.execute(
            "INSERT INTO workspace_egress (workspace, entry, created_unix_ms) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            params![workspace, entry, now],
        )?;
        if inserted == 0 {
            return Err(RegistryError::Exists { kind: Resource::EgressEntry, name: entry.to_owned() });
        }
        self.workspace(workspace)
    }

    pub fn remove_egress(&self, workspace: &str, entry: &str) -> Result<Workspace, RegistryError> {
        self.require_workspace(workspace)?;
        let deleted = self
            .conn()?
            .execute("DELETE FROM workspace_egress WHERE workspace = ?1 AND entry = ?2", params![workspace, entry])?;
        if deleted == 0 {
            return Err(RegistryError::NotFound { kind: Resource::EgressEntry, name: entry.to_owned() });
        }
        self.workspace(workspace)
    }

    pub fn workspace(&self, name: &str) -> Result<Workspace, RegistryError> {
        self.workspaces()?
            .into_iter()
            .find(|w| w.name == name)
            .ok_or_else(|| RegistryError::NotFound { kind: Resource::Workspace, name: name.to_owned() })
    }

    /// Links `repository` (OWNER/NAME, already checked and lower-cased) to `workspace`.
    pub fn link_github(&self, workspace: &str, repository: &str, now: i64) -> Result<Workspace, RegistryError> {
        self.require_workspace(workspace)?;
        let inserted = self.conn()?.execute(
            "INSERT INTO workspace_github_links (workspace, repository, created_unix_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
            params![workspace, repository, now],
        )?;
        if inserted == 0 {
            return Err(RegistryError::Exists { kind: Resource::GitHubLink, name: repository.to_owned() });
        }
        self.workspace(workspace)
    }

    pub fn unlink_github(&self, workspace: &str, repository: &str) -> Result<Workspace, RegistryError> {
        self.require_workspace(workspace)?;
        let deleted = self.conn()?.execute(
            "DELETE FROM workspace_github_links WHERE workspace = ?1 AND repository = ?2",
            params![workspace, repository],
        )?;
        if deleted == 0 {
            return Err(RegistryError::NotFound { kind: Resource::GitHubLink, name: repository.to_owned() });
        }
        self.workspace(workspace)
    }

    pub fn require_workspace(&self, name: &str) -> Result<(), RegistryError> {
        let conn = self.conn()?;
        let found: Option<String> =
            conn.query_row("SELECT name FROM workspaces WHERE name = ?1", [name], |r| r.get(0)).optional()?;
        found.map(|_| ()).ok_or_else(|| RegistryError::NotFound { kind: Resource::Workspace, name: name.to_owned() })
    }

    pub fn add_repo(&self, repo: &RepoRecord) -> Result<(), RegistryError> {
        let conn = self.conn()?;
        let clash: Option<String> = conn
            .query_row(
                "SELECT name FROM repos WHERE workspace = ?1 AND resolved_path = ?2",
                params![repo.workspace, blob(&repo.resolved_path)],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(name) = clash {
            return Err(RegistryError::PathTaken {
                path: repo.resolved_path.clone(),
                workspace: repo.workspace.clone(),
                name,
            });
        }
        let inserted = conn.execute(
            "INSERT INTO repos (workspace, name, path, resolved_path, created_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING",
            params![repo.workspace, repo.name, blob(&repo.path), blob(&repo.resolved_path), repo.created_unix_ms],
        )?;
        if inserted == 0 {
            return Err(RegistryError::Exists { kind: Resource::Repository, name: repo.name.clone() });
        }
        Ok(())
    }

    pub fn repos(&self, workspace: &str) -> Result<Vec<RepoRecord>, RegistryError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT workspace, name, path, resolved_path, created_unix_ms FROM repos WHERE workspace = ?1 ORDER BY name",
        )?;
        let rows = stmt.query_map([workspace], |r| {
            Ok(RepoRecord {
                workspace: r.get(0)?,
                name: r.get(1)?,
                path: path_of(r.get(2)?),
                resolved_path: path_of(r.get(3)?),
                created_unix_ms: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn remove_repo(&self, workspace: &str, name: &str) -> Result<(), RegistryError> {
        let conn = self.conn()?;
        let removed = conn.execute("DELETE FROM repos WHERE workspace = ?1 AND name = ?2", params![workspace, name])?;
        if removed == 0 {
            return Err(RegistryError::NotFound { kind: Resource::Repository, name: name.to_owned() });
        }
        Ok(())
    }

    /// Records a fully provisioned conversation, all of it or nothing.
    pub fn insert_conversation(&self, conversation: &ConversationRecord) -> Result<(), RegistryError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO conversations (id, workspace, backend, created_unix_ms) VALUES (?1, ?2, ?3, ?4)",
            params![
                conversation.id.as_str(),
                conversation.workspace,
                conversation.backend.as_str(),
                conversation.created_unix_ms
            ],
        )?;
        for repo in &conversation.repos {
            tx.execute(
                "INSERT INTO conversation_repos (conversation, repo, source_path, source_resolved, path, branch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    conversation.id.as_str(),
                    repo.name,
                    blob(&repo.source_path),
                    blob(&repo.source_resolved),
                    blob(&repo.path),
                    repo.branch
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every conversation, or those of one workspace, oldest first.
    pub fn conversations(&self, workspace: Option<&str>) -> Result<Vec<ConversationRecord>, RegistryError> {
        let ids: Vec<String> = {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM conversations WHERE ?1 IS NULL OR workspace = ?1 ORDER BY created_unix_ms, id",
            )?;
            let rows = stmt.query_map([workspace], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        // One removed between the two reads is simply not listed.
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            match self.conversation(&ConversationId::from_wire(id.as_str())) {
                Ok(c) => out.push(c),
                Err(RegistryError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord, RegistryError> {
        let conn = self.conn()?;
        let head = conn
            .query_row(
                "SELECT workspace, backend, created_unix_ms FROM conversations WHERE id = ?1",
                [id.as_str()],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)),
            )
            .optional()?;
        let Some((workspace, backend, created_unix_ms)) = head else {
            return Err(RegistryError::NotFound { kind: Resource::Conversation, name: id.chars().take(64).collect() });
        };
        let mut stmt = conn.prepare_cached(
            "SELECT repo, source_path, source_resolved, path, branch FROM conversation_repos
             WHERE conversation = ?1 ORDER BY repo",
        )?;
        let repos = stmt
            .query_map([id.as_str()], |r| {
                Ok(ConversationRepo {
                    name: r.get(0)?,
                    source_path: path_of(r.get(1)?),
                    source_resolved: path_of(r.get(2)?),
                    path: path_of(r.get(3)?),
                    branch: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        // A value this build does not know is the default's, as in the conversation's manifest.
        let backend = backend.parse().unwrap_or_default();
        Ok(ConversationRecord { id: id.clone(), workspace, backend, created_unix_ms, repos })
    }

    pub fn remove_conversation(&self, id: &ConversationId) -> Result<(), RegistryError> {
        let conn = self.conn()?;
        conn.execute("DELETE FROM conversations WHERE id = ?1", [id.as_str()])?;
        Ok(())
    }

    pub fn conversation_exists(&self, id: &ConversationId) -> Result<bool, RegistryError> {
        let conn = self.conn()?;
        Ok(conn.query_row("SELECT 1 FROM conversations WHERE id = ?1", [id.as_str()], |_| Ok(())).optional()?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state.db")).unwrap();
        (tmp, store)
    }

    fn repo(name: &str, path: &str) -> RepoRecord {
        RepoRecord {
            workspace: "default".into(),
            name: name.into(),
            path: path.into(),
            resolved_path: path.into(),
            created_unix_ms: 1,
        }
    }

    #[test]
    fn default_workspace_exists_and_duplicates_are_refused() {
        let (_t, s) = store();
        s.require_workspace("default").unwrap();
        assert!(matches!(s.create_workspace("default", 1), Err(RegistryError::Exists { .. })));
        s.create_workspace("other", 2).unwrap();
        assert_eq!(s.workspaces().unwrap().len(), 2);
        assert!(matches!(s.require_workspace("nope"), Err(RegistryError::NotFound { .. })));
    }

    #[test]
    fn github_repositories_are_linked_once_per_workspace() {
        let (_t, s) = store();
        s.create_workspace("w", 1).unwrap();
        assert_eq!(s.link_github("w", "o/b", 2).unwrap().linked, ["o/b"]);
        assert_eq!(s.link_github("w", "o/a", 3).unwrap().linked, ["o/a", "o/b"]);
        assert!(matches!(s.link_github("w", "o/a", 4), Err(RegistryError::Exists { kind: Resource::GitHubLink, .. })));
        assert!(s.link_github("default", "o/a", 5).is_ok(), "another workspace may link it too");
        assert!(matches!(
            s.link_github("nope", "o/a", 6),
            Err(RegistryError::NotFound { kind: Resource::Workspace, .. })
        ));
        assert_eq!(s.unlink_github("w", "o/b").unwrap().linked, ["o/a"]);
        assert!(matches!(s.unlink_github("w", "o/b"), Err(RegistryError::NotFound { kind: Resource::GitHubLink, .. })));
        let all = s.workspaces().unwrap();
        assert_eq!(
            all.iter().map(|w| (w.name.as_str(), w.linked.len())).collect::<Vec<_>>(),
            [("default", 1), ("w", 1)]
        );
    }

    #[test]
    fn repos_are_unique_by_name_and_by_path() {
        let (_t, s) = store();
        s.add_repo(&repo("a", "/src/a")).unwrap();
        assert!(matches!(s.add_repo(&repo("a", "/src/b")), Err(RegistryError::Exists { .. })));
        assert!(matches!(s.add_repo(&repo("b", "/src/a")), Err(RegistryError::PathTaken { .. })));
        let mut bad_ws = repo("c", "/src/c");
        bad_ws.workspace = "nope".into();
        assert!(s.add_repo(&bad_ws).is_err(), "foreign key");
        s.remove_repo("default", "a").unwrap();
        assert!(matches!(s.remove_repo("default", "a"), Err(RegistryError::NotFound { .. })));
    }

    #[test]
    fn non_utf8_paths_survive() {
        let (_t, s) = store();
        let weird = PathBuf::from(OsStr::from_bytes(b"/src/\xff\xfe name"));
        let mut r = repo("w", "/x");
        r.path = weird.clone();
        r.resolved_path = weird.clone();
        s.add_repo(&r).unwrap();
        assert_eq!(s.repos("default").unwrap()[0].path, weird);
    }

    #[test]
    fn conversations_round_trip_and_cascade() {
        let (_t, s) = store();
        let c = ConversationRecord {
            id: ConversationId::from_wire("c1"),
            workspace: "default".into(),
            backend: Backend::Copy,
            created_unix_ms: 5,
            repos: vec![ConversationRepo {
                name: "a".into(),
                source_path: "/src/a".into(),
                source_resolved: "/src/a".into(),
                path: "/d/conversations/c1/repos/a".into(),
                branch: None,
            }],
        };
        s.insert_conversation(&c).unwrap();
        assert_eq!(s.conversation(&ConversationId::from_wire("c1")).unwrap(), c);
        assert_eq!(s.conversations(Some("default")).unwrap(), vec![c.clone()]);
        assert!(s.conversations(Some("other")).unwrap().is_empty());
        assert!(s.insert_conversation(&c).is_err(), "the same id twice");
        s.remove_conversation(&ConversationId::from_wire("c1")).unwrap();
        assert!(!s.conversation_exists(&ConversationId::from_wire("c1")).unwrap());
        let left: i64 =
            s.conn().unwrap().query_row("SELECT count(*) FROM conversation_repos", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0);
    }
}
