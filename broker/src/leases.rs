//! The broker's record of every credential it issued: which run, from which provider,
//! for what, when it was issued, when it expires and when it was revoked. It lives in
//! the broker's own SQLite file (never `state.db`), 0600, because it also keeps each
//! token: revoking a GitHub installation token after a crash needs the token itself.
//! No reader outside this module gets a secret except through [`LeaseStore::secret`].

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use crate::secret::Secret;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("the lease database {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error("the lease database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the lease database {path} cannot be made private: {source}")]
    Permissions { path: String, source: std::io::Error },
}

/// What a lease is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The run's read token (fetches, and tracker writes made by the supervisor).
    Read,
    /// A token for one push to one repository.
    Write,
    /// The run's model placeholder: worth nothing but to its model door, revoked here
    /// and nowhere else.
    ModelPlaceholder,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::ModelPlaceholder => "model_placeholder",
        }
    }

    fn parse(s: &str) -> Kind {
        match s {
            "write" => Kind::Write,
            "model_placeholder" => Kind::ModelPlaceholder,
            _ => Kind::Read,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLease {
    pub run: String,
    pub provider: String,
    pub kind: Kind,
    pub repositories: Vec<String>,
    pub permissions: Vec<(String, String)>,
    pub issued_at: SystemTime,
    pub expires_at: Option<SystemTime>,
}

/// A lease as anyone but the revoker sees it: no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    pub run: String,
    pub provider: String,
    pub kind: Kind,
    pub repositories: Vec<String>,
    pub permissions: Vec<(String, String)>,
    pub issued_at: SystemTime,
    pub expires_at: Option<SystemTime>,
    pub revoked_at: Option<SystemTime>,
    pub revoke_attempts: u32,
    pub revoke_error: Option<String>,
}

pub struct LeaseStore {
    db: Connection,
}

/// One transaction, so that a new database costs one synced commit, not one per
/// statement (the broker serves only once it is open, and start-up waits on it).
const SCHEMA: &str = "
BEGIN;
CREATE TABLE IF NOT EXISTS leases (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    provider TEXT NOT NULL,
    kind TEXT NOT NULL,
    repositories TEXT NOT NULL,
    permissions TEXT NOT NULL,
    secret TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    revoke_attempts INTEGER NOT NULL DEFAULT 0,
    revoke_error TEXT,
    next_attempt_at INTEGER
);
CREATE INDEX IF NOT EXISTS leases_by_run ON leases(run);
COMMIT;
";

impl LeaseStore {
    pub fn open(path: &Path) -> Result<LeaseStore, LeaseError> {
        let shown = path.display().to_string();
        // Created 0600 before SQLite opens it (its -wal and -shm files follow the mode),
        // and made 0600 again should it already exist looser.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let private = |source| LeaseError::Permissions { path: shown.clone(), source };
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(private)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(private)?;
        }
        let db = Connection::open(path).map_err(|source| LeaseError::Open { path: shown.clone(), source })?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "busy_timeout", 5000)?;
        db.execute_batch(SCHEMA)?;
        Ok(LeaseStore { db })
    }

    pub fn insert(&self, lease: &NewLease, secret: &Secret) -> Result<i64, LeaseError> {
        self.db.execute(
            "INSERT INTO leases (run, provider, kind, repositories, permissions, secret, issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                lease.run,
                lease.provider,
                lease.kind.as_str(),
                serde_json::to_string(&lease.repositories).unwrap_or_default(),
                serde_json::to_string(&lease.permissions).unwrap_or_default(),
                secret.expose(),
                seconds(lease.issued_at),
                lease.expires_at.map(seconds),
            ],
        )?;
        Ok(self.db.last_insert_rowid())
    }

    pub fn of_run(&self, run: &str) -> Result<Vec<Lease>, LeaseError> {
        self.select("WHERE run = ?1 ORDER BY id", params![run])
    }

    /// Leases not yet revoked whose run is not in `live`: after a crash, these are
    /// credentials nobody should hold any more.
    pub fn orphaned(&self, live: &[String]) -> Result<Vec<Lease>, LeaseError> {
        let all = self.select("WHERE revoked_at IS NULL ORDER BY id", params![])?;
        Ok(all.into_iter().filter(|l| !live.contains(&l.run)).collect())
    }

    /// Unrevoked leases whose next revoke attempt is due.
    pub fn due(&self, now: SystemTime) -> Result<Vec<Lease>, LeaseError> {
        self.select(
            "WHERE revoked_at IS NULL AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1 ORDER BY id",
            params![seconds(now)],
        )
    }

    pub fn secret(&self, id: i64) -> Result<Option<Secret>, LeaseError> {
        let value: Option<String> =
            self.db.query_row("SELECT secret FROM leases WHERE id = ?1", params![id], |r| r.get(0)).optional()?;
        Ok(value.map(Secret::new))
    }

    pub fn mark_revoked(&self, id: i64, at: SystemTime, note: Option<&str>) -> Result<(), LeaseError> {
        self.db.execute(
            "UPDATE leases SET revoked_at = ?2, revoke_error = ?3, next_attempt_at = NULL WHERE id = ?1",
            params![id, seconds(at), note],
        )?;
        Ok(())
    }

    /// A revoke that failed: recorded, with when to try again.
    pub fn mark_revoke_failed(&self, id: i64, error: &str, retry_at: SystemTime) -> Result<u32, LeaseError> {
        Ok(self.db.query_row(
            "UPDATE leases SET revoke_attempts = revoke_attempts + 1, revoke_error = ?2, next_attempt_at = ?3
             WHERE id = ?1 RETURNING revoke_attempts",
            params![id, error, seconds(retry_at)],
            |r| r.get(0),
        )?)
    }

    /// Failed revoke attempts of a lease so far.
    pub fn revoke_attempts(&self, id: i64) -> Result<u32, LeaseError> {
        Ok(self.db.query_row("SELECT revoke_attempts FROM leases WHERE id = ?1", params![id], |r| r.get(0))?)
    }

    fn select(&self, clause: &str, args: impl rusqlite::Params) -> Result<Vec<Lease>, LeaseError> {
        let sql = format!(
            "SELECT id, run, provider, kind, repositories, permissions, issued_at, expires_at, revoked_at,
                    revoke_attempts, revoke_error FROM leases {clause}"
        );
        let mut statement = self.db.prepare(&sql)?;
        let rows = statement.query_map(args, |r| {
            Ok(Lease {
                id: r.get(0)?,
                run: r.get(1)?,
                provider: r.get(2)?,
                kind: Kind::parse(&r.get::<_, String>(3)?),
                repositories: serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default(),
                permissions: serde_json::from_str(&r.get::<_, String>(5)?).unwrap_or_default(),
                issued_at: time(r.get(6)?),
                expires_at: r.get::<_, Option<i64>>(7)?.map(time),
                revoked_at: r.get::<_, Option<i64>>(8)?.map(time),
                revoke_attempts: r.get(9)?,
                revoke_error: r.get(10)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn time(s: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(run: &str, kind: Kind) -> NewLease {
        NewLease {
            run: run.into(),
            provider: "github-app".into(),
            kind,
            repositories: vec!["o/r".into()],
            permissions: vec![("contents".into(), "read".into())],
            issued_at: time(1_000),
            expires_at: Some(time(4_600)),
        }
    }

    #[test]
    fn leases_are_recorded_without_showing_their_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        let store = LeaseStore::open(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let id = store.insert(&lease("r1", Kind::Read), &Secret::new("tok-1")).unwrap();
        store.insert(&lease("r1", Kind::Write), &Secret::new("tok-2")).unwrap();
        store.insert(&lease("r2", Kind::Read), &Secret::new("tok-3")).unwrap();
        let of_r1 = store.of_run("r1").unwrap();
        assert_eq!(of_r1.len(), 2);
        assert_eq!(of_r1[0].repositories, ["o/r"]);
        assert_eq!(of_r1[0].permissions, [("contents".to_owned(), "read".to_owned())]);
        assert_eq!(of_r1[1].kind, Kind::Write);
        assert!(!format!("{of_r1:?}").contains("tok-"), "a listed lease carries no secret");
        assert_eq!(store.secret(id).unwrap().unwrap().expose(), "tok-1");
    }

    #[test]
    fn orphans_revocations_and_retries() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::open(&dir.path().join("leases.db")).unwrap();
        let a = store.insert(&lease("live", Kind::Read), &Secret::new("a")).unwrap();
        let b = store.insert(&lease("over", Kind::Read), &Secret::new("b")).unwrap();
        let orphans: Vec<i64> = store.orphaned(&["live".into()]).unwrap().iter().map(|l| l.id).collect();
        assert_eq!(orphans, [b]);
        assert_eq!(store.mark_revoke_failed(b, "upstream said 502", time(2_000)).unwrap(), 1);
        assert!(store.due(time(1_999)).unwrap().is_empty());
        assert_eq!(store.due(time(2_000)).unwrap()[0].revoke_error.as_deref(), Some("upstream said 502"));
        store.mark_revoked(b, time(2_001), None).unwrap();
        assert!(store.due(time(9_999)).unwrap().is_empty());
        assert!(store.orphaned(&[]).unwrap().iter().all(|l| l.id == a));
        // A reopened store (a restarted broker) sees the same.
        drop(store);
        let again = LeaseStore::open(&dir.path().join("leases.db")).unwrap();
        assert_eq!(again.of_run("over").unwrap()[0].revoked_at, Some(time(2_001)));
    }
}
