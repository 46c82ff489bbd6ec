//! Shell variables whose value the line itself shows: `S=sudo; $S id` is `sudo id`, and
//! `sh -c '"$0" id' sudo` is too.
//!
//! A value is known only where it is certain. An assignment counts when it runs
//! unconditionally in the shell that later expands it; one inside a branch, a loop, a
//! subshell, a pipeline or a function makes the name unknown instead. Anything that can
//! assign by other means (`eval` of a computed string, `source`, `read`, `declare -n`, a
//! `trap`, a function call) forgets every value and stops learning new ones. A name
//! that is unknown leaves its words dynamic, exactly as before this module existed, so
//! knowing less never loosens a decision.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default)]
pub struct Vars {
    /// `Some(value)` when known, `None` when assigned in a way we cannot follow.
    values: BTreeMap<String, Option<String>>,
    /// Values a name may have without our knowing which (`if …; then S=sudo; fi`, `for
    /// S in ls sudo`): never used to loosen, only to find what a command might be.
    candidates: BTreeMap<String, Vec<String>>,
    /// Names `export` marked: a child shell started directly sees their values.
    exported: BTreeSet<String>,
    /// `$0`, `$1`…: known in a shell started with literal arguments (`sh -c BODY a b`).
    positional: Option<Vec<String>>,
    /// False once something we cannot follow may have assigned any name.
    learning: bool,
}

/// More candidate values than this for one name are not kept.
const MAX_CANDIDATES: usize = 4;

impl Vars {
    /// The variables of a shell that starts here (the top of the line, or `bash -c`):
    /// nothing is known but its positional parameters, when it was given them.
    pub fn new_shell(positional: Option<Vec<String>>) -> Self {
        Vars { positional, learning: true, ..Vars::default() }
    }

    /// The variables of a shell this one starts directly: its exported values.
    pub fn child(&self, positional: Option<Vec<String>>) -> Self {
        let mut child = Vars::new_shell(positional);
        if self.learning {
            for name in &self.exported {
                if let Some(value) = self.values.get(name) {
                    child.values.insert(name.clone(), value.clone());
                    child.exported.insert(name.clone());
                }
            }
        }
        child
    }

    /// What `$name` expands to, when the line shows it.
    pub fn value(&self, name: &str) -> Option<String> {
        if let Some(n) = name.parse::<usize>().ok().filter(|_| name.len() == 1) {
            return self.positional.as_ref()?.get(n).cloned();
        }
        if name == "@" || name == "*" {
            return self.positional.as_ref().map(|p| p.get(1..).unwrap_or(&[]).join(" "));
        }
        if !self.learning {
            return None;
        }
        self.values.get(name).cloned().flatten()
    }

