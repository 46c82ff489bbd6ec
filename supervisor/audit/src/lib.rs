//! The audit trail (issue 38): every decision the product makes, appended outside every
//! envelope as one JSON line that carries the SHA-256 of the line before it.
//!
//! ```text
//! {"v":1,"seq":7,"time":"2026-12-07T09:12:03.120Z","kind":"gate_decision","subject":"run:r1","payload":{…},"prev":"3fa9…"}
//! ```
//!
//! - [`record`]: the schema (version 1) and the hash of a line: SHA-256 over its bytes as
//!   written, without the newline. The first record's `prev` is 64 zeros.
//! - [`writer`]: appends, one `write` per record, to `audit-NNNNNN.jsonl` files in the
//!   trail's directory, starting the next file past a size; the chain continues across
//!   files. It resumes the chain where the last complete record left it, so a process
//!   killed mid-append loses at most the record it was writing.
//! - [`verify`]: walks every file in order and names the first record that was changed,
//!   removed, reordered or inserted; a line cut short by a crash is reported as such, and
//!   the chain is checked past it.
//! - [`read`]: the records, filtered by time and run, for export.

#![forbid(unsafe_code)]

pub mod read;
pub mod record;
pub mod verify;
pub mod writer;

pub use record::{GENESIS, Record};
pub use verify::{Problem, Report};
pub use writer::{AuditError, AuditWriter};
