//! `state.db`: SQLite on disk, WAL, schema migrations in code.
//!
//! Each migration runs once, in a transaction, and `PRAGMA user_version` records how
//! far the file has come. A file from a newer supervisor is refused, not guessed at.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cc_proto::common::v1::Event;
use rusqlite::{Connection, OptionalExtension, params};

/// Migration N brings the schema from version N to N+1. Append; never edit.
const MIGRATIONS: &[&str] = &[
    // 1: the event log.
    "CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time_unix_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        payload TEXT NOT NULL CHECK (json_valid(payload))
    );",
    // 2: workspaces, registered repositories, conversations. Paths are BLOBs: a path
    // is bytes, and a checkout whose name is not UTF-8 is still a checkout.
    "CREATE TABLE workspaces (
        name TEXT PRIMARY KEY,
        created_unix_ms INTEGER NOT NULL
    );
    INSERT INTO workspaces (name, created_unix_ms) VALUES ('default', 0);
    CREATE TABLE repos (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        name TEXT NOT NULL,
        path BLOB NOT NULL,
        resolved_path BLOB NOT NULL,
        created_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, name),
        UNIQUE (workspace, resolved_path)
    );
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        backend TEXT NOT NULL,
        created_unix_ms INTEGER NOT NULL
    );
    CREATE TABLE conversation_repos (
        conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        repo TEXT NOT NULL,
        source_path BLOB NOT NULL,
        source_resolved BLOB NOT NULL,
        path BLOB NOT NULL,
        branch TEXT,
        PRIMARY KEY (conversation, repo)
    );",
    // 3: runs. Kept after they end (and after their conversation is removed): they
    // are the history the event log refers to.
    "CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        conversation TEXT NOT NULL,
        workspace TEXT NOT NULL,
        agent TEXT NOT NULL,
        mode TEXT NOT NULL,
        adapter TEXT NOT NULL,
        network INTEGER NOT NULL,
        state TEXT NOT NULL,
        work_dir BLOB NOT NULL,
        started_unix_ms INTEGER NOT NULL,
        ended_unix_ms INTEGER,
        end_reason TEXT
    );",
    // 4: GitHub repositories linked to a workspace: where its runs may push besides
    // their worktree's own origin.
    "CREATE TABLE workspace_github_links (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        repository TEXT NOT NULL,
        created_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, repository)
    );",
    // 5: a workspace's network allowlist entries, canonical (`ccctl workspace egress`).
    "CREATE TABLE workspace_egress (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        entry TEXT NOT NULL,
        created_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, entry)
    );",
    // 6: what each run's egress proxies carried and refused, per destination.
    "CREATE TABLE egress_traffic (
        run TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        connections INTEGER NOT NULL DEFAULT 0,
        bytes_sent INTEGER NOT NULL DEFAULT 0,
        bytes_received INTEGER NOT NULL DEFAULT 0,
        denied INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run, host, port)
    );",
    // 7: the default workspace was made with 0 for its creation time (shown as
    // 1970-01-01): it dates from the data directory's first event, or from now.
    "UPDATE workspaces
        SET created_unix_ms = COALESCE(
            (SELECT MIN(time_unix_ms) FROM events),
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
        WHERE name = 'default' AND created_unix_ms = 0;",
    // 8: what approvers allowed for a run's life (issue 37): rules-file text per
    // question, gone when the run ends.
    "CREATE TABLE run_approvals (
        run TEXT NOT NULL,
        question TEXT NOT NULL,
        rules TEXT NOT NULL,
        created_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (run, question)
    );",
    // 9: what runs' model requests cost, per run, model and UTC day (issue 38): the
    // rows behind a run's tokens per model and a workspace's daily budget.
    "CREATE TABLE model_usage (
        run TEXT NOT NULL,
        workspace TEXT NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        day TEXT NOT NULL,
        requests INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cache_creation_input_tokens INTEGER NOT NULL,
        cache_read_input_tokens INTEGER NOT NULL,
        PRIMARY KEY (run, provider, model, day)
    );
    CREATE INDEX model_usage_by_workspace_day ON model_usage (workspace, day);",
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("{path} has schema version {found}, newer than this supervisor knows ({known}): upgrade cc-supervisor")]
    TooNew { path: PathBuf, found: i64, known: usize },
    #[error("cannot migrate {path} to schema version {version}: {source}")]
    Migrate { path: PathBuf, version: usize, source: rusqlite::Error },
    #[error("{path} is a symlink: refusing to open it")]
    Symlink { path: PathBuf },
    #[error("cannot make {path} private (0600): {source}")]
    Private { path: PathBuf, source: std::io::Error },
    #[error("state.db: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("state.db is unusable after an earlier failure (a thread panicked holding it)")]
    Poisoned,
}

pub struct Store {
    conn: Mutex<Connection>,
}

