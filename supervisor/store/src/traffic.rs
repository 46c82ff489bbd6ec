//! What runs' egress proxies carried and refused, per run and destination: the rows
//! behind `ccctl run show`. Bounded per run, so that an agent naming a million hosts
//! adds one row, not a million.

use cc_proto::supervisor::v1 as pb;
use rusqlite::params;

use crate::store::{Store, StoreError};

/// Destinations kept per run; the rest of a run's traffic is summed under
/// [`OTHER_DESTINATIONS`], so an agent naming a million hosts adds one row, not a million.
pub const DESTINATIONS: i64 = 256;
pub const OTHER_DESTINATIONS: &str = "(other destinations)";
/// One destination's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    pub host: String,
    pub port: u16,
    pub connections: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub denied: u64,
}

impl Traffic {
    pub fn to_proto(&self) -> pb::EgressTraffic {
        pb::EgressTraffic {
            host: self.host.clone(),
            port: self.port.into(),
            connections: self.connections,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            denied: self.denied,
        }
    }
}

impl Store {
    /// Adds to the runs' totals, one transaction for the whole batch. A destination
    /// new to a run that has [`DESTINATIONS`] already is summed under
    /// [`OTHER_DESTINATIONS`], port 0.
    pub fn add_egress_traffic(&self, batch: &[(String, String, u16, Traffic)]) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        for (run, host, port, add) in batch {
            let known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM egress_traffic WHERE run = ?1 AND host = ?2 AND port = ?3)",
                params![run, host, port],
                |r| r.get(0),
            )?;
            let rows: i64 = tx.query_row("SELECT COUNT(*) FROM egress_traffic WHERE run = ?1", [run], |r| r.get(0))?;
            let (host, port) =
                if known || rows < DESTINATIONS { (host.as_str(), *port) } else { (OTHER_DESTINATIONS, 0) };
            tx.execute(
                "INSERT INTO egress_traffic (run, host, port, connections, bytes_sent, bytes_received, denied)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (run, host, port) DO UPDATE SET
                    connections = connections + excluded.connections,
                    bytes_sent = bytes_sent + excluded.bytes_sent,
                    bytes_received = bytes_received + excluded.bytes_received,
                    denied = denied + excluded.denied",
                params![
                    run,
                    host,
                    port,
                    clamp(add.connections),
                    clamp(add.bytes_sent),
                    clamp(add.bytes_received),
                    clamp(add.denied)
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The run's destinations, the most bytes first, then the most connections.
    pub fn egress_traffic(&self, run: &str) -> Result<Vec<Traffic>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT host, port, connections, bytes_sent, bytes_received, denied FROM egress_traffic
             WHERE run = ?1 ORDER BY bytes_sent + bytes_received DESC, connections DESC, denied DESC, host, port",
        )?;
        let rows = stmt.query_map([run], |r| {
            Ok(Traffic {
                host: r.get(0)?,
                port: r.get::<_, i64>(1)?.try_into().unwrap_or(0),
                connections: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                bytes_sent: r.get::<_, i64>(3)?.try_into().unwrap_or(0),
                bytes_received: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                denied: r.get::<_, i64>(5)?.try_into().unwrap_or(0),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// SQLite integers are signed.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_per_destination_and_sort_by_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state.db")).unwrap();
        let add = |run: &str, host: &str, port: u16, t: Traffic| {
            store.add_egress_traffic(&[(run.to_owned(), host.to_owned(), port, t)]).unwrap()
        };
        let open = Traffic { connections: 1, ..Traffic::default() };
        add("r1", "a.test", 443, open.clone());
        add("r1", "a.test", 443, open.clone());
        add("r1", "a.test", 443, Traffic { bytes_sent: 5, bytes_received: 7, ..Default::default() });
        add("r1", "b.test", 80, Traffic { bytes_received: 100, ..Default::default() });
        add("r1", "c.test", 443, Traffic { denied: 3, ..Default::default() });
        add("r2", "a.test", 443, open);
        let traffic = store.egress_traffic("r1").unwrap();
        let summary: Vec<(&str, u64, u64, u64, u64)> = traffic
            .iter()
            .map(|t| (t.host.as_str(), t.connections, t.bytes_sent, t.bytes_received, t.denied))
            .collect();
        assert_eq!(summary, vec![("b.test", 0, 0, 100, 0), ("a.test", 2, 5, 7, 0), ("c.test", 0, 0, 0, 3)]);
        // Counts past SQLite's signed range stay at its top instead of wrapping.
        add("r3", "x.test", 1, Traffic { bytes_sent: u64::MAX, ..Default::default() });
        assert_eq!(store.egress_traffic("r3").unwrap()[0].bytes_sent, i64::MAX as u64);
    }

    #[test]
    fn a_run_keeps_so_many_destinations_and_sums_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state.db")).unwrap();
        let denied = Traffic { denied: 1, ..Traffic::default() };
        let batch: Vec<_> =
            (0..DESTINATIONS + 50).map(|i| ("r1".to_owned(), format!("x{i}.test"), 443, denied.clone())).collect();
        store.add_egress_traffic(&batch).unwrap();
        let traffic = store.egress_traffic("r1").unwrap();
        assert_eq!(traffic.len() as i64, DESTINATIONS + 1);
        let other = traffic.iter().find(|t| t.host == OTHER_DESTINATIONS).unwrap();
        assert_eq!((other.port, other.denied), (0, 50));
        // A destination already kept still counts as itself.
        store.add_egress_traffic(&[("r1".into(), "x0.test".into(), 443, denied)]).unwrap();
        assert_eq!(store.egress_traffic("r1").unwrap().iter().find(|t| t.host == "x0.test").unwrap().denied, 2);
    }
}
