//! `find` (a glob over paths), `search` (a regex over contents, with ripgrep's
//! searcher) and `search_files` (a fuzzy match over names), all over [`crate::walk`].

use std::path::{Path, PathBuf};

use globset::GlobBuilder;
use grep_regex::RegexMatcher;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};

use crate::confine::{Roots, open_child};
use crate::files::ToolError;
use crate::walk::walk;

/// Entries a walk visits at most; more and the answer says it stopped.
pub const MAX_WALK: usize = 500_000;

#[derive(Debug, PartialEq, Eq)]
pub struct Listing<T> {
    pub items: Vec<T>,
    /// The walk or the result list stopped at its limit.
    pub truncated: bool,
}

/// Paths under `start` matching `glob` (`*.rs` matches in every directory; a glob with
/// a `/` is matched against the whole relative path).
pub fn find(roots: &Roots, start: &Path, glob: &str, max: usize) -> Result<Listing<PathBuf>, ToolError> {
    let pattern = if glob.contains('/') { glob.to_owned() } else { format!("**/{glob}") };
    let matcher = GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::Failed(format!("bad glob {glob:?}: {}", e.kind())))?
        .compile_matcher();
    let mut items = Vec::new();
    let stopped = walk(roots, start, MAX_WALK, |f| {
        let rel = f.path.strip_prefix(start).unwrap_or(f.path);
        if !f.is_dir && matcher.is_match(rel) {
            items.push(f.path.to_owned());
        }
        items.len() < max
    })?;
    items.sort();
    Ok(Listing { truncated: stopped, items })
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hit {
    pub path: PathBuf,
    pub line: u64,
    pub text: String,
}

/// Lines matching `pattern` in the text files under `start`; binary files are skipped.
pub fn search(roots: &Roots, start: &Path, pattern: &str, max: usize) -> Result<Listing<Hit>, ToolError> {
    let matcher = RegexMatcher::new_line_matcher(pattern)
        .map_err(|e| ToolError::Failed(format!("bad regex {pattern:?}: {}", one_line(&e.to_string()))))?;
    let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
    let mut items: Vec<Hit> = Vec::new();
    let stopped = walk(roots, start, MAX_WALK, |f| {
        if f.is_dir {
            return true;
        }
        let Ok(fd) = open_child(f.parent, f.name, false) else { return true };
        let file = std::fs::File::from(fd);
        let path = f.path.to_owned();
        let _ = searcher.search_file(
            &matcher,
            &file,
            UTF8(|line, text| {
                items.push(Hit {
                    path: path.clone(),
                    line,
                    text: text.trim_end_matches(['\n', '\r']).chars().take(500).collect(),
                });
                Ok(items.len() < max)
            }),
        );
        items.len() < max
    })?;
    items.sort();
    Ok(Listing { truncated: stopped, items })
}

/// File names containing the query's characters in order (case-insensitive), best
/// first: shorter spans, then shorter paths.
pub fn search_files(roots: &Roots, start: &Path, query: &str, max: usize) -> Result<Listing<PathBuf>, ToolError> {
    let query: Vec<char> = query.to_lowercase().chars().filter(|c| !c.is_whitespace()).collect();
    if query.is_empty() {
        return Err(ToolError::Failed("an empty query".into()));
    }
    let mut scored: Vec<(usize, usize, PathBuf)> = Vec::new();
    let stopped = walk(roots, start, MAX_WALK, |f| {
        if !f.is_dir {
            let rel = f.path.strip_prefix(start).unwrap_or(f.path).to_string_lossy().to_lowercase();
            if let Some(span) = fuzzy_span(&rel, &query) {
                scored.push((span, rel.len(), f.path.to_owned()));
            }
        }
        true
    })?;
    scored.sort();
    let truncated = stopped || scored.len() > max;
    Ok(Listing { items: scored.into_iter().take(max).map(|(_, _, p)| p).collect(), truncated })
}

