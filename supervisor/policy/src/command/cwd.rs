//! The directory a command runs in, followed through `cd`, `pushd` and `popd`, so that
//! `cd / && rm -rf *` is judged as `rm -rf /*`.
//!
//! Where the line may be is a small set of places: after `cd X || …` the next command
//! may run in either. A target the line computes (`cd "$D"`) is unknown, and unknown is
//! judged as `/`, the worst case for every destructive path. The run's own work dir is
//! `Start`; a long climb out of it (`../../..`) counts as reaching `/`.

use super::words::Arg;

/// Climbing this many levels above the work dir is taken to reach `/`.
const CLIMB_TO_ROOT: usize = 3;
/// More possible places than this and the line is anywhere.
const MAX_PLACES: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    /// The directory the line starts in (the run's work dir).
    Start,
    Root,
    Home,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    base: Base,
    /// Levels above the base (only for `Start`; Root and Home have none).
    up: usize,
    parts: Vec<String>,
}

impl Place {
    const START: Place = Place { base: Base::Start, up: 0, parts: Vec::new() };
    const ROOT: Place = Place { base: Base::Root, up: 0, parts: Vec::new() };
    const HOME: Place = Place { base: Base::Home, up: 0, parts: Vec::new() };

    /// This place with a relative path walked from it.
    fn join(&self, path: &str) -> Place {
        let mut place = self.clone();
        for component in path.split('/') {
            match component {
                "" | "." => {}
                ".." => place.climb(),
                other => place.parts.push(other.to_owned()),
            }
        }
        place
    }

    fn climb(&mut self) {
        if self.parts.pop().is_some() {
            return;
        }
        match self.base {
            Base::Root => {}
            // Above a home directory is the directory of homes.
            Base::Home => *self = Place { base: Base::Root, up: 0, parts: vec!["home".into()] },
            Base::Start => {
                self.up += 1;
                if self.up >= CLIMB_TO_ROOT {
                    *self = Place::ROOT;
                }
            }
        }
    }

    fn render(&self) -> String {
        let tail = self.parts.join("/");
        match self.base {
            Base::Root => format!("/{tail}"),
            Base::Home if tail.is_empty() => "~".to_owned(),
            Base::Home => format!("~/{tail}"),
            Base::Start => {
                let ups = "../".repeat(self.up);
                if tail.is_empty() { ups.trim_end_matches('/').to_owned() } else { format!("{ups}{tail}") }
            }
        }
    }
}

/// Where the next command may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cwd {
    places: Vec<Place>,
}

impl Default for Cwd {
    fn default() -> Self {
        Cwd { places: vec![Place::START] }
    }
}

impl Cwd {
    /// Anywhere: judged as `/`.
    pub fn unknown() -> Cwd {
        Cwd { places: vec![Place::ROOT] }
    }

    /// Still where the line started.
    pub fn is_start(&self) -> bool {
        self.places == [Place::START]
    }

    /// `cd TARGET` from every place we may be in. `None` is a target we cannot read.
    pub fn change(&mut self, target: Option<&Arg>) {
        let Some(target) = target else {
            *self = Cwd::unknown();
            return;
        };
        let places = match destination(target) {
            Some(Destination::Absolute(place)) => vec![place],
            Some(Destination::Relative(path)) => self.places.iter().map(|p| p.join(&path)).collect(),
            None => vec![Place::ROOT],
        };
        *self = Cwd { places };
        self.places.dedup();
    }

    /// After a branch: we may be where either path left us.
    pub fn union(&mut self, other: &Cwd) {
        for p in &other.places {
            if !self.places.contains(p) {
                self.places.push(p.clone());
            }
        }
        if self.places.len() > MAX_PLACES {
            *self = Cwd::unknown();
        }
    }

    /// The path as it names a file from each place we may be in. An absolute path, a
    /// home path and a word we cannot read are given back as they are.
    pub fn resolve(&self, arg: &Arg) -> Vec<Arg> {
        if let Some(named) = named_home(arg) {
            return vec![named];
        }
        let t = arg.text.as_str();
        if !arg.literal || t.is_empty() || t.starts_with('/') || t.starts_with('-') || self.is_start() && !climbs(t) {
            return vec![arg.clone()];
        }
        self.places
            .iter()
            .map(|p| {
                let place = p.join(t);
                Arg { text: place.render(), home: place.base == Base::Home, ..arg.clone() }
            })
            .collect()
    }
}

