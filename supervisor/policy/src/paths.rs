//! Paths as the gate's rules see them.

use std::ffi::OsStr;
use std::path::Path;

/// A path as the gate's path rules see it: relative to the run's working directory
/// when it is inside it, with `.`, empty components, a trailing `/` and `..` resolved
/// by spelling. Without this, `./secret/x`, `secret//x` or the absolute spelling would
/// each slip past a rule on `secret/**`. (A symlink inside the worktree is the one
/// spelling this cannot see through: path rules judge names, confinement judges
/// where they lead.)
pub fn gate_path(raw: &str, work_dir: &Path) -> String {
    use std::path::Component;
    let path = Path::new(raw);
    let absolute = path.is_absolute();
    let mut parts: Vec<&OsStr> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => parts.push(n),
            Component::ParentDir if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            Component::ParentDir if !absolute => parts.push(OsStr::new("..")),
            Component::ParentDir | Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let mut normal: std::path::PathBuf = parts.iter().collect();
    if absolute {
        normal = Path::new("/").join(normal);
        if let Ok(inside) = normal.strip_prefix(work_dir) {
            normal = inside.to_owned();
        }
    }
    match normal.to_string_lossy() {
        s if s.is_empty() => ".".to_owned(),
        s => s.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_reach_the_gate_in_one_spelling() {
        let w = Path::new("/d/conversations/c/repos/demo");
        for (raw, seen) in [
            ("secret/x", "secret/x"),
            ("./secret/x", "secret/x"),
            ("secret//x", "secret/x"),
            ("secret/./x/", "secret/x"),
            ("src/../secret/x", "secret/x"),
            ("/d/conversations/c/repos/demo/secret/x", "secret/x"),
            ("/d/conversations/c/repos/demo//./secret/x", "secret/x"),
            ("/d/conversations/c/repos/demo", "."),
            ("/d/conversations/c/repos/demo/../demo/secret/x", "secret/x"),
            ("/d/conversations/c/repos/demo2/x", "/d/conversations/c/repos/demo2/x"),
            ("../../etc/passwd", "../../etc/passwd"),
            ("a/../../b", "../b"),
            ("/etc//passwd", "/etc/passwd"),
            ("/../etc/passwd", "/etc/passwd"),
            ("", "."),
            (".", "."),
        ] {
            assert_eq!(gate_path(raw, w), seen, "{raw}");
        }
    }
}
