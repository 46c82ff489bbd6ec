//! Walking the trail: every record must carry the hash of the line before it and the
//! next sequence number. The first that does not is named, with what that means.
//!
//! A chain without a secret can be rewritten whole by someone who can write every
//! file; the head a person kept elsewhere (`ccctl audit head`) is what catches that:
//! given it, verify also checks that it is still in the trail.

use std::fmt;

use crate::record::{GENESIS, Record, hash};

/// Where a line is: its file's name and its line number, from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The first thing wrong with a trail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("record {seq} ({at}) was changed: the record after it carries another hash")]
    Changed { seq: u64, at: Location },
    #[error("{at} is not a record of the trail: it was changed or inserted")]
    NotARecord { at: Location },
    #[error("records {first} to {last} are missing after {after}: they were removed")]
    Removed { first: u64, last: u64, after: Location },
    #[error("record {seq} ({at}) comes after record {before}: records were reordered or one was inserted")]
    OutOfOrder { seq: u64, before: u64, at: Location },
    #[error("record {seq} ({at}) does not follow the record before it: it was inserted or changed")]
    Unchained { seq: u64, at: Location },
    #[error("the trail starts at record {seq} ({at}), not 1: the records before it were removed")]
    StartsLate { seq: u64, at: Location },
    #[error("the head you kept ({head}) is not in the trail: the trail was rewritten")]
    HeadMissing { head: String },
}

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub records: u64,
    pub files: usize,
    /// The last record's sequence number and its line's hash.
    pub head: Option<(u64, String)>,
    /// Lines cut short by a crash while they were written: each lost that one record,
    /// and the chain goes on past it.
    pub cut_short: Vec<Location>,
    pub problem: Option<Problem>,
}

/// Walks `files` (name and contents, in order). `kept_head`: a hash a person kept,
/// which must be one of the trail's.
pub fn verify<'a>(files: impl IntoIterator<Item = (String, &'a [u8])> + Clone, kept_head: Option<&str>) -> Report {
    // Every sequence number present, to tell a record moved from one removed.
    let present: std::collections::HashSet<u64> = files
        .clone()
        .into_iter()
        .flat_map(|(_, bytes)| bytes.split(|b| *b == b'\n').filter_map(Record::parse).map(|r| r.seq))
        .collect();
    let mut report = Report::default();
    let mut last: Option<(u64, String, Location)> = None;
    let mut unreadable: Option<(Location, String)> = None;
    let mut head_seen = kept_head.is_none();
    for (name, bytes) in files {
        report.files += 1;
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if body.is_empty() {
            continue;
        }
        for (n, line) in body.split(|b| *b == b'\n').enumerate() {
            let at = Location { file: name.clone(), line: n + 1 };
            let line_hash = hash(line);
            head_seen |= kept_head == Some(line_hash.as_str());
            let Some(record) = Record::parse(line) else {
                if let Some((earlier, _)) = unreadable.replace((at, line_hash)) {
                    report.problem = Some(Problem::NotARecord { at: earlier });
                    return report;
                }
                continue;
            };
            let (expected_seq, expected_prev) =
                last.as_ref().map_or((1, GENESIS.to_owned()), |(seq, h, _)| (seq + 1, h.clone()));
            if let Some((bad, bad_hash)) = unreadable.take() {
                if record.prev == bad_hash {
                    report.problem = Some(Problem::Changed { seq: expected_seq, at: bad });
                    return report;
                }
                if record.prev != expected_prev || record.seq != expected_seq {
                    report.problem = Some(Problem::NotARecord { at: bad });
                    return report;
                }
                report.cut_short.push(bad);
            }
            if let Some(problem) = check(&record, expected_seq, &expected_prev, last.as_ref(), &at, &present) {
                report.problem = Some(problem);
                return report;
            }
            report.records += 1;
            last = Some((record.seq, line_hash, at));
        }
    }
    if let Some((bad, _)) = unreadable {
        // The last line: a crash while it was written.
        report.cut_short.push(bad);
    }
    report.head = last.map(|(seq, h, _)| (seq, h));
    if !head_seen && let Some(head) = kept_head {
        report.problem = Some(Problem::HeadMissing { head: head.to_owned() });
    }
    report
}

fn check(
    record: &Record,
    expected_seq: u64,
    expected_prev: &str,
    last: Option<&(u64, String, Location)>,
    at: &Location,
    present: &std::collections::HashSet<u64>,
) -> Option<Problem> {
    let at = at.clone();
    match last {
        None if record.seq != 1 => Some(Problem::StartsLate { seq: record.seq, at }),
        None if record.prev != GENESIS => Some(Problem::Unchained { seq: record.seq, at }),
        None => None,
        Some((before, _, before_at)) => {
            if record.seq > expected_seq && present.contains(&expected_seq) {
                Some(Problem::OutOfOrder { seq: record.seq, before: *before, at })
            } else if record.seq > expected_seq {
                Some(Problem::Removed { first: expected_seq, last: record.seq - 1, after: before_at.clone() })
            } else if record.seq < expected_seq {
                Some(Problem::OutOfOrder { seq: record.seq, before: *before, at })
            } else if record.prev != expected_prev {
                Some(Problem::Changed { seq: *before, at: before_at.clone() })
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
