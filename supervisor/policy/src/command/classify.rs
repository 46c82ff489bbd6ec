//! What one simple command is: wrappers unwrapped, the program found by its basename,
//! then the program's own rules (see [`super::programs`]).

use super::Part;
use super::programs;
use super::walk::{Analyzer, Simple};
use super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

/// Variables whose value is a command some program runs later.
const COMMAND_VARIABLES: &[&str] = &[
    "GIT_SSH_COMMAND",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "EDITOR",
    "VISUAL",
    "PROMPT_COMMAND",
    "LESSOPEN",
    "LESSCLOSE",
    "BROWSER",
    "GIT_SSH",
    "GIT_PROXY_COMMAND",
    "FCEDIT",
];

/// Variables that change which program runs, or what it loads.
const LOADER_VARIABLES: &[&str] = &[
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PATH",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PS4",
    "GIT_EXEC_PATH",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_TEMPLATE_DIR",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "RUBYOPT",
    "RUBYLIB",
    "RUSTC_WRAPPER",
    "RUSTC",
    "CC",
    "CXX",
    "LD",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "ZDOTDIR",
    "HISTFILE",
    "TMPDIR",
];

const SYSTEM_PATH: &[&str] = &["/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"];

/// `NAME=value`: a command variable's value is analysed as a script; a loader
/// variable makes whatever runs next something we cannot see into.
pub fn assignment(an: &mut Analyzer, name: &str, value: &Arg, part: &mut Part) {
    let command_like = COMMAND_VARIABLES.contains(&name) || (name.starts_with("GIT_CONFIG_VALUE_"));
    if command_like {
        part.add(C::Opaque, format!("{name} names a command that runs later"));
        if value.literal {
            an.script(&value.text, Some("command variable"));
        }
    } else if name == "PATH"
        && value.literal
        && value.text.split(':').all(|d| SYSTEM_PATH.contains(&d.trim_end_matches('/')))
    {
        // A PATH of system directories only chooses among the real programs.
    } else if LOADER_VARIABLES.contains(&name)
        || name.starts_with("DYLD_")
        || name.starts_with("BASH_FUNC_")
        || name.starts_with("GIT_CONFIG_KEY_")
    {
        part.add(C::Opaque, format!("{name} changes what runs"));
    }
}

pub fn assignments(an: &mut Analyzer, list: &[(String, Arg)], part: &mut Part) {
    for (name, value) in list {
        assignment(an, name, value, part);
    }
}

/// `NAME=value` words given as arguments (`export`, `env`, `declare`).
pub fn assignment_args(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    for a in args {
        if let Some((name, value)) = a.text.split_once('=').filter(|_| is_assignment(&a.text)) {
            let value = Arg { text: value.to_owned(), ..a.clone() };
            assignment(an, name, &value, part);
        }
    }
}

/// `/dev/tcp/HOST/PORT`: bash opens a connection, no program needed.
fn network_device(path: &str) -> Option<&str> {
    path.strip_prefix("/dev/tcp/")
        .or_else(|| path.strip_prefix("/dev/udp/"))
        .map(|rest| rest.split('/').next().unwrap_or(""))
}

/// Redirections of a command: writes into files, and the devices no one should write.
pub fn redirections(simple: &Simple, part: &mut Part) {
    for target in simple.reads.iter().chain(&simple.writes) {
        if let Some(host) = network_device(&target.text) {
            part.add(C::Mutation, format!("opens a network connection to {host}"));
            part.effects.insert(E::AccessNetwork);
            part.scope.domains.push(host.to_ascii_lowercase());
        }
    }
    for target in &simple.writes {
        let path = target.text.as_str();
        if network_device(path).is_some() {
            continue;
        }
        if target.literal && is_harmless_device(path) {
            continue;
        }
        if target.literal && is_kernel_or_disk(path) {
            part.add(C::SystemDestruction, format!("writes to {path}"));
        } else {
            part.add(C::Mutation, format!("writes to {path}"));
        }
        part.effects.insert(E::WriteFile);
        part.scope.paths.push(path.to_owned());
    }
}

