//! The trail's files, in order, and the records in them.

use std::path::{Path, PathBuf};

use crate::record::{Record, hash};

/// The trail's files in `dir`, by the number in their names.
pub fn files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix("audit-"))
            .and_then(|n| n.strip_suffix(".jsonl"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((number, entry.path()));
    }
    out.sort();
    Ok(out)
}

/// The last complete record of a file (a whole line that is one), with its line's hash.
pub fn last_complete(path: &Path) -> std::io::Result<Option<(Record, String)>> {
    let bytes = std::fs::read(path)?;
    let complete = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(end) => &bytes[..end],
        None => return Ok(None),
    };
    Ok(complete.split(|b| *b == b'\n').rev().find_map(|line| Record::parse(line).map(|r| (r, hash(line)))))
}

/// Which records an export wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Records at or after this time (RFC 3339, compared as the trail writes it).
    pub since: Option<String>,
    /// Records about this run.
    pub run: Option<String>,
}

impl Filter {
    pub fn wants(&self, record: &Record) -> bool {
        self.since.as_ref().is_none_or(|since| record.time.as_str() >= since.as_str())
            && self.run.as_ref().is_none_or(|run| record.run() == Some(run.as_str()))
    }
}

/// Every line of the trail that is a record and that `filter` wants, as written, in
/// order, to `out`. Lines that are not records are skipped (verify names them).
pub fn export(dir: &Path, filter: &Filter, out: &mut dyn std::io::Write) -> std::io::Result<u64> {
    let mut count = 0;
    for (_, path) in files(dir)? {
        let bytes = std::fs::read(&path)?;
        for line in bytes.split(|b| *b == b'\n') {
            if let Some(record) = Record::parse(line)
                && filter.wants(&record)
            {
                out.write_all(line)?;
                out.write_all(b"\n")?;
                count += 1;
            }
        }
    }
    Ok(count)
}
