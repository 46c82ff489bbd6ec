//! A walk of a directory tree beneath a root, by directory handles: no symlink is
//! followed, `.git` is skipped, and `.gitignore` files (read through the same handles)
//! are honoured with the `ignore` crate's matcher, ripgrep's own.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use nix::dir::{Dir, Type};

use crate::confine::{Roots, open_child};
use crate::files::ToolError;

/// Deeper trees than this are not walked further.
const MAX_DEPTH: usize = 64;

/// One entry the walk found: its path as the caller spelled the start, plus the rest.
pub struct Found<'a> {
    pub path: &'a Path,
    pub parent: &'a OwnedFd,
    pub name: &'a OsStr,
    pub is_dir: bool,
}

struct Level {
    dir: OwnedFd,
    /// The path from the start, for matching and for display.
    rel: PathBuf,
    ignore: Option<Gitignore>,
}

/// Walks `start`, calling `visit` for every file and directory not ignored, until it
/// returns false or `limit` entries were visited. Returns whether the walk stopped early.
pub fn walk(
    roots: &Roots,
    start: &Path,
    limit: usize,
    mut visit: impl FnMut(Found<'_>) -> bool,
) -> Result<bool, ToolError> {
    let top = roots.open_dir(start)?;
    let mut stack = Vec::new();
    let mut levels: Vec<Level> = Vec::new();
    let ignore = read_gitignore(&top, Path::new(""));
    stack.push((Level { dir: top, rel: PathBuf::new(), ignore }, 0usize));
    let mut seen = 0usize;
    while let Some((level, depth)) = stack.pop() {
        // The ignore files that apply: this directory's and its ancestors' on the way.
        levels.truncate(depth);
        let dup = nix::unistd::dup(&level.dir)
            .map_err(|e| ToolError::Failed(format!("cannot list {}: {e}", start.display())))?;
        let mut listing =
            Dir::from_fd(dup).map_err(|e| ToolError::Failed(format!("cannot list {}: {e}", start.display())))?;
        let mut subdirs = Vec::new();
        let mut entries: Vec<(std::ffi::OsString, bool)> = listing
            .iter()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = std::ffi::OsString::from(
                    std::os::unix::ffi::OsStrExt::from_bytes(e.file_name().to_bytes()) as &OsStr
                );
                (name != "." && name != "..").then_some((name, e.file_type()))
            })
            .filter_map(|(name, kind)| match kind {
                Some(Type::Directory) => Some((name, true)),
                Some(Type::File) => Some((name, false)),
                _ => None, // links are not followed; devices, fifos and sockets are not files to read
            })
            .collect();
        entries.sort();
        levels.push(level);
        for (name, is_dir) in entries {
            if is_dir && name == ".git" {
                continue;
            }
            let rel = levels[depth].rel.join(&name);
            if ignored(&levels, &rel, is_dir) {
                continue;
            }
            seen += 1;
            if seen > limit {
                return Ok(true);
            }
            let shown = start.join(&rel);
            if !visit(Found { path: &shown, parent: &levels[depth].dir, name: &name, is_dir }) {
                return Ok(true);
            }
            if is_dir && depth + 1 < MAX_DEPTH {
                subdirs.push((name, rel));
            }
        }
        for (name, rel) in subdirs.into_iter().rev() {
            if let Ok(dir) = open_child(&levels[depth].dir, &name, true) {
                let ignore = read_gitignore(&dir, &rel);
                stack.push((Level { dir, rel, ignore }, depth + 1));
            }
        }
    }
    Ok(false)
}

/// The deepest `.gitignore` with an opinion decides, as git does.
fn ignored(levels: &[Level], rel: &Path, is_dir: bool) -> bool {
    for level in levels.iter().rev() {
        if let Some(gi) = &level.ignore {
            let m = gi.matched(rel, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
    }
    false
}

fn read_gitignore(dir: &OwnedFd, rel: &Path) -> Option<Gitignore> {
    use std::io::Read;
    let fd = open_child(dir, OsStr::new(".gitignore"), false).ok()?;
    let mut text = String::new();
    std::fs::File::from(fd).take(1 << 20).read_to_string(&mut text).ok()?;
    let mut builder = GitignoreBuilder::new(rel);
    for line in text.lines() {
        let _ = builder.add_line(None, line);
    }
    builder.build().ok()
}