fn climbs(path: &str) -> bool {
    path.starts_with("..")
}

enum Destination {
    Absolute(Place),
    Relative(String),
}

/// Where `cd` goes: `~`, `$HOME`, `~/x`, `/x`, `x`; None when the line does not show it.
fn destination(target: &Arg) -> Option<Destination> {
    let t = target.text.trim_matches('"');
    if target.home {
        let rest = ["~", "${HOME}", "$HOME"].iter().find_map(|p| t.strip_prefix(p))?;
        if !rest.is_empty() && !rest.starts_with('/') {
            return None;
        }
        // The rest must be literal too: `~/"$X"` is somewhere we cannot say.
        if rest.contains(['$', '`', '"', '\'', '\\']) {
            return None;
        }
        return Some(Destination::Absolute(Place::HOME.join(rest)));
    }
    if let Some(named) = named_home(target) {
        return Some(Destination::Absolute(Place::ROOT.join(&named.text)));
    }
    if !target.literal || target.glob {
        return None;
    }
    match t.strip_prefix('/') {
        Some(rest) => Some(Destination::Absolute(Place::ROOT.join(rest))),
        None => Some(Destination::Relative(t.to_owned())),
    }
}

/// `~root/x` is `/root/x`; `~bob` is `/home/bob`.
fn named_home(arg: &Arg) -> Option<Arg> {
    let rest = arg.text.strip_prefix('~')?;
    let (name, tail) = rest.split_once('/').map_or((rest, ""), |(n, t)| (n, t));
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        return None;
    }
    let home = if name == "root" { "/root".to_owned() } else { format!("/home/{name}") };
    let text = if tail.is_empty() { home } else { format!("{home}/{tail}") };
    Some(Arg { text, literal: true, home: false, ..arg.clone() })
}

/// What `cd`, `pushd` and `popd` do to where the line is, with the directory stack.
#[derive(Debug, Clone, Default)]
pub struct DirStack {
    pub cwd: Cwd,
    previous: Option<Cwd>,
    stack: Vec<Cwd>,
    /// `CDPATH` was set in the line: a bare relative `cd` may go anywhere.
    pub cdpath: bool,
}

impl DirStack {
    pub fn builtin(&mut self, name: &str, args: &[Arg]) {
        let operands: Vec<&Arg> = {
            let mut rest = args;
            while let Some(a) = rest.first() {
                if a.is("--") {
                    rest = &rest[1..];
                    break;
                }
                if a.literal
                    && a.text.len() > 1
                    && a.text.starts_with('-')
                    && !a.text[1..].starts_with(char::is_numeric)
                {
                    rest = &rest[1..];
                    continue;
                }
                break;
            }
            rest.iter().collect()
        };
        let before = self.cwd.clone();
        match name {
            "cd" | "chdir" => match operands.first() {
                None => self.cwd.change(Some(&Arg { home: true, ..Arg::dynamic("~") })),
                Some(t) if t.is("-") => self.cwd = self.previous.clone().unwrap_or_else(Cwd::unknown),
                Some(t) => self.go(t),
            },
            "pushd" => match operands.first() {
                Some(t) if t.literal && (t.text.starts_with('+') || t.text.starts_with('-')) => {
                    self.cwd = Cwd::unknown()
                }
                Some(t) => {
                    self.stack.push(self.cwd.clone());
                    self.go(t);
                }
                None => match self.stack.pop() {
                    Some(top) => {
                        self.stack.push(self.cwd.clone());
                        self.cwd = top;
                    }
                    None => self.cwd = Cwd::unknown(),
                },
            },
            "popd" => match (operands.first(), self.stack.pop()) {
                (None, Some(top)) => self.cwd = top,
                _ => self.cwd = Cwd::unknown(),
            },
            _ => return,
        }
        self.previous = Some(before);
    }

