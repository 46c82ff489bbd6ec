//! `apply_patch`: a unified diff of one or more files, applied all or nothing. Every
//! hunk of every file is applied in memory first; only when all of them apply is
//! anything written, and a write that fails half-way puts back what it had replaced.
//! Hunks must match their context exactly (diffy applies no fuzz): a patch written
//! against other text fails rather than landing somewhere else.

use std::path::{Path, PathBuf};

use crate::confine::Roots;
use crate::files::{MAX_FILE_BYTES, ToolError};

/// What applying did to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created(PathBuf),
    Modified(PathBuf),
    Deleted(PathBuf),
}

struct Planned {
    path: PathBuf,
    before: Option<Vec<u8>>,
    after: Option<String>,
}

/// The file name in a `---`/`+++` line: `/dev/null` is none; git's `a/` and `b/` are
/// dropped, as is a trailing tab and timestamp.
fn file_name(raw: &str) -> Option<PathBuf> {
    let name = raw.split('\t').next().unwrap_or(raw).trim_end();
    if name == "/dev/null" {
        return None;
    }
    let name = name.strip_prefix("a/").or_else(|| name.strip_prefix("b/")).unwrap_or(name);
    Some(PathBuf::from(name))
}

/// A path with `.` components and repeated slashes dropped, for telling whether two
/// names in a patch are one file.
fn spelling(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

/// Splits a multi-file diff into one text per file, each starting at its `---` line.
fn split(text: &str) -> Vec<&str> {
    let mut starts = Vec::new();
    let mut offset = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("--- ") && lines.get(i + 1).is_some_and(|next| next.starts_with("+++ ")) {
            starts.push(offset);
        }
        offset += line.len();
    }
    let mut out = Vec::new();
    for (k, start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(text.len());
        // Trailing `diff --git` / `index` lines of the next file belong to it, not here;
        // diffy ignores what follows the last hunk.
        out.push(&text[*start..end]);
    }
    out
}

pub fn apply_patch(roots: &Roots, text: &str) -> Result<Vec<Change>, ToolError> {
    let pieces = split(text);
    if pieces.is_empty() {
        return Err(ToolError::Failed("no file in the patch (expected unified diff `---`/`+++` headers)".into()));
    }
    let mut plan: Vec<Planned> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let patch =
            diffy::Patch::from_str(piece).map_err(|e| ToolError::Failed(format!("the patch does not parse: {e}")))?;
        let old = patch.original().and_then(file_name);
        let new = patch.modified().and_then(file_name);
        let Some(path) = new.clone().or_else(|| old.clone()) else {
            return Err(ToolError::Failed("a file in the patch names neither an old nor a new file".into()));
        };
        if let (Some(o), Some(n)) = (&old, &new)
            && spelling(o) != spelling(n)
        {
            return Err(ToolError::Failed(format!(
                "{} -> {}: renames are not supported; give a deletion and a creation",
                o.display(),
                n.display()
            )));
        }
        if plan.iter().any(|p| spelling(&p.path) == spelling(&path)) {
            return Err(ToolError::Failed(format!("{}: named twice in one patch", path.display())));
        }
        roots.may_change(&path)?;
        if let Some(o) = old.as_ref().filter(|o| **o != path) {
            roots.may_change(o)?;
        }
        let before = match &old {
            Some(o) => Some(roots.read(o, MAX_FILE_BYTES).map(|(b, _)| b)?),
            // A creation must not replace a file (nor would its undo know what to put back).
            None => match roots.open_read(&path) {
                Ok(_) => {
                    return Err(ToolError::Failed(format!(
                        "{}: already exists; a creation (--- /dev/null) must name a new file",
                        path.display()
                    )));
                }
                Err(crate::confine::ConfineError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    None
                }
                Err(e) => return Err(e.into()),
            },
        };
        let base = match &before {
            Some(b) => std::str::from_utf8(b).map_err(|_| {
                ToolError::Failed(format!("{}: not UTF-8 text; the patch cannot apply", path.display()))
            })?,
            None => "",
        };
        let after = diffy::apply(base, &patch)
            .map_err(|e| ToolError::Failed(format!("{}: {e}; nothing was changed", path.display())))?;
        if new.is_none() && !after.is_empty() {
            return Err(ToolError::Failed(format!(
                "{}: a deletion must remove every line; nothing was changed",
                path.display()
            )));
        }
        plan.push(Planned { path, before, after: new.map(|_| after) });
    }
    commit(roots, &plan)
}