    /// Whether `$name` can only come from the environment the line started with: a
    /// plain name that nothing in the line has assigned, while we still follow every
    /// assignment.
    pub fn is_environments(&self, name: &str) -> bool {
        self.learning
            && !self.values.contains_key(name)
            && !self.candidates.contains_key(name)
            && !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    /// Values `$name` may have when it has no one known value.
    pub fn candidates(&self, name: &str) -> &[String] {
        self.candidates.get(name).map_or(&[], Vec::as_slice)
    }

    /// `name=value` ran; `certain` when unconditionally, in this shell, with a literal value.
    pub fn assign(&mut self, name: &str, value: Option<&str>, certain: bool) {
        let known = value.filter(|_| certain && self.learning).map(str::to_owned);
        if known.is_none() {
            // What it held and what it may now hold are both candidates.
            let previous = self.values.get(name).cloned().flatten();
            for v in previous.into_iter().chain(value.map(str::to_owned)) {
                self.add_candidate(name, v);
            }
        } else {
            self.candidates.remove(name);
        }
        self.values.insert(name.to_owned(), known);
        if name.parse::<usize>().is_ok() || name == "@" || name == "*" {
            self.positional = None;
        }
    }

    /// `for name in a b c`: the loop variable may be any of the words.
    pub fn may_be(&mut self, name: &str, value: &str) {
        self.values.insert(name.to_owned(), None);
        self.add_candidate(name, value.to_owned());
    }

    fn add_candidate(&mut self, name: &str, value: String) {
        let list = self.candidates.entry(name.to_owned()).or_default();
        if !list.contains(&value) && list.len() < MAX_CANDIDATES {
            list.push(value);
        }
    }

    pub fn export(&mut self, name: &str) {
        self.exported.insert(name.to_owned());
    }

    /// Something may have assigned any name: forget everything, learn nothing more.
    /// (Candidates stay: each was assigned at some point, and they only add doubt.)
    pub fn forget_all(&mut self) {
        self.values.clear();
        self.positional = None;
        self.learning = false;
    }

    /// `set -- …`, `shift`: the positional parameters change.
    pub fn forget_positional(&mut self) {
        self.positional = None;
    }
}

/// The name a `$NAME` / `${NAME}` expansion reads, when the expansion is that simple
/// (`${NAME:-x}`, `${#NAME}`, `${NAME[0]}` and the like are not followed).
pub fn simple_expansion(source: &str) -> Option<&str> {
    let name = match source.strip_prefix("${") {
        Some(braced) => braced.strip_suffix('}')?,
        None => source.strip_prefix('$')?,
    };
    let ok = match name {
        "@" | "*" => true,
        _ if name.len() == 1 && name.as_bytes()[0].is_ascii_digit() => true,
        _ => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
    };
    ok.then_some(name)
}

/// Names a word may assign while it expands: `${NAME=x}`, `${NAME:=x}`.
pub fn assigned_by_expansion(raw: &str) -> impl Iterator<Item = &str> {
    raw.match_indices("${").filter_map(move |(i, _)| {
        let rest = &raw[i + 2..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        let after = &rest[end..];
        (end > 0 && (after.starts_with('=') || after.starts_with(":="))).then(|| &rest[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_known_only_when_certain() {
        let mut v = Vars::new_shell(None);
        v.assign("S", Some("sudo"), true);
        assert_eq!(v.value("S").as_deref(), Some("sudo"));
        v.assign("S", Some("ls"), false);
        assert_eq!(v.value("S"), None);
        assert_eq!(v.candidates("S"), ["sudo", "ls"], "both values remain possible");
        v.assign("T", Some("x"), true);
        v.forget_all();
        v.assign("T", Some("y"), true);
        assert_eq!(v.value("T"), None, "nothing is learnt after forget_all");
    }

    #[test]
    fn a_child_shell_sees_only_exported_values() {
        let mut v = Vars::new_shell(None);
        v.assign("S", Some("sudo"), true);
        v.assign("T", Some("ls"), true);
        v.export("S");
        let child = v.child(None);
        assert_eq!(child.value("S").as_deref(), Some("sudo"));
        assert_eq!(child.value("T"), None);
    }

    #[test]
    fn positional_parameters_come_from_the_shell_arguments() {
        let v = Vars::new_shell(Some(vec!["sudo".into(), "id".into(), "-u".into()]));
        assert_eq!(v.value("0").as_deref(), Some("sudo"));
        assert_eq!(v.value("1").as_deref(), Some("id"));
        assert_eq!(v.value("@").as_deref(), Some("id -u"));
        assert_eq!(v.value("5"), None);
        assert_eq!(Vars::new_shell(None).value("0"), None);
    }

    #[test]
    fn expansions_are_read_by_name() {
        assert_eq!(simple_expansion("$S"), Some("S"));
        assert_eq!(simple_expansion("${S}"), Some("S"));
        assert_eq!(simple_expansion("$0"), Some("0"));
        assert_eq!(simple_expansion("$@"), Some("@"));
        assert_eq!(simple_expansion("${S:-x}"), None);
        assert_eq!(simple_expansion("${#S}"), None);
        assert_eq!(assigned_by_expansion(": ${A:=x} ${B=y} ${C:-z}").collect::<Vec<_>>(), vec!["A", "B"]);
    }
}
