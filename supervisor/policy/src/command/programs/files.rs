//! Programs that change files: removal, permissions, raw writes, and the read-only
//! tools whose flags write (find, sed, tar).

use super::super::Part;
use super::super::classify::{argv, is_harmless_device, is_kernel_or_disk, normalize};
use super::super::cwd::Cwd;
use super::super::walk::Analyzer;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

/// Trees whose every file belongs to the system: writing, truncating, re-permissioning
/// or deleting any file in them is destruction, whichever tool does it.
#[rustfmt::skip]
const SYSTEM_TREES: &[&str] = &[
    "/etc", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/root", "/var/lib",
    "/var/spool", "/var/db", "/System", "/Library", "/private/etc", "/private/var/db", "/private/var/root",
];

/// Files whose change gives someone more privilege than they had.
#[rustfmt::skip]
const PRIVILEGE_FILES: &[&str] = &[
    "/etc/sudoers", "/etc/sudoers.d", "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow",
    "/etc/doas.conf", "/etc/ld.so.preload", "/etc/pam.d", "/etc/security", "/etc/polkit-1",
    "/private/etc/sudoers", "/private/etc/sudoers.d", "/etc/subuid", "/etc/subgid",
];

fn under(path: &str, roots: &'static [&'static str]) -> Option<&'static str> {
    roots.iter().copied().find(|r| path == *r || path.strip_prefix(r).is_some_and(|rest| rest.starts_with('/')))
}

/// A file `what` (writes, deletes, truncates…) changes, judged from every directory the
/// line may be in: a system file is destruction, a privilege file is escalation.
pub fn changes_file(cwd: &Cwd, target: &Arg, what: &str, part: &mut Part) {
    for t in cwd.resolve(target) {
        if !t.literal || !t.text.starts_with('/') {
            continue;
        }
        let path = normalize(&t.text);
        if is_harmless_device(&path) {
            continue;
        }
        if is_kernel_or_disk(&path) {
            part.add(C::SystemDestruction, format!("{what} {path}"));
        } else if under(&path, PRIVILEGE_FILES).is_some() {
            part.add(C::PrivilegeEscalation, format!("{what} {path}, which grants privileges"));
        } else if let Some(tree) = under(&path, SYSTEM_TREES) {
            part.add(C::SystemDestruction, format!("{what} {path}, a system file under {tree}"));
        }
    }
}

/// The operands of a command that copies or links into a target: `-t DIR` or the last
/// operand is written; `mv` also takes its sources away.
pub fn copies(an: &Analyzer, name: &str, args: &[Arg], part: &mut Part) {
    let cwd = &an.dirs.cwd;
    let (operands, target_dir) = copy_operands(name, args);
    let last = if operands.len() >= 2 { operands.last().copied() } else { None };
    let target = target_dir.as_ref().or(last);
    let creates_dirs = name == "install" && args.iter().any(|a| a.is("-d") || a.is("--directory"));
    if creates_dirs {
        for t in &operands {
            changes_file(cwd, t, "creates", part);
        }
    } else if let Some(t) = target {
        changes_file(cwd, t, &format!("{name} writes"), part);
    }
    if name == "mv" {
        for s in operands.iter().filter(|s| last.is_none_or(|t| target_dir.is_some() || !std::ptr::eq(**s, t))) {
            changes_file(cwd, s, "mv takes away", part);
            for r in cwd.resolve(s) {
                if r.literal && is_system_dir(&r.text) {
                    part.add(C::SystemDestruction, format!("moves {}", r.text));
                }
            }
        }
    }
    if setid_mode(args) || preserves_setid(name, args, &operands) {
        part.add(C::PrivilegeEscalation, format!("{name} makes a set-id program"));
    }
    writes(args, part, name);
}

/// Non-option words, and the directory given with `-t`/`--target-directory`.
fn copy_operands<'a>(name: &str, args: &'a [Arg]) -> (Vec<&'a Arg>, Option<Arg>) {
    let with_value: &[&str] = match name {
        "install" => &["-m", "--mode", "-o", "--owner", "-g", "--group", "-t", "--target-directory", "-S", "--suffix"],
        _ => &["-t", "--target-directory", "-S", "--suffix"],
    };
    let mut operands = Vec::new();
    let mut target = None;
    let mut i = 0;
    let mut options_done = false;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if !options_done && t == "--" {
            options_done = true;
        } else if !options_done && with_value.contains(&t) {
            if matches!(t, "-t" | "--target-directory") {
                target = args.get(i + 1).cloned();
            }
            i += 1;
        } else if let Some(dir) = t.strip_prefix("--target-directory=").filter(|_| !options_done) {
            target = Some(Arg { text: dir.to_owned(), ..a.clone() });
        } else if options_done || !t.starts_with('-') || t == "-" {
            operands.push(a);
        }
        i += 1;
    }
    (operands, target)
}

