//! What the run's proxies saw, on its way to the supervisor: each refusal (an
//! `egress_denied` event there) and each allowed connection with its bytes. The
//! gateway keeps none of it past the send, so a restart loses only what was queued.
//!
//! A proxy never waits on the supervisor: records go into a bounded queue, and one
//! task sends them in batches with a deadline. Identical refusals in one batch become
//! one record with a count, so an agent hammering a denied host costs one event per
//! batch, not one per attempt. A full queue drops records and says how many.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cc_proto::supervisor::v1 as sv;
use tokio::sync::mpsc;

use crate::peers::Peers;

/// Records waiting to be sent.
const QUEUE: usize = 8192;
/// Records in one call; the supervisor takes at most 1024.
const BATCH: usize = 512;
/// How long the sender gathers after the first record of a batch.
const GATHER: Duration = Duration::from_millis(100);
/// Distinct refusals of one run in one batch; past them, each rule's refusals fold
/// into one record for "(other hosts)", so an agent asking for a million names costs
/// a few records per batch, not a million.
pub const DENIALS_PER_BATCH: usize = 16;
/// The host of a folded record.
pub const OTHER_HOSTS: &str = "(other hosts)";

/// One thing a run's proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub run_id: String,
    pub host: String,
    pub port: u16,
    pub what: What,
    /// Through one of the run's host forwards, not its proxies.
    pub forwarded: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    Denied { rule: &'static str, reason: String },
    Opened,
    Closed { sent: u64, received: u64 },
}

/// The sender's half, until the first record starts it.
type Unstarted = Arc<Mutex<Option<(mpsc::Receiver<Seen>, Arc<Peers>)>>>;

/// The proxies' side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Reporter {
    queue: mpsc::Sender<Seen>,
    dropped: Arc<AtomicU64>,
    unstarted: Unstarted,
}

impl Reporter {
    /// The sender starts with the first record: the service is built before the
    /// runtime runs, and a proxy reports only from within it.
    pub fn new(peers: Arc<Peers>) -> Reporter {
        let (queue, received) = mpsc::channel(QUEUE);
        Reporter { queue, dropped: Arc::default(), unstarted: Arc::new(Mutex::new(Some((received, peers)))) }
    }

    pub fn report(&self, seen: Seen) {
        if let Some((received, peers)) = self.unstarted.lock().ok().and_then(|mut u| u.take()) {
            tokio::spawn(send(received, peers, self.dropped.clone()));
        }
        if self.queue.try_send(seen).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn send(mut received: mpsc::Receiver<Seen>, peers: Arc<Peers>, dropped: Arc<AtomicU64>) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let Some(first) = received.recv().await else { return };
        batch.push(first);
        let gathering = tokio::time::sleep(GATHER);
        tokio::pin!(gathering);
        while batch.len() < BATCH {
            tokio::select! {
                _ = &mut gathering => break,
                next = received.recv() => match next {
                    Some(seen) => batch.push(seen),
                    None => break,
                },
            }
        }
        let records = coalesce(std::mem::take(&mut batch));
        let count = records.len();
        if let Err(e) = peers.record_egress(records).await {
            tracing::warn!(records = count, error = %e, "egress records were not recorded by the supervisor and are lost");
        }
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            tracing::warn!(records = lost, "egress records were dropped: the queue to the supervisor was full");
        }
    }
}

