//! What each known program does with its arguments. A program not named here is a
//! mutation ("not known to be read-only"); a path to a program file is opaque.

use super::Part;
use super::classify::{argv, body, is_kernel_or_disk, join_as_script, operand_words};
use super::walk::Analyzer;
use super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

mod awk;
mod cloud;
mod containers;
mod files;
mod git;
mod inline;
mod network;
mod packages;
mod shells;
mod system;

use awk::awk;
pub use files::changes_file as file_changed;
use files::{changes_file, copies, dd, find, is_system_dir, permissions, remove, sed, tar, writes};
pub use packages::covered as package_managers;
pub use shells::is_shell;
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
    "apropos", "whatis", "findmnt", "lsns", "lslocks", "lsipc", "lsusb", "lspci",
];

/// Programs that change local files or state and nothing worse.
#[rustfmt::skip]
const MUTATION: &[&str] = &[
    "cp", "mv", "ln", "link", "mkdir", "touch", "truncate", "install", "rmdir", "unlink", "rm", "split", "csplit",
    "patch", "make", "gmake", "cmake", "ninja", "meson", "gcc", "g++", "cc", "c++", "clang", "clang++", "rustc",
    "ld", "as", "ar", "strip", "zip", "unzip", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd",
    "7z", "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico", "sqlite3", "mktemp", "mkfifo", "mknod", "pkill",
    "killall", "renice", "at", "batch", "service", "ssh-keygen", "ssh-add", "gpg", "openssl", "rustup", "direnv",
    "sponge", "chattr", "setfacl", "ctags", "prettier", "eslint", "black", "ruff", "rustfmt", "gofmt",
];

#[rustfmt::skip]
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "deno", "perl", "ruby", "php", "lua",
    "luajit", "Rscript", "tclsh", "wish", "osascript", "pwsh", "powershell", "julia", "elixir", "erl", "escript",
    "guile", "racket", "sbcl", "ghci", "runghc", "scala", "groovy", "jshell", "java", "dotnet", "swift", "kotlin",
];

