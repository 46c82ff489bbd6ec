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
    "PS4",
    "PS0",
    "PS1",
    "PS2",
    "PS3",
];

/// Variables naming the program that shows long output.
const PAGER_VARIABLES: &[&str] = &["PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "BAT_PAGER", "DELTA_PAGER"];

/// `cat`, `less -R`, `head -n 5`, `delta --dark`: a known pager given only options (and
/// their numbers), by its bare name, or nothing at all.
pub fn is_harmless_pager(value: &Arg) -> bool {
    const PAGERS: &[&str] =
        &["cat", "less", "more", "most", "head", "tail", "delta", "bat", "batcat", "diff-so-fancy", "tee", ""];
    if !value.literal {
        return false;
    }
    let mut words = value.text.split_whitespace();
    let program = words.next().unwrap_or("");
    PAGERS.contains(&program)
        && words.all(|w| {
            (w.starts_with('-') && w.chars().all(|c| c.is_ascii_alphanumeric() || "-=_".contains(c)))
                || w.chars().all(|c| c.is_ascii_digit())
        })
        && !value.text.contains(['|', ';', '&', '$', '`', '<', '>', '(', ')'])
        && !(program == "tee" && value.text.split_whitespace().count() > 1)
}

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
    if PAGER_VARIABLES.contains(&name) && is_harmless_pager(value) {
        // `GIT_PAGER=cat git log`: a pager that only shows text chooses nothing.
    } else if command_like {
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
pub fn redirections(an: &Analyzer, simple: &Simple, part: &mut Part) {
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
            programs::file_changed(&an.dirs.cwd, target, "writes to", part);
            part.add(C::Mutation, format!("writes to {path}"));
        }
        part.effects.insert(E::WriteFile);
        part.scope.paths.push(path.to_owned());
    }
}