fn is_harmless_device(path: &str) -> bool {
    matches!(path, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || path.strip_prefix("/dev/fd/").is_some_and(|n| n.parse::<u32>().is_ok())
}

/// Block devices, memory, and the kernel's knobs: writing them is destruction, not an edit.
pub fn is_kernel_or_disk(path: &str) -> bool {
    const DISKS: [&str; 12] = ["sd", "hd", "vd", "xvd", "nvme", "mmcblk", "dm-", "md", "loop", "nbd", "sr", "disk/"];
    if let Some(dev) = path.strip_prefix("/dev/") {
        return DISKS.iter().any(|d| dev.starts_with(d)) || matches!(dev, "mem" | "kmem" | "port" | "mapper");
    }
    path == "/proc/sysrq-trigger" || path.starts_with("/proc/sys/") || path.starts_with("/sys/")
}

/// The basename of a command word: `/usr/bin/git` and `git` are the same program.
pub fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

pub fn simple(an: &mut Analyzer, simple: &Simple, part: &mut Part) {
    argv(an, &simple.argv, simple.stdin_text.as_deref(), part);
}

/// Classifies `args` as a command line; wrappers loop back here with what they wrap.
pub fn argv(an: &mut Analyzer, mut args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    // Bounded: every wrapper consumes at least its own name.
    loop {
        let Some(first) = args.first() else { return };
        if !first.literal {
            part.add(C::Opaque, format!("the command name is computed at run time ({})", first.text));
            return;
        }
        if first.glob {
            part.add(C::Opaque, format!("the command name is a pattern ({})", first.text));
            return;
        }
        if first.text.is_empty() {
            return;
        }
        let name = basename(&first.text).to_owned();
        let rest = &args[1..];
        match unwrap(an, &name, rest, part) {
            Unwrapped::Command(inner) => args = inner,
            Unwrapped::Done => return,
            Unwrapped::NotAWrapper => break,
        }
    }
    let name = basename(&args[0].text).to_owned();
    if !is_system_program(&args[0].text) {
        // Matched by its basename below, but `./git` or `vendor/bin/ls` is a file that
        // may not be the program its name says.
        part.add(C::Opaque, format!("runs the program file {}, which may not be the real {name}", args[0].text));
    }
    if an.functions.contains(&name) {
        part.add(C::ReadOnly, "");
        return;
    }
    programs::program(an, &name, &args[0].text, &args[1..], stdin_text, part);
}

/// A bare name (found on PATH) or a path into a system program directory.
fn is_system_program(word: &str) -> bool {
    const DIRS: [&str; 8] = [
        "/bin/",
        "/sbin/",
        "/usr/bin/",
        "/usr/sbin/",
        "/usr/local/bin/",
        "/usr/local/sbin/",
        "/opt/homebrew/bin/",
        "/usr/libexec/",
    ];
    !word.contains('/')
        || (DIRS.iter().any(|d| word.starts_with(d)) && !word.contains("/../") && !word[1..].contains("//"))
}

pub enum Unwrapped<'a> {
    /// The wrapper runs this command.
    Command(&'a [Arg]),
    /// Classified completely (the wrapper runs nothing, or ran a script we analysed).
    Done,
    NotAWrapper,
}

/// Skips a wrapper's options: `with_value` lists the short letters and long names that
/// take a value. Returns what follows them.
pub fn skip_options<'a>(args: &'a [Arg], short_with_value: &str, long_with_value: &[&str]) -> &'a [Arg] {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if t == "--" {
            return &args[i + 1..];
        }
        if let Some(long) = t.strip_prefix("--") {
            i += if !long.contains('=') && long_with_value.contains(&long) { 2 } else { 1 };
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let cluster = &t[1..];
            let mut step = 1;
            for (pos, c) in cluster.char_indices() {
                if short_with_value.contains(c) {
                    // The value is attached (`-n10`) or the next word (`-n 10`).
                    if pos + c.len_utf8() == cluster.len() {
                        step = 2;
                    }
                    break;
                }
            }
            i += step;
            continue;
        }
        break;
    }
    args.get(i..).unwrap_or(&[])
}