/// `install -m 4755`, `install -m u+s`, `--mode=g+s`, `rsync --chmod=u+s`.
pub fn setid_mode(args: &[Arg]) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        let t = a.text.as_str();
        let value = match t {
            "--mode" => args.get(i + 1).map(|v| v.text.as_str()),
            _ if t.starts_with("--") => t.strip_prefix("--mode=").or_else(|| t.strip_prefix("--chmod=")),
            // `-m MODE`, `-m4755`, `-Dm4755`: the mode follows the `m` of a cluster.
            _ => t.strip_prefix('-').and_then(|cluster| {
                let at = cluster.find('m')?;
                let attached = &cluster[at + 1..];
                if attached.is_empty() { args.get(i + 1).map(|v| v.text.as_str()) } else { Some(attached) }
            }),
        };
        value.is_some_and(sets_setid)
    })
}

/// A chmod-style mode that sets the set-user-id or set-group-id bit.
pub fn sets_setid(mode: &str) -> bool {
    let symbolic = mode.split(',').any(|clause| clause.split_once(['+', '=']).is_some_and(|(_, p)| p.contains('s')));
    symbolic || u32::from_str_radix(mode, 8).is_ok_and(|v| v & 0o6000 != 0)
}

/// Programs installed set-id root on common systems: copying one with its mode kept
/// makes another.
const SETID_PROGRAMS: &[&str] = &[
    "sudo",
    "su",
    "passwd",
    "pkexec",
    "mount",
    "umount",
    "newgrp",
    "chsh",
    "chfn",
    "gpasswd",
    "doas",
    "fusermount",
    "fusermount3",
    "ping",
    "crontab",
    "at",
    "ssh-keysign",
    "unix_chkpwd",
    "Xorg",
    "sudoedit",
];

/// `cp -p /usr/bin/sudo x`, `cp --preserve=mode …`, `cp -a …`, `rsync -p …` of a set-id program.
fn preserves_setid(name: &str, args: &[Arg], operands: &[&Arg]) -> bool {
    if !matches!(name, "cp" | "rsync" | "install") {
        return false;
    }
    let preserves = args.iter().any(|a| {
        let t = a.text.as_str();
        t.starts_with("--preserve") && (t == "--preserve" || t.contains("mode") || t.contains("all"))
            || t == "--archive"
            || t == "--perms"
            || (t.starts_with('-') && !t.starts_with("--") && t.contains(['p', 'a']))
    });
    let sources = operands.len().saturating_sub(1);
    preserves
        && operands.iter().take(sources.max(1)).any(|s| {
            let base = s.text.rsplit('/').next().unwrap_or("");
            SETID_PROGRAMS.contains(&base) && (s.text.starts_with('/') || !s.literal)
        })
}

/// The system roots: removing or re-permissioning one of these recursively is destruction.
#[rustfmt::skip]
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/usr/bin", "/usr/lib", "/usr/local",
    "/usr/sbin", "/usr/share", "/var/lib", "/Users", "/System", "/Library", "/Applications", "/private",
];

/// A mutation whose operands are files it writes.
pub fn writes(args: &[Arg], part: &mut Part, name: &str) {
    let note = if name.is_empty() { String::new() } else { format!("{name} changes files") };
    part.add(C::Mutation, note);
    part.effects.insert(E::WriteFile);
    part.scope.paths.extend(args.iter().filter(|a| !a.text.starts_with('-')).map(|a| a.text.clone()));
}