/// The database and its WAL side files are ours alone (0600), whatever the umask: the
/// data directory is searchable by the service user. A new database is made 0600 before
/// SQLite opens it, which then gives its side files the database's mode; files left by
/// an older version are tightened. Never through a link.
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let private = std::fs::Permissions::from_mode(0o600);
    let nofollow = |p: &Path, create: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(create)
            .create(create)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(p)
    };
    nofollow(path, true)?.set_permissions(private.clone())?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        match nofollow(Path::new(&side), false) {
            Ok(file) => file.set_permissions(private.clone())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open_err = |source| StoreError::Open { path: path.to_owned(), source };
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(StoreError::Symlink { path: path.to_owned() });
        }
        make_private(path).map_err(|source| StoreError::Private { path: path.to_owned(), source })?;
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(open_err)?;
        // FULL: an event broadcast to followers must survive a power loss, or its id
        // would be handed out again.
        conn.pragma_update(None, "synchronous", "FULL").map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(open_err)?;
        migrate(&mut conn, path)?;
        Ok(Self { conn: Mutex::new(conn) })
    }

    pub(crate) fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>, StoreError> {
        self.conn.lock().map_err(|_| StoreError::Poisoned)
    }

    pub fn append_event(
        &self,
        time_unix_ms: i64,
        kind: &str,
        subject: &str,
        payload: &serde_json::Value,
    ) -> Result<Event, StoreError> {
        let payload_json = payload.to_string();
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO events (time_unix_ms, kind, subject, payload) VALUES (?1, ?2, ?3, ?4)",
            params![time_unix_ms, kind, subject, payload_json],
        )?;
        Ok(Event {
            id: conn.last_insert_rowid() as u64,
            create_time: Some(cc_proto::time::timestamp(time_unix_ms)),
            kind: kind.to_owned(),
            subject: subject.to_owned(),
            payload_json,
        })
    }

    /// Up to `limit` events with an id greater than `after`, oldest first.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, time_unix_ms, kind, subject, payload FROM events WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![after, limit as i64], |row| {
            Ok(Event {
                id: row.get::<_, i64>(0)? as u64,
                create_time: Some(cc_proto::time::timestamp(row.get(1)?)),
                kind: row.get(2)?,
                subject: row.get(3)?,
                payload_json: row.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn last_event_id(&self) -> Result<u64, StoreError> {
        let conn = self.conn()?;
        let id: Option<i64> = conn.query_row("SELECT max(id) FROM events", [], |r| r.get(0)).optional()?.flatten();
        Ok(id.unwrap_or(0) as u64)
    }
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found < 0 || found as usize > MIGRATIONS.len() {
        return Err(StoreError::TooNew { path: path.to_owned(), found, known: MIGRATIONS.len() });
    }
    if found as usize == MIGRATIONS.len() {
        return Ok(());
    }
    // Every step in one transaction: an upgrade lands whole or not at all, and costs one
    // synced commit rather than one per step (a new data directory took ten).
    let last = MIGRATIONS.len();
    let tx =
        conn.transaction().map_err(|source| StoreError::Migrate { path: path.to_owned(), version: last, source })?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index + 1;
        let migrate_err = |source| StoreError::Migrate { path: path.to_owned(), version, source };
        tx.execute_batch(sql).map_err(migrate_err)?;
        tx.pragma_update(None, "user_version", version as i64).map_err(migrate_err)?;
    }
    tx.commit().map_err(|source| StoreError::Migrate { path: path.to_owned(), version: last, source })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_survive_reopen_and_ids_grow() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let a = store.append_event(1, "helper_started", "helper:broker", &json!({"pid": 7})).unwrap();
        let b = store.append_event(2, "helper_exited", "helper:broker", &json!({"code": 1})).unwrap();
        assert!(b.id > a.id);
        drop(store);
        let store = Store::open(&path).unwrap();
        let all = store.events_after(0, 100).unwrap();
        assert_eq!(all, vec![a.clone(), b.clone()]);
        assert_eq!(store.events_after(a.id, 100).unwrap(), vec![b.clone()]);
        assert_eq!(store.events_after(u64::MAX, 100).unwrap(), vec![]);
        assert_eq!(store.last_event_id().unwrap(), b.id);
    }

    #[test]
    fn the_default_workspace_is_dated_when_the_store_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state.db")).unwrap();
        let created: i64 = store
            .conn()
            .unwrap()
            .query_row("SELECT created_unix_ms FROM workspaces WHERE name = 'default'", [], |r| r.get(0))
            .unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        assert!((now - created).abs() < 60_000, "created {created}, now {now}");
    }

    #[test]
    fn refuses_a_newer_schema() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.db");
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew { found: 99, .. })));
    }

    #[test]
    fn refuses_a_file_that_is_not_sqlite() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        assert!(Store::open(&path).is_err());
    }
}