pub fn is_harmless_device(path: &str) -> bool {
    let path = normalize(path);
    matches!(path.as_str(), "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || path.strip_prefix("/dev/fd/").is_some_and(|n| n.parse::<u32>().is_ok())
}

/// An absolute path with `//`, `.` and `..` resolved lexically (`/dev/../dev/sda` is
/// `/dev/sda`); a relative path is returned as it is.
pub fn normalize(path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_owned();
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Block devices, memory, and the kernel's knobs: writing them is destruction, not an edit.
pub fn is_kernel_or_disk(path: &str) -> bool {
    const DISKS: [&str; 11] = ["sd", "hd", "vd", "xvd", "nvme", "mmcblk", "dm-", "md", "loop", "nbd", "sr"];
    // Directories under /dev that hold no disks.
    const HARMLESS_DIRS: [&str; 5] = ["fd/", "shm/", "pts/", "mqueue/", "hugepages/"];
    let path = normalize(path);
    if let Some(dev) = path.strip_prefix("/dev/") {
        // `/dev/vg0/root`, `/dev/mapper/x`, `/dev/disk/by-id/…`: volumes live in
        // directories of their own.
        let volume = dev.contains('/') && !HARMLESS_DIRS.iter().any(|d| dev.starts_with(d));
        return volume || DISKS.iter().any(|d| dev.starts_with(d)) || matches!(dev, "mem" | "kmem" | "port");
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
pub fn argv(an: &mut Analyzer, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    let in_child = an.in_child;
    unwrapped(an, args, stdin_text, part);
    an.in_child = in_child;
}

fn unwrapped(an: &mut Analyzer, mut args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    let mut wrapped = false;
    // Bounded: every wrapper consumes at least its own name.
    loop {
        let Some(first) = args.first() else { return };
        if !first.literal {
            part.add(C::Opaque, format!("the command name is computed at run time ({})", first.text));
            super::wrappers::computed_command(an, first, &args[1..], part);
            // It may be `cd`, `source` or a function: nothing about this shell is known after it.
            if !an.in_child {
                an.vars.forget_all();
                an.dirs.lost();
            }
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
        if name == "xargs"
            && let Some(command) = stdin_text.and_then(|input| super::wrappers::xargs_with_input(rest, input))
        {
            // `echo /usr | xargs rm -rf`: the line shows what xargs adds.
            part.add(C::ReadOnly, "");
            part.via.push("xargs");
            argv(an, &command, None, part);
            return;
        }
        match unwrap(an, &name, rest, part) {
            Unwrapped::Command(inner) => {
                args = inner;
                wrapped = true;
                // `builtin cd`, `command cd` and `time cd` still run in this shell.
                if !matches!(name.as_str(), "builtin" | "command" | "time" | "and" | "or" | "not") {
                    an.in_child = true;
                }
            }
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
    // A function defined in this line runs a body already analysed, but only when it
    // is called by its bare name: `command rm`, `/bin/rm` and `env rm` run the program.
    // And a function may not stand in for a program we know: `rm() { :; }; rm -rf ~`
    // is judged as rm (the definition could sit in a subshell or be unset).
    let mut own = Part::default();
    let appended = std::mem::replace(
        &mut an.args_appended,
        part.via.iter().any(|v| matches!(*v, "xargs" | "find -exec" | "fd -x" | "parallel")),
    );
    programs::program(an, &name, &args[0].text, &args[1..], stdin_text, &mut own);
    an.args_appended = appended;
    let unknown = own.classes.iter().all(|c| *c == C::Mutation)
        && own.notes.iter().all(|n| n.ends_with("not known to be read-only"));
    if an.functions.contains(&name) && !wrapped && !args[0].text.contains('/') && unknown {
        // The body was analysed; what it assigns or where it goes is not followed.
        an.vars.forget_all();
        an.dirs.lost();
        part.add(C::ReadOnly, "");
        return;
    }
    part.absorb(own);
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
                let cluster = t.strip_prefix('-').filter(|c| !c.starts_with('-') && !c.is_empty());
                let split_at = cluster.and_then(|c| c.find('S'));
                if t == "--split-string" || t.starts_with("--split-string=") || split_at.is_some() {
                    // `env -S 'cmd args'` (or `-vS`, `-S'cmd'`) splits a string into a
                    // command: a script.
                    let attached = match (t.strip_prefix("--split-string="), cluster, split_at) {
                        (Some(v), _, _) => Some(v),
                        (None, Some(c), Some(at)) => c.get(at + 1..).filter(|v| !v.is_empty()),
                        _ => None,
                    };
                    let value = match attached {
                        Some(v) => Some(Arg { text: v.to_owned(), ..a.clone() }),
                        None => rest.get(i + 1).cloned(),
                    };
                    body(an, value.as_ref(), "env -S", part);
                    return Unwrapped::Done;
                }
                if t == "--unset" || t == "--chdir" || cluster.is_some_and(|c| c.ends_with('u') || c.ends_with('C')) {
                    i += 2;
                } else if (t.starts_with('-') && t != "-") || is_assignment(t) {
                    i += 1;
                } else {
                    break;
                }
            }
            &rest[i.min(rest.len())..]
        }
        "nohup" | "setsid" | "builtin" | "unbuffer" | "chronic" | "ifne" | "catchsegv" | "valgrind"
        | "dbus-run-session" | "and" | "or" | "not" | "nocache" | "eatmydata" | "fakeroot" | "tsocks" => {
            skip_options(rest, "", &[])
        }
        // Run their command as given, under a limit, a proxy or another session.
        "rlwrap" => skip_options(rest, "fHpPlSsCDhmqoz", &["file", "history-filename", "prompt-colour"]),
        "dumb-init" => skip_options(rest, "r", &["rewrite"]),
        "tini" => skip_options(rest, "pe", &[]),
        "torsocks" => skip_options(rest, "upaP", &["user", "pass", "address", "port"]),
        "proxychains" | "proxychains4" => skip_options(rest, "f", &[]),
        "caffeinate" => skip_options(rest, "tw", &[]),
        "systemd-inhibit" => skip_options(rest, "", &["what", "who", "why", "mode"]),
        "xvfb-run" => skip_options(
            rest,
            "nsfepw",
            &["server-num", "server-args", "auth-file", "error-file", "xauth-protocol", "wait"],
        ),
        "ssh-agent" => skip_options(rest, "aEtP", &[]),
        "numactl" => {
            skip_options(rest, "NmCipP", &["cpunodebind", "membind", "physcpubind", "interleave", "preferred"])
        }
        "prlimit" => {
            if rest.iter().any(|a| a.text == "-p" || a.text.starts_with("--pid")) {
                part.add(C::Mutation, "prlimit --pid changes a running process");
                return Unwrapped::Done;
            }
            skip_options(rest, "o", &["output"])
        }
        "cpulimit" => {
            if rest.iter().any(|a| a.text == "-p" || a.text.starts_with("--pid")) {
                part.add(C::Mutation, "cpulimit --pid changes a running process");
                return Unwrapped::Done;
            }
            skip_options(rest, "le", &["limit", "exe"])
        }
        "faketime" => skip_positionals(skip_options(rest, "", &[]), 1),
        "gtimeout" => skip_positionals(skip_options(rest, "sk", &["signal", "kill-after"]), 1),
        "entr" => {
            // `entr -s 'cmd'` hands its argument to a shell.
            let after = skip_options(rest, "", &[]);
            if rest.iter().take_while(|a| a.text.starts_with('-')).any(|a| a.text.contains('s')) {
                body(an, after.first(), "entr -s", part);
                return Unwrapped::Done;
            }
            after
        }
        "sshpass" => skip_options(rest, "pfdP", &[]),
        "gosu" | "su-exec" | "setuidgid" | "runcon" => {
            // `gosu USER CMD…`, `runcon CONTEXT CMD…`; `runcon -u U -r R -t T CMD…` names
            // no context word.
            part.add(C::PrivilegeEscalation, format!("{name} runs as another user or security context"));
            let context_by_options = name == "runcon" && rest.iter().any(|a| a.text.starts_with('-'));
            skip_positionals(skip_options(rest, "urtl", &[]), usize::from(!context_by_options))
        }
        "chpst" => {
            if rest.iter().any(|a| a.text.starts_with("-u") || a.text.starts_with("-U")) {
                part.add(C::PrivilegeEscalation, "chpst -u runs as another user");
            }
            skip_options(rest, "uUbenlLmdofcpr/", &[])
        }
        "please" | "sudo-rs" => {
            part.add(C::PrivilegeEscalation, format!("{name} runs as another user"));
            skip_options(rest, "utgdr", &["user", "target", "group", "dir"])
        }
        "parallel" | "sem" => return super::wrappers::parallel(an, name, rest, part),
        "op" | "doppler" | "dotenvx" | "infisical" | "aws-vault" | "mise" | "rtx" | "asdf" | "rbenv" | "pyenv"
        | "nodenv" | "direnv" | "nix" | "nix-shell" | "devbox" | "flox" | "env-cmd" | "cross-env" | "dotenv" => {
            match super::wrappers::runner(an, name, rest, part) {
                Some(inner) => inner,
                None => return Unwrapped::Done,
            }
        }
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
            // The mask or (with -c) the CPU list comes first; with -p a pid, no command.
            if rest.iter().take_while(|a| a.text.starts_with('-')).any(|a| a.text.contains('p') || a.text == "--pid") {
                part.add(C::Mutation, "taskset -p changes a running process");
                return Unwrapped::Done;
            }
            skip_positionals(after, 1)
        }
        "stdbuf" => skip_options(rest, "ioe", &["input", "output", "error"]),
        "xargs" => {
            part.add(C::ReadOnly, "");
            let after = skip_options(
                rest,
                "ILnPdaEs",
                &["max-lines", "max-args", "max-procs", "delimiter", "arg-file", "max-chars", "process-slot-var"],
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
        // Run their command as given; only the way it runs differs.
        "setarch" | "linux32" | "linux64" => {
            skip_options(skip_positionals(rest, usize::from(name == "setarch")), "", &[])
        }
        "strace" | "ltrace" => skip_options(rest, "eoOpPsSuEXIb", &["output", "trace", "signal", "user", "env"]),
        "script" => {
            // `script -c CMD [file]` runs CMD in a shell.
            if let Some(pos) = rest.iter().position(|a| {
                a.is("-c")
                    || a.is("--command")
                    || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.ends_with('c'))
            }) {
                body(an, rest.get(pos + 1), "script -c", part);
            }
            part.add(C::Mutation, "script writes a typescript file");
            return Unwrapped::Done;
        }
        "watch" => {
            // `watch` joins its arguments into a shell command, run again and again.
            let after = skip_options(rest, "nd", &["interval", "differences"]);
            join_as_script(an, after, "watch", part);
            return Unwrapped::Done;
        }
        "flock" => {
            // `flock [opts] FILE -c CMD` or `flock [opts] FILE CMD…`: -c counts only
            // where flock reads it, right after the lock file.
            let after = skip_options(rest, "wE", &["timeout", "conflict-exit-code"]);
            match after.get(1) {
                Some(c) if c.is("-c") || c.is("--command") => {
                    body(an, after.get(2), "flock -c", part);
                    return Unwrapped::Done;
                }
                _ => skip_positionals(after, 1),
            }
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

/// The words that are neither options nor the values of `with_value` options: a
/// subcommand's verb and operands (`kubectl -n ns get pods` → `get pods`).
pub fn operand_words<'a>(args: &'a [Arg], with_value: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if with_value.contains(&t) {
            i += 2;
            continue;
        }
        if !t.starts_with('-') {
            out.push(t);
        }
        i += 1;
    }
    out
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
        Some(w) => match super::words::script_text(&w.text, &an.vars) {
            Some(script) => an.script(&script, Some(via)),
            None => part.add(C::Opaque, format!("{via} runs a script computed at run time ({})", w.text)),
        },
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