/// `/`, `/usr/`, `//etc/.`, `/*`, `/usr/..`: the path, normalized, is a system root.
pub fn is_system_dir(path: &str) -> bool {
    if !path.starts_with('/') {
        return false;
    }
    // `/*` and `/.*` name what is in a directory: for this question, the directory.
    let without_globs: Vec<&str> = path.split('/').filter(|c| *c != "*" && *c != ".*").collect();
    let joined = without_globs.join("/");
    let normal = normalize(if joined.is_empty() { "/" } else { &joined });
    // A user's home directory as a whole (`~bob` is `/home/bob`).
    let a_home =
        matches!(normal.split('/').collect::<Vec<_>>().as_slice(), ["", "home" | "Users", name] if !name.is_empty());
    SYSTEM_DIRS.contains(&normal.as_str()) || a_home
}

pub fn is_home(a: &Arg) -> bool {
    if !a.home {
        return false;
    }
    let t = a.text.trim_matches('"');
    let rest = ["~", "${HOME}", "$HOME"].iter().find_map(|p| t.strip_prefix(p)).unwrap_or("");
    let rest = rest.trim_matches('"');
    // The home directory itself (or all it holds), or a climb out of it (`~/../..`).
    let mut depth = 0i32;
    for component in rest.split('/') {
        match component {
            "" | "." | "*" | ".*" => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    depth == 0
}

/// `/$X`, `/u*`, `/"$(…)"`: a path whose first component is computed or a pattern may
/// well be a system root.
pub fn may_be_root(a: &Arg) -> bool {
    let Some(rest) = a.text.trim_start_matches('"').strip_prefix('/') else { return false };
    let first = rest.split('/').next().unwrap_or("");
    (!a.literal && (first.starts_with('$') || first.starts_with('`') || first.starts_with('"') || first.is_empty()))
        || (a.glob && first.contains(['*', '?', '[']))
}

pub fn remove(an: &Analyzer, name: &str, args: &[Arg], part: &mut Part) {
    let recursive = args.iter().take_while(|a| a.text != "--").any(|a| {
        // GNU getopt takes any unambiguous prefix: `--r` is `--recursive`.
        (a.text.len() >= 3 && "--recursive".starts_with(a.text.as_str()))
            || (a.text.starts_with('-') && !a.text.starts_with("--") && (a.text.contains('r') || a.text.contains('R')))
    });
    if args.iter().any(|a| a.text == "--no-preserve-root") {
        part.add(C::SystemDestruction, "rm --no-preserve-root");
    }
    let targets: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-') || !a.literal).collect();
    let cwd = &an.dirs.cwd;
    for t in &targets {
        for r in cwd.resolve(t) {
            if (recursive || name == "shred")
                && ((r.literal && is_system_dir(&r.text)) || is_home(&r) || may_be_root(&r))
            {
                part.add(C::SystemDestruction, format!("{name} -r {}", r.text));
            }
        }
        changes_file(cwd, t, &format!("{name} deletes"), part);
    }
    part.add(C::Mutation, format!("{name} deletes files"));
    part.effects.insert(E::DeleteFile);
    part.scope.paths.extend(targets.iter().map(|t| t.text.clone()));
}

pub fn permissions(an: &Analyzer, name: &str, args: &[Arg], part: &mut Part) {
    let recursive = args
        .iter()
        .any(|a| a.text == "-R" || a.text == "--recursive" || (a.text.starts_with('-') && a.text.contains('R')));
    let operands: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-') || a.text.starts_with("-w")).collect();
    if name == "chmod"
        && let Some(mode) = operands.first()
    {
        let m = mode.text.as_str();
        if sets_setid(m) {
            part.add(C::PrivilegeEscalation, format!("chmod {m} sets a set-id bit"));
        }
    }
    let cwd = &an.dirs.cwd;
    for t in operands.iter().skip(1) {
        for r in cwd.resolve(t) {
            if (r.literal && is_system_dir(&r.text) && (recursive || r.text.trim_end_matches('/').is_empty()))
                || (recursive && is_home(&r))
            {
                part.add(C::SystemDestruction, format!("{name}{} on {}", if recursive { " -R" } else { "" }, r.text));
            }
        }
        changes_file(cwd, t, &format!("{name} changes"), part);
    }
    writes(args, part, name);
}

pub fn dd(an: &Analyzer, args: &[Arg], part: &mut Part) {
    match args.iter().find_map(|a| a.text.strip_prefix("of=").map(|t| (t, a.literal))) {
        Some((target, literal)) => {
            // A disk, a kernel file or a system file is judged by changes_file.
            let of = Arg { text: target.to_owned(), literal, ..Arg::word("") };
            changes_file(&an.dirs.cwd, &of, "dd writes", part);
            part.add(C::Mutation, format!("dd writes {target}"));
            part.effects.insert(E::WriteFile);
            part.scope.paths.push(target.to_owned());
        }
        None => part.add(C::ReadOnly, ""),
    }
}

pub fn find(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    let mut i = 0;
    let here = Arg::word(".");
    let mut roots: Vec<&Arg> =
        args.iter().take_while(|a| !a.text.starts_with('-') && a.text != "(" && a.text != "!").collect();
    if roots.is_empty() {
        // GNU find searches the current directory when given none.
        roots.push(&here);
    }
    part.add(C::ReadOnly, "");
    while let Some(a) = args.get(i) {
        match a.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end =
                    args[i + 1..].iter().position(|a| a.text == ";" || a.text == "+").map_or(args.len(), |p| i + 1 + p);
                part.via.push("find -exec");
                // `{}` is each file found: analyse it as the root it starts from, so
                // `find / -exec rm -rf {} ;` is seen for what it is.
                let root = roots.first().map_or_else(|| Arg::word("."), |r| (*r).clone());
                let command: Vec<Arg> =
                    args[i + 1..end].iter().map(|a| if a.is("{}") { root.clone() } else { a.clone() }).collect();
                argv(an, &command, None, part);
                i = end + 1;
                continue;
            }
            "-delete" => {
                let resolved: Vec<Arg> = roots.iter().flat_map(|r| an.dirs.cwd.resolve(r)).collect();
                if resolved.iter().any(|r| (r.literal && is_system_dir(&r.text)) || is_home(r) || may_be_root(r)) {
                    part.add(C::SystemDestruction, "find -delete on a system directory");
                }
                part.add(C::Mutation, "find -delete deletes files");
                part.effects.insert(E::DeleteFile);
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                part.add(C::Mutation, format!("find {} writes a file", a.text));
                part.effects.insert(E::WriteFile);
            }
            _ => {}
        }
        i += 1;
    }
}

