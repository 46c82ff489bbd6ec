//! What each known program does with its arguments. A program not named here is a
//! mutation ("not known to be read-only"); a path to a program file is opaque.

use super::Part;
use super::classify::{argv, body, is_kernel_or_disk, join_as_script, skip_options};
use super::walk::Analyzer;
use super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

mod git;
mod network;
mod packages;

/// Programs that only read, whatever their arguments (those with a writing flag are
/// handled below, not here).
const READ_ONLY: &[&str] = &[
    "ls",
    "ll",
    "dir",
    "vdir",
    "cat",
    "tac",
    "head",
    "tail",
    "less",
    "more",
    "most",
    "wc",
    "cut",
    "tr",
    "nl",
    "od",
    "xxd",
    "hexdump",
    "strings",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "diff",
    "cmp",
    "comm",
    "file",
    "stat",
    "du",
    "df",
    "pwd",
    "echo",
    "printf",
    "true",
    "false",
    "test",
    "[",
    "which",
    "whereis",
    "type",
    "whoami",
    "id",
    "groups",
    "uname",
    "printenv",
    "tree",
    "realpath",
    "readlink",
    "basename",
    "dirname",
    "jq",
    "column",
    "fold",
    "fmt",
    "paste",
    "join",
    "expand",
    "unexpand",
    "rev",
    "seq",
    "yes",
    "sleep",
    "locale",
    "getconf",
    "nproc",
    "uptime",
    "free",
    "ps",
    "pgrep",
    "pidof",
    "lsof",
    "lsblk",
    "ss",
    "netstat",
    "cal",
    "bc",
    "expr",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "sum",
    "base32",
    "base64",
    "basenc",
    "zcat",
    "bzcat",
    "xzcat",
    "zstdcat",
    "zless",
    "zgrep",
    "man",
    "help",
    "info",
    "cd",
    "pushd",
    "popd",
    "dirs",
    "unset",
    "set",
    "shopt",
    "read",
    "wait",
    "exit",
    "return",
    "shift",
    "getopts",
    "hash",
    "history",
    "jobs",
    "fg",
    "bg",
    "umask",
    "ulimit",
    "let",
    "times",
    ":",
    "break",
    "continue",
    "caller",
    "compgen",
    "complete",
    "logout",
    "env",
    "tty",
    "arch",
    "lscpu",
    "lsmod",
    "last",
    "w",
    "who",
    "users",
    "getent",
    "dmesg",
    "journalctl",
    "top",
    "htop",
    "vmstat",
    "iostat",
    "nm",
    "objdump",
    "readelf",
    "ldd",
    "size",
    "tput",
    "clear",
    "reset",
    "numfmt",
    "tsort",
    "look",
    "factor",
    "pathchk",
    "cut",
    "iconv",
    "delta",
    "bat",
    "fd",
    "fdfind",
    "fzf",
    "shellcheck",
];

/// Programs that change local files or state and nothing worse.
const MUTATION: &[&str] = &[
    "cp",
    "mv",
    "ln",
    "link",
    "mkdir",
    "touch",
    "truncate",
    "install",
    "rmdir",
    "unlink",
    "rm",
    "split",
    "csplit",
    "patch",
    "make",
    "gmake",
    "cmake",
    "ninja",
    "meson",
    "gcc",
    "g++",
    "cc",
    "c++",
    "clang",
    "clang++",
    "rustc",
    "ld",
    "as",
    "ar",
    "strip",
    "zip",
    "unzip",
    "gzip",
    "gunzip",
    "bzip2",
    "bunzip2",
    "xz",
    "unxz",
    "zstd",
    "unzstd",
    "7z",
    "vi",
    "vim",
    "nvim",
    "nano",
    "emacs",
    "ed",
    "ex",
    "pico",
    "sqlite3",
    "mktemp",
    "mkfifo",
    "mknod",
    "pkill",
    "killall",
    "renice",
    "at",
    "batch",
    "service",
    "ssh-keygen",
    "ssh-add",
    "gpg",
    "openssl",
    "rustup",
    "direnv",
    "shuf",
    "sponge",
    "chattr",
    "setfacl",
    "ctags",
    "prettier",
    "eslint",
    "black",
    "ruff",
    "rustfmt",
    "gofmt",
];

/// The system roots: removing or re-permissioning one of these recursively is destruction.
const SYSTEM_DIRS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/usr",
    "/var",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/var/lib",
    "/Users",
    "/System",
    "/Library",
    "/Applications",
    "/private",
];

