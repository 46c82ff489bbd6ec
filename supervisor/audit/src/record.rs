//! One record of the trail, version 1 of its schema, and the hash that chains it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The version of the schema this crate writes and reads.
pub const VERSION: u32 = 1;

/// `prev` of the first record of a trail.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One decision, as a line of the trail. The fields are written in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The schema's version: 1.
    pub v: u32,
    /// 1 for the trail's first record, one more for each after it, across files.
    pub seq: u64,
    /// When it was recorded, RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// The event kind (`gate_decision`, `run_started`, …; docs/reference/events.md).
    pub kind: String,
    /// `run:ID`, `gate`, `supervisor`, … as the event log has it.
    pub subject: String,
    /// The event's payload: metadata, never a model's or a file's content.
    pub payload: serde_json::Value,
    /// The SHA-256, in lower-case hex, of the line before this one.
    pub prev: String,
}

impl Record {
    /// The line as it is written (without its newline).
    pub fn line(&self) -> String {
        // A Value and strings always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The record a line holds, if it is one of this schema.
    pub fn parse(line: &[u8]) -> Option<Record> {
        let record: Record = serde_json::from_slice(line).ok()?;
        (record.v == VERSION && record.prev.len() == 64).then_some(record)
    }

    /// The run a record concerns, if any: its subject's, or its payload's `run_id`.
    pub fn run(&self) -> Option<&str> {
        self.subject.strip_prefix("run:").or_else(|| self.payload.get("run_id").and_then(|r| r.as_str()))
    }
}

/// SHA-256 of `line` (without its newline), lower-case hex: what the next record's
/// `prev` must be.
pub fn hash(line: &[u8]) -> String {
    let digest = Sha256::digest(line);
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}