/// Writes the plan; on a failure, puts back what the earlier steps replaced.
fn commit(roots: &Roots, plan: &[Planned]) -> Result<Vec<Change>, ToolError> {
    let mut done: Vec<&Planned> = Vec::new();
    let mut changes = Vec::new();
    for step in plan {
        let result = match &step.after {
            Some(content) => roots.write(&step.path, content.as_bytes()),
            None => roots.remove(&step.path),
        };
        if let Err(e) = result {
            for undo in done.iter().rev() {
                let _ = match &undo.before {
                    Some(original) => roots.write(&undo.path, original),
                    None => roots.remove(&undo.path),
                };
            }
            return Err(ToolError::from(e));
        }
        changes.push(match (&step.before, &step.after) {
            (None, _) => Change::Created(step.path.clone()),
            (Some(_), None) => Change::Deleted(step.path.clone()),
            (Some(_), Some(_)) => Change::Modified(step.path.clone()),
        });
        done.push(step);
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> (tempfile::TempDir, PathBuf, Roots) {
        let (tmp, work, roots) = crate::confine::work_roots();
        std::fs::write(tmp.path().join("outside"), "keep\n").unwrap();
        (tmp, work, roots)
    }

    const A: &str = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n";

    #[test]
    fn a_patch_whose_third_hunk_fails_changes_no_file() {
        let (_t, work, roots) = roots();
        std::fs::write(work.join("a.txt"), A).unwrap();
        std::fs::write(work.join("b.txt"), "x\n").unwrap();
        let patch = "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+y\n\
                     --- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-1\n+one\n 2\n@@ -7,2 +7,2 @@\n-7\n+seven\n 8\n@@ -14,2 +14,2 @@\n-NOT THERE\n+fourteen\n 15\n";
        let err = apply_patch(&roots, patch).unwrap_err().to_string();
        assert!(err.contains("a.txt") && err.contains("hunk #3") && err.contains("nothing was changed"), "{err}");
        assert_eq!(std::fs::read_to_string(work.join("a.txt")).unwrap(), A);
        assert_eq!(std::fs::read_to_string(work.join("b.txt")).unwrap(), "x\n");
    }

    #[test]
    fn modifies_creates_and_deletes() {
        let (_t, work, roots) = roots();
        std::fs::write(work.join("a.txt"), A).unwrap();
        std::fs::write(work.join("gone.txt"), "bye\n").unwrap();
        let patch = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-1\n+one\n 2\n\
                     --- /dev/null\n+++ b/src/new.rs\n@@ -0,0 +1,2 @@\n+fn main() {\n+}\n\
                     --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
        let changes = apply_patch(&roots, patch).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Modified("a.txt".into()),
                Change::Created("src/new.rs".into()),
                Change::Deleted("gone.txt".into())
            ]
        );
        assert!(std::fs::read_to_string(work.join("a.txt")).unwrap().starts_with("one\n2\n"));
        assert_eq!(std::fs::read_to_string(work.join("src/new.rs")).unwrap(), "fn main() {\n}\n");
        assert!(!work.join("gone.txt").exists());
    }

    #[test]
    fn a_creation_over_a_file_a_rename_and_one_file_twice_are_refused_and_change_nothing() {
        let (_t, work, roots) = roots();
        std::fs::write(work.join("README.md"), "keep\n").unwrap();
        std::fs::create_dir(work.join("src")).unwrap();
        for patch in [
            "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/src\n@@ -0,0 +1 @@\n+x\n",
            "--- a/README.md\n+++ b/other.md\n@@ -1 +1 @@\n-keep\n+moved\n",
            "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-keep\n+one\n--- a/./README.md\n+++ b/./README.md\n@@ -1 +1 @@\n-keep\n+two\n",
        ] {
            assert!(apply_patch(&roots, patch).is_err(), "{patch}");
            assert_eq!(std::fs::read_to_string(work.join("README.md")).unwrap(), "keep\n", "{patch}");
            assert!(!work.join("other.md").exists());
        }
    }

    #[test]
    fn a_patch_naming_a_path_outside_is_refused_and_changes_nothing() {
        let (t, work, roots) = roots();
        std::fs::write(work.join("a.txt"), "x\n").unwrap();
        let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n--- a/../outside\n+++ b/../outside\n@@ -1 +1 @@\n-keep\n+pwned\n";
        let err = apply_patch(&roots, patch).unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err}");
        assert_eq!(std::fs::read_to_string(t.path().join("outside")).unwrap(), "keep\n");
        assert_eq!(std::fs::read_to_string(work.join("a.txt")).unwrap(), "x\n");
        assert!(apply_patch(&roots, "not a patch").unwrap_err().to_string().contains("no file in the patch"));
    }
}