pub fn sed(an: &Analyzer, args: &[Arg], part: &mut Part) {
    let short = |a: &Arg| a.text.starts_with('-') && !a.text.starts_with("--");
    // `-i`, `-ni`, `--in-place`, and GNU's prefixes of it (`--i`).
    let in_place = args.iter().any(|a| {
        (a.text.len() >= 3 && "--in-place".starts_with(a.text.split('=').next().unwrap_or("")))
            || (short(a) && a.text.trim_start_matches("-e").contains('i') && !a.text.starts_with("-e"))
    });
    if in_place {
        part.add(C::Mutation, "sed -i edits files in place");
        part.effects.insert(E::WriteFile);
    }
    let mut scripts: Vec<&Arg> = Vec::new();
    let mut explicit = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if t == "-e" || t == "--expression" {
            scripts.extend(args.get(i + 1));
            explicit = true;
            i += 2;
            continue;
        }
        if t == "-f" || t.starts_with("--file") || (short(a) && t.trim_start_matches('-').contains('f')) {
            part.add(C::Opaque, "sed runs a script file");
            explicit = true;
        } else if let Some(attached) = t.strip_prefix("-e").or_else(|| t.strip_prefix("--expression=")) {
            // `-e'w out'`: the script attached to its option.
            let _ = attached;
            scripts.push(a);
            explicit = true;
        } else if !t.starts_with('-') && !explicit && scripts.is_empty() {
            scripts.push(a);
        }
        i += 1;
    }
    if in_place {
        // Every operand that is not the script is a file edited in place.
        for f in args.iter().filter(|a| !a.text.starts_with('-') && !scripts.iter().any(|s| std::ptr::eq(*s, *a))) {
            changes_file(&an.dirs.cwd, f, "sed -i edits", part);
        }
    }
    for s in scripts {
        let text = s.text.strip_prefix("-e").or_else(|| s.text.strip_prefix("--expression=")).unwrap_or(&s.text);
        if !s.literal || !sed_script_only_reads(text) {
            part.add(C::Opaque, "the sed script may write files or run commands");
        }
    }
    part.add(C::ReadOnly, "");
}

