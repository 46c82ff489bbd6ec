//! Programs that change files: removal, permissions, raw writes, and the read-only
//! tools whose flags write (find, sed, awk, tar).

use super::super::Part;
use super::super::classify::{argv, is_kernel_or_disk, skip_options};
use super::super::walk::Analyzer;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

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
    let normal = super::super::classify::normalize(&without_globs.join("/"));
    SYSTEM_DIRS.contains(&normal.as_str())
}

pub fn is_home(a: &Arg) -> bool {
    if !a.home {
        return false;
    }
    let t = a.text.trim_matches('"');
    let rest = ["~", "${HOME}", "$HOME"].iter().find_map(|p| t.strip_prefix(p)).unwrap_or("");
    let rest = rest.trim_matches('"');
    // `~/../..` climbs out of the home directory: worse, not better.
    matches!(rest, "" | "/" | "/*" | "/." | "/.*") || rest.split('/').any(|c| c == "..")
}

/// `/$X`, `/u*`, `/"$(…)"`: a path whose first component is computed or a pattern may
/// well be a system root.
pub fn may_be_root(a: &Arg) -> bool {
    let Some(rest) = a.text.trim_start_matches('"').strip_prefix('/') else { return false };
    let first = rest.split('/').next().unwrap_or("");
    (!a.literal && (first.starts_with('$') || first.starts_with('`') || first.starts_with('"') || first.is_empty()))
        || (a.glob && first.contains(['*', '?', '[']))
}

pub fn remove(name: &str, args: &[Arg], part: &mut Part) {
    let recursive = args.iter().take_while(|a| a.text != "--").any(|a| {
        // GNU getopt takes any unambiguous prefix: `--r` is `--recursive`.
        (a.text.len() >= 3 && "--recursive".starts_with(a.text.as_str()))
            || (a.text.starts_with('-') && !a.text.starts_with("--") && (a.text.contains('r') || a.text.contains('R')))
    });
    if args.iter().any(|a| a.text == "--no-preserve-root") {
        part.add(C::SystemDestruction, "rm --no-preserve-root");
    }
    let targets: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-') || !a.literal).collect();
    for t in &targets {
        if (recursive || name == "shred") && ((t.literal && is_system_dir(&t.text)) || is_home(t) || may_be_root(t)) {
            part.add(C::SystemDestruction, format!("{name} -r {}", t.text));
        }
        if t.literal && is_kernel_or_disk(&t.text) {
            part.add(C::SystemDestruction, format!("{name} {}", t.text));
        }
    }
    part.add(C::Mutation, format!("{name} deletes files"));
    part.effects.insert(E::DeleteFile);
    part.scope.paths.extend(targets.iter().map(|t| t.text.clone()));
}

pub fn permissions(name: &str, args: &[Arg], part: &mut Part) {
    let recursive = args
        .iter()
        .any(|a| a.text == "-R" || a.text == "--recursive" || (a.text.starts_with('-') && a.text.contains('R')));
    let operands: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-') || a.text.starts_with("-w")).collect();
    if name == "chmod"
        && let Some(mode) = operands.first()
    {
        let m = mode.text.as_str();
        let setid_symbolic =
            m.split(',').any(|clause| clause.split_once(['+', '=']).is_some_and(|(_, perms)| perms.contains('s')));
        let setid_octal = u32::from_str_radix(m, 8).is_ok_and(|v| v & 0o6000 != 0);
        if setid_symbolic || setid_octal {
            part.add(C::PrivilegeEscalation, format!("chmod {m} sets a set-id bit"));
        }
    }
    for t in operands.iter().skip(1) {
        if (t.literal && is_system_dir(&t.text) && (recursive || t.text.trim_end_matches('/').is_empty()))
            || (recursive && is_home(t))
        {
            part.add(C::SystemDestruction, format!("{name}{} on {}", if recursive { " -R" } else { "" }, t.text));
        }
    }
    writes(args, part, name);
}

pub fn dd(args: &[Arg], part: &mut Part) {
    match args.iter().find_map(|a| a.text.strip_prefix("of=").map(|t| (t, a.literal))) {
        Some((target, literal)) => {
            if literal && is_kernel_or_disk(target) {
                part.add(C::SystemDestruction, format!("dd writes {target}"));
            }
            part.add(C::Mutation, format!("dd writes {target}"));
            part.effects.insert(E::WriteFile);
            part.scope.paths.push(target.to_owned());
        }
        None => part.add(C::ReadOnly, ""),
    }
}

pub fn find(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    let mut i = 0;
    let roots: Vec<&Arg> =
        args.iter().take_while(|a| !a.text.starts_with('-') && a.text != "(" && a.text != "!").collect();
    part.add(C::ReadOnly, "");
    while let Some(a) = args.get(i) {
        match a.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end =
                    args[i + 1..].iter().position(|a| a.text == ";" || a.text == "+").map_or(args.len(), |p| i + 1 + p);
                part.via.push("find -exec");
                // `{}` is each file found: analyse it as the root it starts from, so
                // `find / -exec rm -rf {} ;` is seen for what it is.
                let root = roots.first().map_or_else(
                    || Arg { text: ".".into(), literal: true, glob: false, home: false },
                    |r| (*r).clone(),
                );
                let command: Vec<Arg> =
                    args[i + 1..end].iter().map(|a| if a.is("{}") { root.clone() } else { a.clone() }).collect();
                argv(an, &command, None, part);
                i = end + 1;
                continue;
            }
            "-delete" => {
                if roots.iter().any(|r| r.literal && is_system_dir(&r.text)) || roots.iter().any(|r| is_home(r)) {
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

pub fn sed(args: &[Arg], part: &mut Part) {
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

pub fn awk(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| a.text == "-i" || a.text == "inplace" || a.text.starts_with("--include")) {
        part.add(C::Mutation, "awk -i inplace edits files");
    }
    let program = skip_options(args, "fvFE", &[]).first();
    if args.iter().any(|a| {
        (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains(['f', 'E']))
            || a.text.starts_with("--source")
            || a.text.starts_with("--file")
            || a.text.starts_with("--exec")
            || a.text.starts_with("--load")
            || a.text == "-l"
    }) {
        part.add(C::Opaque, "awk runs a program file or source we cannot see");
    } else if let Some(p) = program
        && (!p.literal || p.text.contains("system") || p.text.contains('>') || p.text.contains('|'))
    {
        part.add(C::Opaque, "the awk program may run commands or write files");
    }
    part.add(C::ReadOnly, "");
}

pub fn tar(args: &[Arg], part: &mut Part) {
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
    } else {
        part.add(C::ReadOnly, "");
    }
}