pub fn program(an: &mut Analyzer, name: &str, word: &str, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    shell_state(an, name, args);
    match name {
        _ if version_probe(name, args) => part.add(C::ReadOnly, ""),
        "git" => git::git(an, args, part),
        "gh" => network::gh(args, part),
        "curl" => network::curl(args, part),
        "wget" => network::wget(args, part),
        "http" | "https" | "xh" | "xhs" => network::httpie(args, part),
        "nc" | "ncat" | "netcat" | "socat" | "telnet" | "aria2c" | "ftp" | "lftp" | "tftp" => {
            network::client(name, args, part)
        }
        "ssh" | "scp" | "sftp" | "rsync" => {
            if files::setid_mode(args) {
                part.add(C::PrivilegeEscalation, format!("{name} makes a set-id program"));
            }
            network::remote_copy(name, args, part)
        }
        "ping" | "ping6" | "dig" | "nslookup" | "host" | "traceroute" | "tracepath" | "whois" | "mtr" => {
            network::lookup(args, part)
        }
        "kubectl" | "oc" => cloud::kubectl(args, part),
        "helm" => cloud::helm(args, part),
        "terraform" | "tofu" | "terragrunt" => cloud::terraform(name, args, part),
        "pulumi" => cloud::pulumi(args, part),
        "aws" => cloud::aws(args, part),
        "gcloud" | "az" | "doctl" | "linode-cli" | "hcloud" | "scw" | "oci" | "ibmcloud" | "eksctl" => {
            cloud::grouped_cli(name, args, part)
        }
        "flyctl" | "fly" | "heroku" | "vercel" | "netlify" | "wrangler" | "firebase" | "railway" | "render"
        | "serverless" | "sls" | "cdk" | "sam" | "amplify" | "surge" => cloud::deployer(name, args, part),
        "gsutil" | "s3cmd" | "rclone" | "mc" => network::object_store(name, args, part),
        "mosh" | "autossh" | "ssh-copy-id" => network::remote_shell(name, args, part),
        _ if packages::handles(name) => packages::classify(an, name, args, part),
        _ if is_shell(name) => shells::shell(an, name, args, stdin_text, part),
        _ if INTERPRETERS.contains(&name) || name.starts_with("python3.") => {
            inline::interpreter(an, name, args, stdin_text, part)
        }
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
        "xxd"
            if operand_words(args, &["-c", "-g", "-l", "-o", "-s", "-n", "-cols", "-len", "-seek", "-name"]).len()
                >= 2 =>
        {
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
        "source" | "." => match args.first().and_then(|a| a.output.as_ref()) {
            // `source <(echo …)`: the line shows what is sourced.
            Some(text) => {
                let text = text.clone();
                an.script(&text, Some("source <(…)"));
                part.add(C::ReadOnly, "");
            }
            None => part.add(C::Opaque, format!("runs the commands in {}", show(args.first()))),
        },
        // Builtins that set a variable by name without an assignment word.
        "read" | "printf" | "mapfile" | "readarray" | "getopts" => {
            let targets: Vec<&Arg> = match name {
                "printf" => args.windows(2).filter(|w| w[0].is("-v")).map(|w| &w[1]).collect(),
                "getopts" => args.get(1).into_iter().collect(),
                "read" => super::classify::skip_options(args, "pdnNtuai", &[]).iter().collect(),
                _ => super::classify::skip_options(args, "dnOsuCc", &[]).iter().take(1).collect(),
            };
            let unknown = Arg::dynamic("");
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
        "rm" | "rmdir" | "unlink" | "shred" => remove(an, name, args, part),
        "chmod" | "chown" | "chgrp" | "chattr" => permissions(an, name, args, part),
        "dd" => dd(an, args, part),
        "mv" | "cp" | "install" | "ln" | "link" => copies(an, name, args, part),
        "truncate" | "touch" | "mkdir" | "mknod" | "mkfifo" => {
            let operands =
                super::classify::skip_options(args, "srodtm", &["size", "reference", "date", "time", "mode"]);
            for t in operands.iter().filter(|a| !a.text.starts_with('-')) {
                changes_file(&an.dirs.cwd, t, &format!("{name} changes"), part);
            }
            writes(args, part, name);
        }
        "tee" => {
            let files: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
            for f in &files {
                // A disk or kernel file is destruction (said by changes_file); a harmless
                // device is nothing; anything else is a file written.
                changes_file(&an.dirs.cwd, f, "tee writes", part);
                let device = f.literal && (is_kernel_or_disk(&f.text) || super::classify::is_harmless_device(&f.text));
                if !device {
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
        "shuf" | "less" if writes_with_option(name, args) => {
            part.add(C::Mutation, format!("{name} writes the file its option names"));
            part.effects.insert(E::WriteFile);
        }
        "shuf" => part.add(C::ReadOnly, ""),
        "rustc" if rustc_only_prints(args) => part.add(C::ReadOnly, ""),
        "uniq" => {
            if args.iter().filter(|a| !a.text.starts_with('-')).count() >= 2 {
                part.add(C::Mutation, "uniq writes its second operand");
                part.effects.insert(E::WriteFile);
            }
            part.add(C::ReadOnly, "");
        }
        "sed" => sed(an, args, part),
        "awk" | "gawk" | "mawk" | "nawk" => awk(args, part),
        "yq" => {
            if args.iter().any(|a| a.text == "-i" || a.text.starts_with("--inplace")) {
                part.add(C::Mutation, "yq -i edits files in place");
            }
            part.add(C::ReadOnly, "");
        }
        "tar" | "bsdtar" => tar(an, args, part),
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
        | "chsh" | "gpasswd" | "adduser" | "addgroup" | "deluser" | "groupmod" | "vipw" | "vigr" | "pwconv"
        | "dscl" | "useradd" | "userdel" | "groupadd" | "visudo" | "newgrp" | "sg" | "setpriv" | "sudoedit"
        | "machinectl" => part.add(C::PrivilegeEscalation, format!("{name} changes privileges or the kernel")),
        "docker" | "podman" | "nerdctl" => containers::container(name, args, part),
        "unzip" | "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "zstd" | "unzstd" | "lz4" | "lzma"
        | "unlzma" | "brotli" | "pigz" | "unpigz" | "7z"
            if archive_only_reads(name, args) =>
        {
            part.add(C::ReadOnly, "")
        }
        _ if READ_ONLY.contains(&name) => part.add(C::ReadOnly, ""),
        _ if MUTATION.contains(&name) => {
            for a in args.iter().filter(|a| a.literal && is_kernel_or_disk(&a.text)) {
                part.add(C::SystemDestruction, format!("{name} on {}", a.text));
            }
            writes(args, part, name);
        }
        _ if word.contains('/') => {
            part.add(C::Opaque, format!("runs the program file {word}"));
            search_arguments(an, args, part);
        }
        _ => {
            for a in args.iter().filter(|a| a.literal && is_kernel_or_disk(&a.text)) {
                part.add(C::SystemDestruction, format!("{name} on {}", a.text));
            }
            part.add(C::Mutation, format!("{name}: not known to be read-only"));
            search_arguments(an, args, part);
        }
    }
}

/// What a builtin does to the shell's own state: its directory and its variables.
fn shell_state(an: &mut Analyzer, name: &str, args: &[Arg]) {
    let here = !an.in_child;
    match name {
        "cd" | "pushd" | "popd" | "chdir" if here => an.dirs.builtin(name, args),
        // Anything may be assigned, or the directory changed, by what these run.
        "source" | "." => {
            an.vars.forget_all();
            an.dirs.lost();
        }
        "eval" if !args.iter().all(|a| a.literal) => {
            an.vars.forget_all();
            an.dirs.lost();
        }
        "eval" | "declare" | "typeset" | "local" | "readonly" | "read" | "mapfile" | "readarray" | "getopts"
        | "unset" | "trap" | "let" => an.vars.forget_all(),
        "printf" if args.iter().any(|a| a.text == "-v") => an.vars.forget_all(),
        "set" if args.iter().any(|a| !a.text.starts_with(['-', '+']) || a.text == "--") => an.vars.forget_positional(),
        "shift" => an.vars.forget_positional(),
        "export" => {
            let certain = here && an.branch == 0;
            if args.iter().any(|a| a.text.starts_with('-') && a.text.contains('n')) {
                an.vars.forget_all();
            }
            for a in args {
                match a.text.split_once('=').filter(|_| super::classify::is_assignment(&a.text)) {
                    Some((n, v)) => {
                        an.vars.assign(n, a.literal.then_some(v), certain);
                        an.vars.export(n);
                    }
                    None if !a.literal => an.vars.forget_all(),
                    None if !a.text.starts_with('-') => an.vars.export(&a.text),
                    None => {}
                }
            }
        }
        _ => {}
    }
}

/// An unknown program (or a program file) whose arguments hold a command we know is a
/// wrapper we do not: `mywrap sudo id` is judged no looser than `sudo id`. The words
/// from each one that names a known program on are classified as a command, and what
/// they would do is added. The search does not nest and looks at the first words only.
pub(super) fn search_arguments(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    const LOOK_AT: usize = 16;
    if an.searching {
        return;
    }
    an.searching = true;
    for (i, a) in args.iter().enumerate().take(LOOK_AT) {
        if !a.literal || a.text.starts_with('-') || a.text.contains('=') || a.text.is_empty() {
            continue;
        }
        let mut found = Part::default();
        let in_child = std::mem::replace(&mut an.in_child, true);
        argv(an, &args[i..], None, &mut found);
        an.in_child = in_child;
        let unknown = found.notes.iter().any(|n| n.ends_with("not known to be read-only"))
            || found.notes.iter().any(|n| n.starts_with("runs the program file"));
        if unknown {
            continue;
        }
        found.classes.remove(&C::ReadOnly);
        if !found.classes.is_empty() {
            part.notes.push(format!("its argument {} is a command it may run", a.text));
        }
        part.classes.extend(found.classes);
        part.effects.extend(found.effects.into_iter().filter(|e| *e != E::RunCommand));
        part.notes.extend(found.notes.into_iter().filter(|n| !n.is_empty()));
    }
    an.searching = false;
}

/// `--version`, `-version`, `-V` or `--help` alone (and `-v` for the programs where it
/// means the version): the program says what it is and runs nothing else.
fn version_probe(name: &str, args: &[Arg]) -> bool {
    const DASH_V: &[&str] = &["node", "nodejs", "php", "ruby", "perl", "mvn", "gradle", "npm", "pnpm", "yarn"];
    match args {
        [a] if a.literal => match a.text.as_str() {
            "--version" | "-version" | "-V" | "--help" => true,
            "-v" => DASH_V.contains(&name),
            _ => false,
        },
        _ => false,
    }
}

/// `less -o FILE`, `less --log-file=FILE`, `shuf -o FILE`: they copy what they show.
fn writes_with_option(name: &str, args: &[Arg]) -> bool {
    args.iter().any(|a| {
        let t = a.text.as_str();
        let short =
            |letters: &str| t.starts_with('-') && !t.starts_with("--") && t[1..].contains(|c| letters.contains(c));
        match name {
            "less" => short("oO") || t.starts_with("--log-file") || t.starts_with("--LOG-FILE"),
            _ => short("o") || t.starts_with("--output"),
        }
    })
}

/// `rustc --version`, `rustc -vV`, `rustc --print sysroot`: no input, no output file.
fn rustc_only_prints(args: &[Arg]) -> bool {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.text.as_str() {
            "--version" | "-V" | "-vV" | "-Vv" | "-v" | "--verbose" | "--help" | "-h" => {}
            "--print" | "--target" => i += 1,
            t if t.starts_with("--print=") || t.starts_with("--target=") => {}
            _ => return false,
        }
        i += 1;
    }
    !args.is_empty()
}

/// `unzip -l`, `gzip -dc f.gz`, `xz -l`, `7z l`: listing, testing or writing to stdout.
fn archive_only_reads(name: &str, args: &[Arg]) -> bool {
    let short = |letters: &str| {
        args.iter().any(|a| {
            a.text.starts_with('-') && !a.text.starts_with("--") && a.text[1..].contains(|c| letters.contains(c))
        })
    };
    let long = |names: &[&str]| args.iter().any(|a| names.contains(&a.text.as_str()));
    match name {
        "unzip" => short("lvtpZ") && !short("d"),
        "7z" => args.first().is_some_and(|a| matches!(a.text.as_str(), "l" | "t" | "i" | "h")),
        _ => short("clt") || long(&["--stdout", "--to-stdout", "--list", "--test"]),
    }
}

fn show(a: Option<&Arg>) -> String {
    a.map_or_else(|| "a file".to_owned(), |a| a.text.clone())
}