/// Whether a sed script is made only of commands that read: printing, deleting,
/// substituting without the `w` and `e` flags, transliterating, branching. Anything
/// else (`w`, `W`, `r`, `R`, `e`, an unknown command) is not read-only; so is a script
/// this small parser does not follow.
fn sed_script_only_reads(script: &str) -> bool {
    let mut chars = script.chars().peekable();
    loop {
        // Skip separators and the address: numbers, `$`, `~`, `,`, `/re/`, `\cREc`, `!`, `+`.
        while let Some(&c) = chars.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '{' | '}' | '0'..='9' | '$' | '~' | ',' | '!' | '+' => {
                    chars.next();
                }
                '/' | '\\' => {
                    chars.next();
                    let delim = if c == '\\' { chars.next().unwrap_or('/') } else { '/' };
                    if !skip_delimited(&mut chars, delim) {
                        return false;
                    }
                    // Address flags: `I`, `M`.
                    while chars.peek().is_some_and(|c| *c == 'I' || *c == 'M') {
                        chars.next();
                    }
                }
                _ => break,
            }
        }
        let Some(command) = chars.next() else { return true };
        match command {
            'p' | 'P' | 'd' | 'D' | 'n' | 'N' | '=' | 'l' | 'h' | 'H' | 'g' | 'G' | 'x' | 'z' | 'F' => {}
            'q' | 'Q' | 'b' | 't' | 'T' | ':' | '#' => {
                // A label or exit code runs to the end of the command.
                while chars.peek().is_some_and(|c| *c != ';' && *c != '\n' && *c != '}') {
                    chars.next();
                }
            }
            's' | 'y' => {
                let Some(delim) = chars.next() else { return false };
                if delim == '\\'
                    || delim == '\n'
                    || !skip_delimited(&mut chars, delim)
                    || !skip_delimited(&mut chars, delim)
                {
                    return false;
                }
                // Flags: only those that neither write (`w`) nor run (`e`).
                while let Some(&f) = chars.peek() {
                    match f {
                        'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => {
                            chars.next();
                        }
                        ';' | '\n' | '}' | ' ' | '\t' => break,
                        _ => return false,
                    }
                }
            }
            _ => return false,
        }
    }
}

/// Skips to the unescaped `delim`; false when the text ends first.
fn skip_delimited(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, delim: char) -> bool {
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if c == delim {
            return true;
        }
    }
    false
}

/// `tar -x` writes into `-C DIR` or the current directory: into a system directory it
/// can overwrite any system file.
fn extracts_into(an: &Analyzer, args: &[Arg], part: &mut Part) {
    let dir = args.iter().enumerate().find_map(|(i, a)| match a.text.as_str() {
        "-C" | "--directory" => args.get(i + 1).cloned(),
        t => t.strip_prefix("--directory=").map(|d| Arg { text: d.to_owned(), ..a.clone() }),
    });
    let dir = dir.unwrap_or_else(|| Arg::word("."));
    for r in an.dirs.cwd.resolve(&dir) {
        let path = normalize(&r.text);
        if r.literal && (is_system_dir(&path) || under(&path, SYSTEM_TREES).is_some()) {
            part.add(C::SystemDestruction, format!("tar extracts into {path}"));
        }
    }
}

pub fn tar(an: &Analyzer, args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| {
        a.text.contains("to-command")
            || a.text.contains("checkpoint-action")
            || a.text.contains("use-compress-program")
            || a.text == "-I"
    }) {
        part.add(C::Opaque, "tar may run another program");
    }
    // The mode letters may sit in the first word (`tar xf`) or any short cluster (`-v -xf`).
    let first = args.first().map(|a| a.text.trim_start_matches('-').to_owned()).unwrap_or_default();
    let clusters: String =
        args.iter().filter(|a| a.text.starts_with('-') && !a.text.starts_with("--")).map(|a| a.text.as_str()).collect();
    let mode = format!("{first}{clusters}");
    let long_write = args
        .iter()
        .any(|a| matches!(a.text.as_str(), "--create" | "--extract" | "--get" | "--append" | "--update" | "--delete"));
    if mode.contains(['c', 'x', 'r', 'u', 'A']) || long_write {
        part.add(C::Mutation, "tar writes files");
        part.effects.insert(E::WriteFile);
        if mode.contains('x') || args.iter().any(|a| a.text == "--extract" || a.text == "--get") {
            extracts_into(an, args, part);
        }
    } else {
        part.add(C::ReadOnly, "");
    }
}