    fn go(&mut self, target: &Arg) {
        let bare_relative = target.literal && !target.text.starts_with(['/', '.', '~']) && !target.home;
        if self.cdpath && bare_relative {
            self.cwd = Cwd::unknown();
        } else {
            self.cwd.change(Some(target));
        }
    }

    /// Something we cannot follow may have changed directory (`source`, a function).
    pub fn lost(&mut self) {
        self.cwd = Cwd::unknown();
        self.previous = None;
        self.stack.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: &[(&str, &[&str])]) -> DirStack {
        let mut d = DirStack::default();
        for (name, args) in line {
            let args: Vec<Arg> = args
                .iter()
                .map(|a| {
                    if a.starts_with('~') && !a[1..].starts_with(char::is_alphanumeric) {
                        Arg { home: true, ..Arg::dynamic(*a) }
                    } else {
                        Arg::word(*a)
                    }
                })
                .collect();
            d.builtin(name, &args);
        }
        d
    }

    fn judged(d: &DirStack, path: &str) -> Vec<String> {
        d.cwd.resolve(&Arg::word(path)).into_iter().map(|a| a.text).collect()
    }

    #[test]
    fn relative_paths_are_judged_where_they_run() {
        assert_eq!(judged(&at(&[("cd", &["/etc"])]), "*"), ["/etc/*"]);
        assert_eq!(judged(&at(&[("cd", &["/"])]), "usr"), ["/usr"]);
        assert_eq!(judged(&at(&[("cd", &["~"])]), "*"), ["~/*"]);
        assert_eq!(judged(&at(&[("cd", &[])]), "."), ["~"]);
        assert_eq!(judged(&at(&[("cd", &["/usr/lib"]), ("cd", &[".."])]), "*"), ["/usr/*"]);
        assert_eq!(judged(&at(&[]), "src"), ["src"]);
        assert_eq!(judged(&at(&[]), "../x"), ["../x"]);
        assert_eq!(judged(&at(&[]), "../../../etc"), ["/etc"]);
        assert_eq!(judged(&at(&[("cd", &["../.."]), ("cd", &[".."])]), "*"), ["/*"]);
        assert_eq!(judged(&at(&[("cd", &["~/.."])]), "*"), ["/home/*"]);
    }

    #[test]
    fn the_stack_and_the_previous_directory_are_followed() {
        assert_eq!(judged(&at(&[("cd", &["/etc"]), ("cd", &["/tmp"]), ("cd", &["-"])]), "x"), ["/etc/x"]);
        assert_eq!(judged(&at(&[("pushd", &["/etc"]), ("pushd", &["/tmp"]), ("popd", &[])]), "x"), ["/etc/x"]);
        assert_eq!(judged(&at(&[("popd", &[])]), "x"), ["/x"], "an empty stack is anywhere");
        assert_eq!(judged(&at(&[("cd", &["-"])]), "x"), ["/x"], "no previous directory is anywhere");
    }

    #[test]
    fn unknown_targets_are_judged_as_root() {
        let mut d = DirStack::default();
        d.builtin("cd", &[Arg::dynamic("\"$D\"")]);
        assert_eq!(judged(&d, "*"), ["/*"]);
        let mut d = DirStack { cdpath: true, ..DirStack::default() };
        d.builtin("cd", &[Arg::word("etc")]);
        assert_eq!(judged(&d, "x"), ["/x"]);
    }

    #[test]
    fn named_homes_are_their_directories() {
        let d = DirStack::default();
        assert_eq!(judged(&d, "~root"), ["/root"]);
        assert_eq!(judged(&d, "~bob/x"), ["/home/bob/x"]);
    }

    #[test]
    fn branches_keep_every_place() {
        let mut a = Cwd::default();
        let mut b = Cwd::default();
        b.change(Some(&Arg::word("/etc")));
        a.union(&b);
        let texts: Vec<String> = a.resolve(&Arg::word("x")).into_iter().map(|a| a.text).collect();
        assert_eq!(texts, ["x", "/etc/x"]);
    }
}