const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "rbash"];
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "tclsh",
    "wish",
    "osascript",
    "pwsh",
    "powershell",
    "julia",
    "elixir",
    "erl",
    "escript",
    "guile",
    "racket",
    "sbcl",
    "ghci",
    "runghc",
    "scala",
    "groovy",
    "jshell",
    "java",
    "dotnet",
    "swift",
    "kotlin",
];

pub fn program(an: &mut Analyzer, name: &str, word: &str, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    match name {
        "git" => git::git(an, args, part),
        "gh" => network::gh(args, part),
        "curl" => network::curl(args, part),
        "wget" => network::wget(args, part),
        "http" | "https" | "xh" | "xhs" => network::httpie(args, part),
        "nc" | "ncat" | "netcat" | "socat" | "telnet" | "aria2c" | "ftp" | "lftp" | "tftp" => {
            network::client(name, args, part)
        }
        "ssh" | "scp" | "sftp" | "rsync" => network::remote_copy(name, args, part),
        "ping" | "ping6" | "dig" | "nslookup" | "host" | "traceroute" | "tracepath" | "whois" | "mtr" => {
            network::lookup(args, part)
        }
        "kubectl" | "helm" => network::cluster(name, args, part),
        _ if packages::handles(name) => packages::classify(an, name, args, part),
        _ if SHELLS.contains(&name) => shell(an, name, args, stdin_text, part),
        _ if INTERPRETERS.contains(&name) || name.starts_with("python3.") => interpreter(name, args, part),
        "eval" => join_as_script(an, args, "eval", part),
        "trap" => match args.first() {
            Some(a) if a.text.starts_with('-') => part.add(C::ReadOnly, ""),
            Some(action) => body(an, Some(action), "trap", part),
            None => part.add(C::ReadOnly, ""),
        },
        "alias" => {
            // The value is a command that may run later in the line: analyse it now.
            for a in args {
                match a.text.split_once('=') {
                    Some((_, value)) if a.literal => an.script(value, Some("alias")),
                    Some(_) => part.add(C::Opaque, "an alias computed at run time"),
                    None => {}
                }
            }
            part.add(C::ReadOnly, "");
        }
        "source" | "." => part.add(C::Opaque, format!("runs the commands in {}", show(args.first()))),
        "export" | "declare" | "typeset" | "local" | "readonly" => {
            super::classify::assignment_args(an, args, part);
            part.add(C::ReadOnly, "");
        }
        "find" => find(an, args, part),
        "fd" | "fdfind" => {
            // `fd -x cmd` / `-X cmd` runs cmd for the files found, like find -exec.
            if let Some(pos) =
                args.iter().position(|a| matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch"))
            {
                part.via.push("fd -x");
                argv(an, &args[pos + 1..], None, part);
            }
            part.add(C::ReadOnly, "");
        }
        "rg" if args.iter().any(|a| a.text.starts_with("--pre")) => {
            part.add(C::Opaque, "rg --pre runs a program on every file")
        }
        "man"
            if args.iter().any(|a| {
                a.text.starts_with("-P")
                    || a.text.starts_with("--pager")
                    || a.text.starts_with("-H")
                    || a.text.starts_with("--html")
            }) =>
        {
            part.add(C::Opaque, "man runs the pager it is given")
        }
        "sort" if args.iter().any(|a| a.text.starts_with("--compress-program")) => {
            part.add(C::Opaque, "sort --compress-program runs a program")
        }
        "tree" if args.iter().any(|a| a.text == "-o") => {
            part.add(C::Mutation, "tree -o writes a file");
            part.effects.insert(E::WriteFile);
        }
        "fzf" if args.iter().any(|a| a.text.starts_with("--preview") || a.text.starts_with("--bind")) => {
            part.add(C::Opaque, "fzf runs the commands it is given")
        }
        "rm" | "rmdir" | "unlink" | "shred" => remove(name, args, part),
        "chmod" | "chown" | "chgrp" => permissions(name, args, part),
        "dd" => dd(args, part),
        "mv" => {
            for a in args.iter().filter(|a| !a.text.starts_with('-')) {
                if a.literal && is_system_dir(&a.text) {
                    part.add(C::SystemDestruction, format!("moves {}", a.text));
                }
            }
            writes(args, part, "");
        }
        "tee" => {
            let files: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
            for f in &files {
                if f.literal && is_kernel_or_disk(&f.text) {
                    part.add(C::SystemDestruction, format!("writes to {}", f.text));
                } else if !(f.literal && f.text.starts_with("/dev/")) {
                    part.add(C::Mutation, format!("writes to {}", f.text));
                    part.effects.insert(E::WriteFile);
                    part.scope.paths.push(f.text.clone());
                }
            }
            part.add(C::ReadOnly, "");
        }
        "sort" => {
            let out = args.iter().position(|a| {
                a.text == "-o" || a.text.starts_with("--output") || (a.text.starts_with("-o") && a.text.len() > 2)
            });
            if out.is_some() {
                part.add(C::Mutation, "sort -o writes a file");
                part.effects.insert(E::WriteFile);
            }
            part.add(C::ReadOnly, "");
        }
        "uniq" => {
            if args.iter().filter(|a| !a.text.starts_with('-')).count() >= 2 {
                part.add(C::Mutation, "uniq writes its second operand");
                part.effects.insert(E::WriteFile);
            }
            part.add(C::ReadOnly, "");
        }
        "sed" => sed(args, part),
        "awk" | "gawk" | "mawk" | "nawk" => awk(args, part),
        "yq" => {
            if args.iter().any(|a| a.text == "-i" || a.text.starts_with("--inplace")) {
                part.add(C::Mutation, "yq -i edits files in place");
            }
            part.add(C::ReadOnly, "");
        }
        "tar" | "bsdtar" => tar(args, part),
        "date" => {
            if args.iter().any(|a| a.text == "-s" || a.text.starts_with("--set")) {
                part.add(C::Mutation, "date --set changes the clock");
            }
            part.add(C::ReadOnly, "");
        }
        "hostname" => {
            if args.iter().any(|a| !a.text.starts_with('-')) {
                part.add(C::Mutation, "sets the host name");
            }
            part.add(C::ReadOnly, "");
        }
        "crontab" => {
            if args.iter().any(|a| a.is("-l")) {
                part.add(C::ReadOnly, "")
            } else {
                part.add(C::Mutation, "edits the crontab")
            }
        }
        "kill" => kill(args, part),
        "killall5" => part.add(C::SystemDestruction, "signals every process"),
        "shutdown" | "reboot" | "halt" | "poweroff" => {
            part.add(C::SystemDestruction, format!("{name} stops the machine"))
        }
        "init" | "telinit" => part.add(C::SystemDestruction, "changes the runlevel"),
        "systemctl" => systemctl(args, part),
        _ if name.starts_with("mkfs") || name.starts_with("mke2fs") => {
            part.add(C::SystemDestruction, format!("{name} formats a disk"))
        }
        "mkswap" | "wipefs" | "fdisk" | "sfdisk" | "cfdisk" | "gdisk" | "sgdisk" | "parted" | "blkdiscard" | "fsck" => {
            part.add(C::SystemDestruction, format!("{name} rewrites a disk"))
        }
        "nsenter" | "unshare" | "chroot" | "pivot_root" | "switch_root" | "mount" | "umount" | "capsh" | "bwrap"
        | "firejail" | "systemd-nspawn" | "systemd-run" | "lxc-attach" | "lxc-execute" | "setns" => {
            part.add(C::NamespaceEscape, format!("{name} enters or makes namespaces or mounts"))
        }
        "ip" => ip(an, args, part),
        "insmod" | "rmmod" | "modprobe" | "kexec" | "sysctl" | "setcap" | "passwd" | "chpasswd" | "usermod"
        | "useradd" | "userdel" | "groupadd" | "visudo" | "newgrp" | "sg" | "setpriv" => {
            part.add(C::PrivilegeEscalation, format!("{name} changes privileges or the kernel"))
        }
        "docker" | "podman" | "nerdctl" => network::container(name, args, part),
        _ if READ_ONLY.contains(&name) => part.add(C::ReadOnly, ""),
        _ if MUTATION.contains(&name) => {
            for a in args.iter().filter(|a| a.literal && is_kernel_or_disk(&a.text)) {
                part.add(C::SystemDestruction, format!("{name} on {}", a.text));
            }
            writes(args, part, name);
        }
        _ if word.contains('/') => part.add(C::Opaque, format!("runs the program file {word}")),
        _ => part.add(C::Mutation, format!("{name}: not known to be read-only")),
    }
}

fn show(a: Option<&Arg>) -> String {
    a.map_or_else(|| "a file".to_owned(), |a| a.text.clone())
}

/// A mutation whose operands are files it writes.
fn writes(args: &[Arg], part: &mut Part, name: &str) {
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
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            "*" | ".*" => {}
            other => parts.push(other),
        }
    }
    let normal = format!("/{}", parts.join("/"));
    SYSTEM_DIRS.contains(&normal.as_str())
}

