//! The file tools' logic (`read`, `write`, `edit`) on top of [`crate::confine`]: what
//! they return and refuse, apart from the RPC that will carry them.

use std::path::Path;

use crate::confine::{ConfineError, Roots};

/// The most a tool reads of one file; larger files are read in windows.
pub const MAX_FILE_BYTES: usize = 16 * 1024 * 1024;
/// How much of a file's start is looked at to call it binary.
const SNIFF_BYTES: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

impl From<ConfineError> for ToolError {
    fn from(e: ConfineError) -> Self {
        match e {
            ConfineError::Refused { .. } => ToolError::Refused(e.to_string()),
            ConfineError::Io { .. } => ToolError::Failed(e.to_string()),
        }
    }
}

/// What `read` returns: a window of lines, or a note that the file is binary.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutput {
    Text {
        /// The lines of the window, each with its newline.
        text: String,
        /// The 1-based number of the first line in `text`.
        first_line: usize,
        /// Lines in the window.
        lines: usize,
        /// More lines follow the window.
        more: bool,
    },
    Binary {
        bytes: usize,
    },
}

/// Reads `limit` lines from line `offset` (0-based). A file with a NUL in its first
/// 8 KiB, or that is not UTF-8, is binary and is described rather than returned.
pub fn read(roots: &Roots, path: &Path, offset: usize, limit: usize) -> Result<ReadOutput, ToolError> {
    let (bytes, truncated) = roots.read(path, MAX_FILE_BYTES)?;
    if truncated {
        return Err(ToolError::Failed(format!(
            "{}: larger than {} MiB; read it with bash (head, sed -n) in pieces",
            path.display(),
            MAX_FILE_BYTES >> 20
        )));
    }
    if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return Ok(ReadOutput::Binary { bytes: bytes.len() });
    }
    let Ok(text) = std::str::from_utf8(&bytes) else { return Ok(ReadOutput::Binary { bytes: bytes.len() }) };
    let limit = limit.max(1);
    let mut lines = text.split_inclusive('\n').skip(offset);
    let window: Vec<&str> = lines.by_ref().take(limit).collect();
    let more = lines.next().is_some();
    Ok(ReadOutput::Text { text: window.concat(), first_line: offset.saturating_add(1), lines: window.len(), more })
}

pub fn write(roots: &Roots, path: &Path, content: &[u8]) -> Result<(), ToolError> {
    if content.len() > MAX_FILE_BYTES {
        return Err(ToolError::Failed(format!("content over {} MiB", MAX_FILE_BYTES >> 20)));
    }
    Ok(roots.write(path, content)?)
}

/// Replaces the one occurrence of `old` with `new`. Absent or ambiguous is an error
/// and the file is left as it was.
pub fn edit(roots: &Roots, path: &Path, old: &str, new: &str) -> Result<(), ToolError> {
    if old.is_empty() {
        return Err(ToolError::Failed("the string to replace is empty".into()));
    }
    roots.may_change(path)?;
    let (bytes, truncated) = roots.read(path, MAX_FILE_BYTES)?;
    if truncated {
        return Err(ToolError::Failed(format!("{}: larger than {} MiB", path.display(), MAX_FILE_BYTES >> 20)));
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ToolError::Failed(format!("{}: not UTF-8 text; edit works on text files", path.display())))?;
    match text.matches(old).count() {
        0 => Err(ToolError::Failed(format!("{}: the text to replace is not in the file", path.display()))),
        1 => Ok(roots.write(path, text.replacen(old, new, 1).as_bytes())?),
        n => Err(ToolError::Failed(format!(
            "{}: the text to replace appears {n} times; include more context so it appears once",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::work_roots as roots;

    #[test]
    fn read_returns_windows_of_lines_and_describes_binaries() {
        let (_t, work, roots) = roots();
        std::fs::write(work.join("f"), "a\nb\nc\nd").unwrap();
        let out = read(&roots, Path::new("f"), 1, 2).unwrap();
        assert_eq!(out, ReadOutput::Text { text: "b\nc\n".into(), first_line: 2, lines: 2, more: true });
        let out = read(&roots, Path::new("f"), 3, 10).unwrap();
        assert_eq!(out, ReadOutput::Text { text: "d".into(), first_line: 4, lines: 1, more: false });
        std::fs::write(work.join("bin"), b"\x7fELF\0\0\x01").unwrap();
        assert_eq!(read(&roots, Path::new("bin"), 0, 10).unwrap(), ReadOutput::Binary { bytes: 7 });
        std::fs::write(work.join("latin1"), b"caf\xe9\n").unwrap();
        assert_eq!(read(&roots, Path::new("latin1"), 0, 10).unwrap(), ReadOutput::Binary { bytes: 5 });
        assert!(matches!(read(&roots, Path::new("../x"), 0, 1), Err(ToolError::Refused(_))));
    }

    #[test]
    fn edit_replaces_exactly_one_occurrence_or_changes_nothing() {
        let (_t, work, roots) = roots();
        std::fs::write(work.join("f"), "let x = 1;\nlet y = 1;\n").unwrap();
        edit(&roots, Path::new("f"), "x = 1", "x = 2").unwrap();
        assert_eq!(std::fs::read_to_string(work.join("f")).unwrap(), "let x = 2;\nlet y = 1;\n");
        let absent = edit(&roots, Path::new("f"), "z = 1", "z = 2").unwrap_err().to_string();
        assert!(absent.contains("not in the file"), "{absent}");
        let ambiguous = edit(&roots, Path::new("f"), " = ", " := ").unwrap_err().to_string();
        assert!(ambiguous.contains("appears 2 times"), "{ambiguous}");
        assert_eq!(std::fs::read_to_string(work.join("f")).unwrap(), "let x = 2;\nlet y = 1;\n");
        assert!(edit(&roots, Path::new("f"), "", "x").is_err());
    }

    #[test]
    fn write_creates_and_replaces_whole_files() {
        let (_t, work, roots) = roots();
        write(&roots, Path::new("src/new.rs"), b"fn main() {}\n").unwrap();
        write(&roots, Path::new("src/new.rs"), b"// replaced\n").unwrap();
        assert_eq!(std::fs::read_to_string(work.join("src/new.rs")).unwrap(), "// replaced\n");
        let leftovers: Vec<_> = std::fs::read_dir(work.join("src")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temp files left: {leftovers:?}");
    }
}
