//! What runs' egress proxies saw, as the gateway reports it: per run and destination,
//! connections, bytes and denials in `state.db`, and an `egress_denied` event for each
//! refusal. The gateway keeps none of it, so a restarted gateway loses at most the
//! bytes of the tunnels that were open when it died.

use cc_proto::supervisor::v1 as pb;
use serde_json::json;

use super::RunManager;
use crate::events::printable;
use crate::store::StoreError;
pub use cc_store::traffic::{DESTINATIONS, OTHER_DESTINATIONS, Traffic};

/// Records one request may carry: the gateway sends batches far smaller.
pub const MAX_RECORDS: usize = 1024;
/// `egress_denied` events per run; past them one `egress_denied_suppressed` event
/// says so and the refusals are only counted (`ccctl run show`).
pub const DENIAL_EVENTS: u32 = 500;
/// A host longer than this is cut, with a mark: the proxy refuses names past 253
/// bytes, but the refusal of an over-long one names what it was sent.
const HOST_CHARS: usize = 300;
const REASON_CHARS: usize = 500;

impl RunManager {
    /// Stores what the gateway reports: the totals in one transaction, then an event
    /// per refusal within the run's [`DENIAL_EVENTS`]. A record of a run this
    /// supervisor never started is skipped; one of an ended run is kept (its last
    /// tunnels close late).
    pub fn record_egress(&self, records: Vec<pb::EgressRecord>) -> Result<u32, StoreError> {
        let store = &self.env.store;
        let mut known = std::collections::HashMap::new();
        let mut batch = Vec::with_capacity(records.len());
        let mut refusals = Vec::new();
        let mut forwarded = Vec::new();
        for record in records {
            let exists = match known.get(&record.run_id) {
                Some(exists) => *exists,
                None => {
                    let exists = store.run(&record.run_id)?.is_some();
                    known.insert(record.run_id.clone(), exists);
                    exists
                }
            };
            if !exists {
                continue;
            }
            let host = printable(&record.host, HOST_CHARS);
            let port = u16::try_from(record.port).unwrap_or(0);
            let add = match record.outcome {
                Some(pb::egress_record::Outcome::Denied(denied)) => {
                    let count = denied.count.max(1);
                    let mut refusal = json!({
                        "run_id": record.run_id,
                        "host": host,
                        "port": port,
                        "rule": printable(&denied.rule, 64),
                        "reason": printable(&denied.reason, REASON_CHARS),
                        "count": count,
                    });
                    if record.forwarded {
                        refusal["forwarded"] = json!(true);
                    }
                    refusals.push(refusal);
                    Traffic { denied: count.into(), ..Traffic::default() }
                }
                Some(pb::egress_record::Outcome::Carried(carried)) if record.forwarded => {
                    // A forward's connections go in the audit trail, a batch's in one event.
                    forwarded.push(json!({
                        "run_id": record.run_id,
                        "port": port,
                        "connections": carried.connections,
                        "bytes_sent": carried.bytes_sent,
                        "bytes_received": carried.bytes_received,
                    }));
                    Traffic {
                        connections: carried.connections.into(),
                        bytes_sent: carried.bytes_sent,
                        bytes_received: carried.bytes_received,
                        ..Traffic::default()
                    }
                }
                Some(pb::egress_record::Outcome::Carried(carried)) => Traffic {
                    connections: carried.connections.into(),
                    bytes_sent: carried.bytes_sent,
                    bytes_received: carried.bytes_received,
                    ..Traffic::default()
                },
                None => continue,
            };
            batch.push((record.run_id, host, port, add));
        }
        store.add_egress_traffic(&batch)?;
        for payload in forwarded {
            let subject = format!("run:{}", payload["run_id"].as_str().unwrap_or_default());
            self.env.events.record("forward_connection", &subject, payload);
        }
        for payload in refusals {
            let run = payload["run_id"].as_str().unwrap_or_default().to_owned();
            let recorded = {
                let mut counts = self.denial_events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let count = counts.entry(run.clone()).or_default();
                *count = count.saturating_add(1);
                *count
            };
            let subject = format!("run:{run}");
            match recorded.cmp(&(DENIAL_EVENTS + 1)) {
                std::cmp::Ordering::Less => self.env.events.record("egress_denied", &subject, payload),
                std::cmp::Ordering::Equal => self.env.events.record(
                    "egress_denied_suppressed",
                    &subject,
                    json!({ "run_id": run, "after": DENIAL_EVENTS, "see": format!("ccctl run show {run}") }),
                ),
                std::cmp::Ordering::Greater => {}
            }
        }
        Ok(u32::try_from(batch.len()).unwrap_or(u32::MAX))
    }

    /// The run's egress per destination.
    pub fn egress_traffic(&self, run: &str) -> Result<Vec<Traffic>, StoreError> {
        self.env.store.egress_traffic(run)
    }
}