/// The length of the shortest window of `text` that holds `query` in order, from the
/// last possible start; None when it does not.
fn fuzzy_span(text: &str, query: &[char]) -> Option<usize> {
    let chars: Vec<char> = text.chars().collect();
    let mut best: Option<usize> = None;
    for start in 0..chars.len() {
        if chars[start] != query[0] {
            continue;
        }
        let mut q = 0;
        for (i, c) in chars.iter().enumerate().skip(start) {
            if *c == query[q] {
                q += 1;
                if q == query.len() {
                    let span = i - start + 1;
                    best = Some(best.map_or(span, |b| b.min(span)));
                    break;
                }
            }
        }
    }
    best
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, PathBuf, Roots) {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        for d in ["src/deep", "target/debug", ".git/objects", "docs"] {
            std::fs::create_dir_all(work.join(d)).unwrap();
        }
        std::fs::write(work.join(".gitignore"), "target/\n*.log\n!keep.log\n").unwrap();
        std::fs::write(work.join("src/main.rs"), "fn main() {\n    // TODO: more\n}\n").unwrap();
        std::fs::write(work.join("src/deep/lib.rs"), "pub fn todo() {} // TODO later\n").unwrap();
        std::fs::write(work.join("src/deep/.gitignore"), "generated.rs\n").unwrap();
        std::fs::write(work.join("src/deep/generated.rs"), "// TODO generated\n").unwrap();
        std::fs::write(work.join("target/debug/out.rs"), "// TODO built\n").unwrap();
        std::fs::write(work.join("run.log"), "TODO log\n").unwrap();
        std::fs::write(work.join("keep.log"), "TODO kept\n").unwrap();
        std::fs::write(work.join(".git/objects/x"), "TODO object\n").unwrap();
        std::fs::write(work.join("docs/blob.bin"), b"TODO\0binary").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret.rs"), "// TODO secret\n").unwrap();
        symlink(tmp.path().join("outside"), work.join("src/escape")).unwrap();
        symlink(tmp.path().join("outside/secret.rs"), work.join("src/link.rs")).unwrap();
        let roots = Roots::open(vec![(work.clone(), true)]).unwrap();
        (tmp, work, roots)
    }

    #[test]
    fn find_honours_gitignore_and_never_follows_links() {
        let (_t, _w, roots) = tree();
        let found = find(&roots, Path::new("."), "*.rs", 100).unwrap();
        let names: Vec<String> = found.items.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, vec!["./src/deep/lib.rs", "./src/main.rs"], "{names:?}");
        assert!(!found.truncated);
        let logs = find(&roots, Path::new("."), "*.log", 100).unwrap();
        assert_eq!(logs.items, vec![PathBuf::from("./keep.log")]);
        let limited = find(&roots, Path::new("src"), "*.rs", 1).unwrap();
        assert_eq!((limited.items.len(), limited.truncated), (1, true));
        assert!(matches!(find(&roots, Path::new(".."), "*", 10), Err(ToolError::Refused(_))));
        assert!(find(&roots, Path::new("."), "src/[", 10).unwrap_err().to_string().contains("bad glob"));
    }

    #[test]
    fn search_finds_lines_in_text_files_only_inside() {
        let (_t, _w, roots) = tree();
        let hits = search(&roots, Path::new("."), "TODO", 100).unwrap();
        let got: Vec<(String, u64)> = hits.items.iter().map(|h| (h.path.display().to_string(), h.line)).collect();
        assert_eq!(
            got,
            vec![("./keep.log".into(), 1), ("./src/deep/lib.rs".into(), 1), ("./src/main.rs".into(), 2)],
            "{got:?}"
        );
        assert_eq!(hits.items[2].text, "    // TODO: more");
        assert!(search(&roots, Path::new("."), "(", 10).unwrap_err().to_string().contains("bad regex"));
    }

    #[test]
    fn search_files_ranks_fuzzy_name_matches() {
        let (_t, _w, roots) = tree();
        let found = search_files(&roots, Path::new("."), "mainrs", 10).unwrap();
        assert_eq!(found.items.first(), Some(&PathBuf::from("./src/main.rs")));
        assert!(search_files(&roots, Path::new("."), "zzz", 10).unwrap().items.is_empty());
        assert_eq!(fuzzy_span("src/deep/lib.rs", &['l', 'i', 'b']), Some(3));
    }
}
