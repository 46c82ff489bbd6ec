//! What each known program does with its arguments. A program not named here is a
//! mutation ("not known to be read-only"); a path to a program file is opaque.

use super::Part;
use super::classify::{argv, body, is_kernel_or_disk, join_as_script};
use super::walk::Analyzer;
use super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

mod files;
mod git;
mod network;
mod packages;
mod system;

use files::{awk, dd, find, is_system_dir, permissions, remove, sed, tar, writes};
use system::{ip, kill, systemctl};

/// Programs that only read, whatever their arguments (those with a writing flag are
/// handled below, not here).
#[rustfmt::skip]
const READ_ONLY: &[&str] = &[
    "ls", "ll", "dir", "vdir", "cat", "tac", "head", "tail", "less", "more", "most", "wc", "cut", "tr", "nl", "od",
    "xxd", "hexdump", "strings", "grep", "egrep", "fgrep", "rg", "ag", "ack", "diff", "cmp", "comm", "file", "stat",
    "du", "df", "pwd", "echo", "printf", "true", "false", "test", "[", "which", "whereis", "type", "whoami", "id",
    "groups", "uname", "printenv", "tree", "realpath", "readlink", "basename", "dirname", "jq", "column", "fold",
    "fmt", "paste", "join", "expand", "unexpand", "rev", "seq", "yes", "sleep", "locale", "getconf", "nproc",
    "uptime", "free", "ps", "pgrep", "pidof", "lsof", "lsblk", "ss", "netstat", "cal", "bc", "expr", "md5sum",
    "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum", "base32", "base64",
    "basenc", "zcat", "bzcat", "xzcat", "zstdcat", "zless", "zgrep", "man", "help", "info", "cd", "pushd", "popd",
    "dirs", "unset", "set", "shopt", "read", "wait", "exit", "return", "shift", "getopts", "hash", "history", "jobs",
    "fg", "bg", "umask", "ulimit", "let", "times", ":", "break", "continue", "caller", "compgen", "complete",
    "logout", "env", "tty", "arch", "lscpu", "lsmod", "last", "w", "who", "users", "getent", "dmesg", "journalctl",
    "top", "htop", "vmstat", "iostat", "nm", "objdump", "readelf", "ldd", "size", "tput", "clear", "reset", "numfmt",
    "tsort", "look", "factor", "pathchk", "cut", "iconv", "delta", "bat", "fd", "fdfind", "fzf", "shellcheck",
];

/// Programs that change local files or state and nothing worse.
#[rustfmt::skip]
const MUTATION: &[&str] = &[
    "cp", "mv", "ln", "link", "mkdir", "touch", "truncate", "install", "rmdir", "unlink", "rm", "split", "csplit",
    "patch", "make", "gmake", "cmake", "ninja", "meson", "gcc", "g++", "cc", "c++", "clang", "clang++", "rustc",
    "ld", "as", "ar", "strip", "zip", "unzip", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd",
    "7z", "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico", "sqlite3", "mktemp", "mkfifo", "mknod", "pkill",
    "killall", "renice", "at", "batch", "service", "ssh-keygen", "ssh-add", "gpg", "openssl", "rustup", "direnv",
    "shuf", "sponge", "chattr", "setfacl", "ctags", "prettier", "eslint", "black", "ruff", "rustfmt", "gofmt",
];

#[rustfmt::skip]
const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "rbash",
];