fn is_home(a: &Arg) -> bool {
    if !a.home {
        return false;
    }
    let t = a.text.trim_matches('"');
    let rest = ["~", "${HOME}", "$HOME"].iter().find_map(|p| t.strip_prefix(p)).unwrap_or("");
    matches!(rest.trim_matches('"'), "" | "/" | "/*" | "/." | "/.*")
}

/// `/$X`, `/u*`, `/"$(…)"`: a path whose first component is computed or a pattern may
/// well be a system root.
fn may_be_root(a: &Arg) -> bool {
    let Some(rest) = a.text.trim_start_matches('"').strip_prefix('/') else { return false };
    let first = rest.split('/').next().unwrap_or("");
    (!a.literal && (first.starts_with('$') || first.starts_with('`') || first.starts_with('"') || first.is_empty()))
        || (a.glob && first.contains(['*', '?', '[']))
}

fn remove(name: &str, args: &[Arg], part: &mut Part) {
    let recursive = args.iter().take_while(|a| a.text != "--").any(|a| {
        a.text == "--recursive"
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

fn permissions(name: &str, args: &[Arg], part: &mut Part) {
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
        let setid_octal = m.len() == 4
            && m.chars().all(|c| c.is_ascii_digit())
            && matches!(m.as_bytes()[0], b'2' | b'4' | b'6' | b'3' | b'5' | b'7');
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

fn dd(args: &[Arg], part: &mut Part) {
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

fn kill(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| a.text == "-l" || a.text == "-L" || a.text == "--list" || a.text == "--table") {
        part.add(C::ReadOnly, "");
        return;
    }
    let after_signal = skip_options(args, "sn", &["signal"]);
    let targets = if args
        .first()
        .is_some_and(|a| a.text.starts_with('-') && a.text[1..].chars().all(|c| c.is_ascii_alphanumeric()))
    {
        // `kill -9 -1`: the first word is the signal, so `-1` after it is a pid.
        args.iter().skip(1).collect::<Vec<_>>()
    } else {
        after_signal.iter().collect()
    };
    if targets.iter().any(|a| a.text == "-1") {
        part.add(C::SystemDestruction, "kill -1 signals every process");
    }
    part.add(C::Mutation, "kill signals processes");
}

fn systemctl(args: &[Arg], part: &mut Part) {
    let verb = args.iter().find(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).unwrap_or("");
    match verb {
        "poweroff" | "reboot" | "halt" | "kexec" | "suspend" | "hibernate" | "emergency" | "rescue" | "isolate"
        | "default" | "soft-reboot" => part.add(C::SystemDestruction, format!("systemctl {verb}")),
        "" | "status" | "show" | "cat" | "help" | "list-units" | "list-unit-files" | "list-timers" | "list-sockets"
        | "list-dependencies" | "list-jobs" | "is-active" | "is-enabled" | "is-failed" | "is-system-running" => {
            part.add(C::ReadOnly, "")
        }
        _ => part.add(C::Mutation, format!("systemctl {verb}")),
    }
}

fn ip(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    let words: Vec<&str> = args.iter().filter(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).collect();
    if words.first() == Some(&"netns") && words.get(1) == Some(&"exec") {
        part.add(C::NamespaceEscape, "ip netns exec enters a network namespace");
        if let Some(pos) = args.iter().position(|a| a.text == "exec") {
            argv(an, args.get(pos + 2..).unwrap_or(&[]), None, part);
        }
        return;
    }
    if words
        .iter()
        .any(|w| matches!(*w, "add" | "del" | "delete" | "set" | "flush" | "change" | "replace" | "append" | "attach"))
    {
        part.add(C::Mutation, "ip changes the network configuration");
    } else {
        part.add(C::ReadOnly, "");
    }
}

fn find(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
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

fn sed(args: &[Arg], part: &mut Part) {
    let in_place = args.iter().any(|a| {
        a.text.starts_with("--in-place")
            || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains('i'))
    });
    if in_place {
        part.add(C::Mutation, "sed -i edits files in place");
        part.effects.insert(E::WriteFile);
    }
    // The script's own `w file` and `e command`: we do not parse sed, so any script with
    // a `w`, `W` or `e` command letter in command position is taken as writing or running.
    let scripts = args.iter().filter(|a| !a.text.starts_with('-'));
    for s in scripts.take(1).chain(args.windows(2).filter(|w| w[0].text == "-e").map(|w| &w[1])) {
        let t = &s.text;
        let risky = t.split([';', '\n', '}', '{']).any(|cmd| {
            let c =
                cmd.trim_start().trim_start_matches(|c: char| c.is_ascii_digit() || c == ',' || c == '$' || c == '!');
            c.starts_with('w') || c.starts_with('W') || c.starts_with('e') || c.starts_with('r')
        }) || t.contains("/w ")
            || t.ends_with("/w")
            || t.contains("/e");
        if risky || !s.literal {
            part.add(C::Opaque, "the sed script may write files or run commands");
        }
    }
    part.add(C::ReadOnly, "");
}

fn awk(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| a.text == "-i" || a.text == "inplace" || a.text.starts_with("--include")) {
        part.add(C::Mutation, "awk -i inplace edits files");
    }
    let program = skip_options(args, "fvF", &[]).first();
    if args.iter().any(|a| a.text == "-f") {
        part.add(C::Opaque, "awk runs a program file");
    } else if let Some(p) = program
        && (!p.literal || p.text.contains("system") || p.text.contains('>') || p.text.contains('|'))
    {
        part.add(C::Opaque, "the awk program may run commands or write files");
    }
    part.add(C::ReadOnly, "");
}

fn tar(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| {
        a.text.contains("to-command")
            || a.text.contains("checkpoint-action")
            || a.text.contains("use-compress-program")
            || a.text == "-I"
    }) {
        part.add(C::Opaque, "tar may run another program");
    }
    let mode = args.first().map(|a| a.text.trim_start_matches('-')).unwrap_or("");
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

fn shell(an: &mut Analyzer, name: &str, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    let mut i = 0;
    let mut command_mode = false;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if matches!(t, "--rcfile" | "--init-file") || ((t == "-o" || t == "+o") && args.get(i + 1).is_some()) {
            i += 2;
            continue;
        }
        if t.starts_with("--") {
            i += 1;
            continue;
        }
        // An option cluster is letters only; anything else is where bash would stop
        // (with an error), and we read it as the command string: the worse case.
        if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 && t[1..].chars().all(|c| c.is_ascii_alphabetic())
        {
            if t.starts_with('-') && t.contains('c') {
                command_mode = true;
            }
            i += 1;
            continue;
        }
        break;
    }
    if command_mode {
        let via: &'static str = match name {
            "sh" => "sh -c",
            "zsh" => "zsh -c",
            "dash" => "dash -c",
            _ => "bash -c",
        };
        match args.get(i) {
            Some(_) => body(an, args.get(i), via, part),
            None => part.add(C::Opaque, format!("{via} without a command string")),
        }
        return;
    }
    match (args.get(i), stdin_text) {
        (Some(script), _) => part.add(C::Opaque, format!("{name} runs the script file {}", script.text)),
        (None, Some(text)) => {
            an.script(text, Some("shell stdin"));
            part.add(C::ReadOnly, "");
        }
        (None, None) => part.add(C::Opaque, format!("{name} runs commands read from its input")),
    }
}

fn interpreter(name: &str, args: &[Arg], part: &mut Part) {
    let first = args.first().map(|a| a.text.as_str()).unwrap_or("");
    if matches!(first, "--version" | "-V" | "-v" | "--help" | "-h") && args.len() == 1 {
        part.add(C::ReadOnly, "");
        return;
    }
    if (name.starts_with("python") || name.starts_with("pypy"))
        && let Some(pos) = args.iter().position(|a| a.is("-m"))
    {
        let module = args.get(pos + 1).map(|a| a.text.as_str()).unwrap_or("");
        if module == "pip" || module == "ensurepip" {
            packages::pip(&args[pos + 2..], part);
            return;
        }
        if module == "twine" && args.get(pos + 2).is_some_and(|a| a.is("upload")) {
            part.add(C::RemoteMutation, "twine upload publishes a package");
            part.effects.insert(E::PublishPackage);
            return;
        }
    }
    let inline =
        args.iter().any(|a| matches!(a.text.as_str(), "-c" | "-e" | "-E" | "--eval" | "-p" | "--print" | "-r"));
    if inline {
        part.add(C::Opaque, format!("{name} runs inline code"));
    } else {
        part.add(C::Opaque, format!("{name} runs a program we cannot see into"));
    }
}