/// Sums what can be summed: refusals with the same run, host, port and rule (the
/// first reason stands for them), and each destination's opens and bytes. Past
/// [`DENIALS_PER_BATCH`] distinct refusals of a run, the rest fold per rule.
pub fn coalesce(seen: Vec<Seen>) -> Vec<sv::EgressRecord> {
    use sv::egress_record::Outcome;
    let mut out: Vec<sv::EgressRecord> = Vec::new();
    let mut index: HashMap<(String, String, u16, Option<&'static str>, bool), usize> = HashMap::new();
    let mut distinct_denials: HashMap<String, usize> = HashMap::new();
    for s in seen {
        let rule = match &s.what {
            What::Denied { rule, .. } => Some(*rule),
            _ => None,
        };
        let mut key = (s.run_id, s.host, s.port, rule, s.forwarded);
        if rule.is_some() && !index.contains_key(&key) {
            let distinct = distinct_denials.entry(key.0.clone()).or_default();
            if *distinct >= DENIALS_PER_BATCH {
                key = (key.0, OTHER_HOSTS.to_owned(), 0, rule, key.4);
            } else {
                *distinct += 1;
            }
        }
        let slot = *index.entry(key.clone()).or_insert_with(|| {
            let outcome = match &s.what {
                What::Denied { rule, reason } => {
                    let reason = if key.1 == OTHER_HOSTS {
                        format!("more hosts than {DENIALS_PER_BATCH} were refused within {GATHER:?}; first: {reason}")
                    } else {
                        reason.clone()
                    };
                    Outcome::Denied(sv::EgressDenial { rule: (*rule).to_owned(), reason, count: 0 })
                }
                _ => Outcome::Carried(sv::EgressCarried::default()),
            };
            out.push(sv::EgressRecord {
                run_id: key.0.clone(),
                host: key.1.clone(),
                port: key.2.into(),
                forwarded: key.4,
                outcome: Some(outcome),
            });
            out.len() - 1
        });
        match (&mut out[slot].outcome, s.what) {
            (Some(Outcome::Denied(d)), What::Denied { .. }) => d.count = d.count.saturating_add(1),
            (Some(Outcome::Carried(c)), What::Opened) => c.connections = c.connections.saturating_add(1),
            (Some(Outcome::Carried(c)), What::Closed { sent, received }) => {
                c.bytes_sent = c.bytes_sent.saturating_add(sent);
                c.bytes_received = c.bytes_received.saturating_add(received);
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sv::egress_record::Outcome;

    fn seen(run: &str, host: &str, port: u16, what: What) -> Seen {
        Seen { run_id: run.into(), host: host.into(), port, what, forwarded: false }
    }

    #[test]
    fn identical_refusals_and_one_destinations_traffic_are_summed() {
        let denied = |reason: &str| What::Denied { rule: "not_on_allowlist", reason: reason.into() };
        let records = coalesce(vec![
            seen("r1", "evil.test", 443, denied("first")),
            seen("r1", "ok.test", 443, What::Opened),
            seen("r1", "evil.test", 443, denied("second")),
            seen("r1", "ok.test", 443, What::Closed { sent: 10, received: 20 }),
            seen("r1", "ok.test", 443, What::Opened),
            seen("r1", "evil.test", 443, What::Denied { rule: "gate_denied", reason: "no".into() }),
            seen("r2", "evil.test", 443, denied("other run")),
            seen("r1", "evil.test", 80, denied("other port")),
        ]);
        let summary: Vec<(String, String, u32, String)> = records
            .into_iter()
            .map(|r| {
                let what = match r.outcome.unwrap() {
                    Outcome::Denied(d) => format!("denied {} x{} ({})", d.rule, d.count, d.reason),
                    Outcome::Carried(c) => format!("carried {} {}/{}", c.connections, c.bytes_sent, c.bytes_received),
                };
                (r.run_id, r.host, r.port, what)
            })
            .collect();
        let row = |run: &str, host: &str, port: u32, what: &str| (run.into(), host.into(), port, what.into());
        assert_eq!(
            summary,
            vec![
                row("r1", "evil.test", 443, "denied not_on_allowlist x2 (first)"),
                row("r1", "ok.test", 443, "carried 2 10/20"),
                row("r1", "evil.test", 443, "denied gate_denied x1 (no)"),
                row("r2", "evil.test", 443, "denied not_on_allowlist x1 (other run)"),
                row("r1", "evil.test", 80, "denied not_on_allowlist x1 (other port)"),
            ]
        );
    }

    #[test]
    fn a_flood_of_hosts_folds_into_a_few_records() {
        let denied = What::Denied { rule: "not_on_allowlist", reason: "no".into() };
        let flood: Vec<Seen> = (0..10_000).map(|i| seen("r1", &format!("x{i}.test"), 443, denied.clone())).collect();
        let records = coalesce(flood);
        assert_eq!(records.len(), DENIALS_PER_BATCH + 1);
        let other = records.last().unwrap();
        assert_eq!((other.host.as_str(), other.port), (OTHER_HOSTS, 0));
        let Some(Outcome::Denied(d)) = &other.outcome else { panic!("{other:?}") };
        assert_eq!(d.count as usize, 10_000 - DENIALS_PER_BATCH);
        assert!(d.reason.contains("first: no"), "{}", d.reason);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let (queue, _kept) = mpsc::channel(1);
        let reporter = Reporter { queue, dropped: Arc::default(), unstarted: Arc::default() };
        for _ in 0..3 {
            reporter.report(seen("r", "h", 1, What::Opened));
        }
        assert_eq!(reporter.dropped.load(Ordering::Relaxed), 2);
    }
}