#[rustfmt::skip]
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "deno", "perl", "ruby", "php", "lua",
    "luajit", "Rscript", "tclsh", "wish", "osascript", "pwsh", "powershell", "julia", "elixir", "erl", "escript",
    "guile", "racket", "sbcl", "ghci", "runghc", "scala", "groovy", "jshell", "java", "dotnet", "swift", "kotlin",
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
        "trap" => {
            // `trap -- 'cmd' EXIT`: after -- (or -p/-l, which only print) comes the action.
            let rest: Vec<&Arg> = args.iter().skip_while(|a| a.is("--")).collect();
            match rest.first() {
                Some(a) if a.text == "-p" || a.text == "-l" || a.text == "-P" => part.add(C::ReadOnly, ""),
                Some(action) => body(an, Some(action), "trap", part),
                None => part.add(C::ReadOnly, ""),
            }
        }
        "hash" if args.iter().any(|a| a.text.starts_with('-') && a.text.contains('p')) => {
            part.add(C::Opaque, "hash -p makes a name run another program")
        }
        "compgen" | "complete"
            if args.iter().any(|a| a.text.starts_with('-') && (a.text.contains('C') || a.text.contains('F'))) =>
        {
            part.add(C::Opaque, format!("{name} -C/-F runs a command or function"))
        }
        "history"
            if args.iter().any(|a| a.text.starts_with('-') && a.text.contains(['w', 'a', 's', 'c', 'd', 'n', 'r'])) =>
        {
            part.add(C::Mutation, "history changes or writes the history")
        }
        "xxd" if args.iter().filter(|a| !a.text.starts_with('-')).count() >= 2 => {
            part.add(C::Mutation, "xxd writes its second operand");
            part.effects.insert(E::WriteFile);
        }
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
        // Builtins that set a variable by name without an assignment word.
        "read" | "printf" | "mapfile" | "readarray" | "getopts" => {
            let targets: Vec<&Arg> = match name {
                "printf" => args.windows(2).filter(|w| w[0].is("-v")).map(|w| &w[1]).collect(),
                "getopts" => args.get(1).into_iter().collect(),
                "read" => super::classify::skip_options(args, "pdnNtuai", &[]).iter().collect(),
                _ => super::classify::skip_options(args, "dnOsuCc", &[]).iter().take(1).collect(),
            };
            let unknown = Arg { text: String::new(), literal: false, glob: false, home: false };
            for t in targets {
                let target = t.text.split('[').next().unwrap_or("");
                super::classify::assignment(an, target, &unknown, part);
            }
            part.add(C::ReadOnly, "");
        }
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
                } else if !(f.literal && super::classify::is_harmless_device(&f.text)) {
                    part.add(C::Mutation, format!("writes to {}", f.text));
                    part.effects.insert(E::WriteFile);
                    part.scope.paths.push(f.text.clone());
                }
            }
            part.add(C::ReadOnly, "");
        }
        "sort" => {
            // `-o F`, `-uo F`, `--output=F` and GNU's prefixes of it (`--outp`).
            let out = args.iter().position(|a| {
                let long = a.text.split('=').next().unwrap_or("");
                (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains('o'))
                    || (long.len() >= 4 && "--output".starts_with(long))
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
        _ if name.starts_with("mkfs") || name.starts_with("mke2fs") || name.starts_with("fsck") => {
            part.add(C::SystemDestruction, format!("{name} formats a disk"))
        }
        "mkswap" | "mkdosfs" | "mkexfatfs" | "cryptsetup" | "e2fsck" | "tune2fs" | "resize2fs" | "zpool"
        | "lvremove" | "vgremove" | "pvremove" | "wipefs" | "fdisk" | "sfdisk" | "cfdisk" | "gdisk" | "sgdisk"
        | "parted" | "blkdiscard" | "fsck" => part.add(C::SystemDestruction, format!("{name} rewrites a disk")),
        "nsenter" | "unshare" | "chroot" | "pivot_root" | "switch_root" | "mount" | "umount" | "capsh" | "bwrap"
        | "firejail" | "systemd-nspawn" | "systemd-run" | "lxc-attach" | "lxc-execute" | "setns" => {
            part.add(C::NamespaceEscape, format!("{name} enters or makes namespaces or mounts"))
        }
        "ip" => ip(an, args, part),
        "insmod" | "rmmod" | "modprobe" | "kexec" | "sysctl" | "setcap" | "passwd" | "chpasswd" | "usermod"
        | "useradd" | "userdel" | "groupadd" | "visudo" | "newgrp" | "sg" | "setpriv" | "sudoedit" | "machinectl" => {
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
        _ => {
            for a in args.iter().filter(|a| a.literal && is_kernel_or_disk(&a.text)) {
                part.add(C::SystemDestruction, format!("{name} on {}", a.text));
            }
            part.add(C::Mutation, format!("{name}: not known to be read-only"))
        }
    }
}

fn show(a: Option<&Arg>) -> String {
    a.map_or_else(|| "a file".to_owned(), |a| a.text.clone())
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
        && let Some(pos) = args.iter().position(|a| a.text.starts_with("-m"))
    {
        // `-m pip` and `-mpip` alike; `rest` is what follows the module name.
        let attached = args[pos].text.strip_prefix("-m").filter(|m| !m.is_empty());
        let (module, rest) = match attached {
            Some(m) => (m, args.get(pos + 1..).unwrap_or(&[])),
            None => (args.get(pos + 1).map(|a| a.text.as_str()).unwrap_or(""), args.get(pos + 2..).unwrap_or(&[])),
        };
        if module == "pip" || module == "ensurepip" {
            packages::pip(rest, part);
            return;
        }
        if module == "twine" && rest.first().is_some_and(|a| a.is("upload")) {
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
