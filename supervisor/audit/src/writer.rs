//! Appending to the trail. One `write` of one whole line per record, to a file opened
//! for appending: a process killed mid-append leaves at most that line cut short, and
//! the next writer terminates it and goes on from the last complete record.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::read::{files, last_complete};
use crate::record::{GENESIS, Record, VERSION, hash};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open the audit trail in {dir}: {source}")]
    Open { dir: PathBuf, source: std::io::Error },
    #[error("cannot append to the audit trail {path}: {source}")]
    Append { path: PathBuf, source: std::io::Error },
}

/// A new file is started once the current one holds this much.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

pub struct AuditWriter {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    /// The number in the current file's name.
    number: u64,
    written: u64,
    max_file_bytes: u64,
    seq: u64,
    prev: String,
}

impl AuditWriter {
    /// Opens the trail in `dir` (made, private, if missing) where it left off.
    pub fn open(dir: &Path, max_file_bytes: u64) -> Result<Self, AuditError> {
        let fail = |source| AuditError::Open { dir: dir.to_owned(), source };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(fail)?;
        let existing = files(dir).map_err(fail)?;
        // The last complete record of the newest file that has one.
        let (mut seq, mut prev) = (0, GENESIS.to_owned());
        for (_, path) in existing.iter().rev() {
            if let Some((record, line_hash)) = last_complete(path).map_err(fail)? {
                (seq, prev) = (record.seq, line_hash);
                break;
            }
        }
        let number = existing.last().map_or(1, |(n, _)| *n);
        let path = dir.join(file_name(number));
        let mut file = append(&path).map_err(fail)?;
        let mut written = file.metadata().map_err(fail)?.len();
        if written > 0 && !ends_with_newline(&path).map_err(fail)? {
            // A line cut short by a crash: ended here, so that the next record starts a
            // line of its own. Verify reports it.
            file.write_all(b"\n").map_err(fail)?;
            written += 1;
        }
        Ok(Self { dir: dir.to_owned(), file, path, number, written, max_file_bytes, seq, prev })
    }

    /// Appends one record; returns its sequence number.
    pub fn append(&mut self, kind: &str, subject: &str, payload: serde_json::Value) -> Result<u64, AuditError> {
        if self.written >= self.max_file_bytes {
            self.rotate()?;
        }
        let record = Record {
            v: VERSION,
            seq: self.seq + 1,
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: kind.to_owned(),
            subject: subject.to_owned(),
            payload,
            prev: self.prev.clone(),
        };
        let mut line = record.line();
        let line_hash = hash(line.as_bytes());
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|source| AuditError::Append { path: self.path.clone(), source })?;
        self.written += line.len() as u64;
        self.seq = record.seq;
        self.prev = line_hash;
        Ok(record.seq)
    }

    /// The hash of the last record written: what `ccctl audit head` prints.
    pub fn head(&self) -> (u64, &str) {
        (self.seq, &self.prev)
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        let number = self.number + 1;
        let path = self.dir.join(file_name(number));
        self.file = append(&path).map_err(|source| AuditError::Append { path: path.clone(), source })?;
        (self.number, self.path, self.written) = (number, path, 0);
        Ok(())
    }
}

pub fn file_name(number: u64) -> String {
    format!("audit-{number:06}.jsonl")
}

fn append(path: &Path) -> std::io::Result<File> {
    // Never through a link.
    OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

fn ends_with_newline(path: &Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}