fn unwrap<'a>(an: &mut Analyzer, name: &str, rest: &'a [Arg], part: &mut Part) -> Unwrapped<'a> {
    let inner = match name {
        "sudo" | "doas" | "run0" | "pkexec" => {
            part.add(C::PrivilegeEscalation, format!("{name} runs as another user"));

            match name {
                "sudo" => skip_options(
                    rest,
                    "ughpCDrtUTR",
                    &[
                        "user",
                        "group",
                        "host",
                        "prompt",
                        "chdir",
                        "role",
                        "type",
                        "other-user",
                        "close-from",
                        "command-timeout",
                    ],
                ),
                "doas" => skip_options(rest, "uC", &[]),
                _ => skip_options(rest, "u", &["user"]),
            }
        }
        "su" | "runuser" => {
            part.add(C::PrivilegeEscalation, format!("{name} runs as another user"));
            // `su -c 'cmd' user`: the body is a script.
            if let Some(pos) = rest.iter().position(|a| a.is("-c") || a.is("--command")) {
                body(an, rest.get(pos + 1), "su -c", part);
            }
            return Unwrapped::Done;
        }
        "env" => {
            assignment_args(an, rest, part);
            let mut i = 0;
            while let Some(a) = rest.get(i) {
                let t = a.text.as_str();
                if t == "-S"
                    || t == "--split-string"
                    || t.starts_with("--split-string=")
                    || (t.starts_with("-S") && t.len() > 2)
                {
                    // `env -S 'cmd args'` splits a string into a command: a script.
                    let value = if let Some(v) = t.strip_prefix("--split-string=") {
                        Some(Arg { text: v.to_owned(), ..a.clone() })
                    } else if t.len() > 2 && t.starts_with("-S") {
                        Some(Arg { text: t[2..].to_owned(), ..a.clone() })
                    } else {
                        rest.get(i + 1).cloned()
                    };
                    body(an, value.as_ref(), "env -S", part);
                    return Unwrapped::Done;
                }
                if t == "-u" || t == "-C" || t == "--unset" || t == "--chdir" {
                    i += 2;
                } else if (t.starts_with('-') && t != "-") || is_assignment(t) {
                    i += 1;
                } else {
                    break;
                }
            }
            &rest[i.min(rest.len())..]
        }
        "nohup" | "setsid" | "builtin" | "unbuffer" => skip_options(rest, "", &[]),
        "time" => {
            if rest
                .iter()
                .take_while(|a| a.text.starts_with('-'))
                .any(|a| a.text.starts_with("-o") || a.text.starts_with("--output"))
            {
                part.add(C::Mutation, "time -o writes a file");
            }
            skip_options(rest, "fo", &["format", "output"])
        }
        "timeout" => skip_positionals(skip_options(rest, "sk", &["signal", "kill-after"]), 1),
        "nice" => skip_options(rest, "n", &["adjustment"]),
        "ionice" => skip_options(rest, "cnp", &["class", "classdata", "pid"]),
        "chrt" => skip_positionals(skip_options(rest, "", &[]), 1),
        "taskset" => {
            let after = skip_options(rest, "", &[]);
            let cpu_list = rest.iter().any(|a| a.text.starts_with('-') && a.text.contains('c'));
            if cpu_list { after } else { skip_positionals(after, 1) }
        }
        "stdbuf" => skip_options(rest, "ioe", &["input", "output", "error"]),
        "xargs" => {
            part.add(C::ReadOnly, "");
            let after = skip_options(
                rest,
                "IiLlnPdaEs",
                &[
                    "replace",
                    "max-lines",
                    "max-args",
                    "max-procs",
                    "delimiter",
                    "arg-file",
                    "eof",
                    "max-chars",
                    "process-slot-var",
                ],
            );
            if after.is_empty() {
                return Unwrapped::Done; // xargs alone runs echo
            }
            part.via.push("xargs");
            after
        }
        "command" => {
            if rest.iter().take_while(|a| a.text.starts_with('-')).any(|a| a.text.contains('v') || a.text.contains('V'))
            {
                part.add(C::ReadOnly, "");
                return Unwrapped::Done; // `command -v git` looks a name up
            }
            skip_options(rest, "", &[])
        }
        "exec" => {
            if rest.is_empty() {
                part.add(C::ReadOnly, "");
                return Unwrapped::Done; // `exec > file` only redirects
            }
            skip_options(rest, "a", &[])
        }
        "busybox" | "toybox" => rest,
        "watch" => {
            // `watch` joins its arguments into a shell command, run again and again.
            let after = skip_options(rest, "nd", &["interval", "differences"]);
            join_as_script(an, after, "watch", part);
            return Unwrapped::Done;
        }
        "flock" => {
            let after = skip_options(rest, "wEc", &["timeout", "conflict-exit-code", "command"]);
            if let Some(pos) = rest.iter().position(|a| a.is("-c") || a.is("--command")) {
                body(an, rest.get(pos + 1), "flock -c", part);
                return Unwrapped::Done;
            }
            skip_positionals(after, 1)
        }
        _ => return Unwrapped::NotAWrapper,
    };
    if inner.is_empty() {
        // `sudo -l`, `env`, `nice`: the wrapper alone prints or does nothing further.
        part.add(C::ReadOnly, "");
        return Unwrapped::Done;
    }
    Unwrapped::Command(inner)
}

fn skip_positionals(args: &[Arg], n: usize) -> &[Arg] {
    args.get(n..).unwrap_or(&[])
}

pub fn is_assignment(t: &str) -> bool {
    match t.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// A script given as one word (`bash -c BODY`): analysed when literal, opaque otherwise.
pub fn body(an: &mut Analyzer, word: Option<&Arg>, via: &'static str, part: &mut Part) {
    match word {
        Some(w) if w.literal => an.script(&w.text, Some(via)),
        Some(w) => part.add(C::Opaque, format!("{via} runs a script computed at run time ({})", w.text)),
        None => part.add(C::ReadOnly, ""),
    }
}

/// `eval a b`, `watch cmd args`: the words joined with spaces are a script.
pub fn join_as_script(an: &mut Analyzer, args: &[Arg], via: &'static str, part: &mut Part) {
    if args.is_empty() {
        part.add(C::ReadOnly, "");
    } else if args.iter().all(|a| a.literal) {
        let text = args.iter().map(|a| a.text.as_str()).collect::<Vec<_>>().join(" ");
        an.script(&text, Some(via));
        part.add(C::ReadOnly, "");
    } else {
        part.add(C::Opaque, format!("{via} of a string computed at run time"));
    }
}
