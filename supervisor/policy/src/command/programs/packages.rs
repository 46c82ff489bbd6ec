//! Package managers: installs ask in chat, publishes are remote mutations, the rest runs
//! project code and is a mutation.

use super::super::Part;
use super::super::walk::Analyzer;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

const MANAGERS: &[&str] = &[
    "npm",
    "pnpm",
    "yarn",
    "bun",
    "npx",
    "pnpx",
    "bunx",
    "pip",
    "pip3",
    "pipx",
    "uv",
    "uvx",
    "poetry",
    "pipenv",
    "conda",
    "mamba",
    "micromamba",
    "cargo",
    "go",
    "gem",
    "bundle",
    "bundler",
    "apt",
    "apt-get",
    "aptitude",
    "dnf",
    "yum",
    "zypper",
    "apk",
    "brew",
    "port",
    "pacman",
    "composer",
    "twine",
    "flit",
    "nix-env",
    "dpkg",
    "rpm",
    "snap",
    "flatpak",
    "deno",
    "mvn",
    "gradle",
];

pub fn handles(name: &str) -> bool {
    MANAGERS.contains(&name) || (name.starts_with("pip3.") && name.len() > 5)
}

fn install(part: &mut Part, what: String) {
    part.add(C::Mutation, what);
    part.effects.insert(E::InstallPackage);
}

fn publish(part: &mut Part, what: String) {
    part.add(C::RemoteMutation, what);
    part.effects.insert(E::PublishPackage);
}

pub fn pip(rest: &[Arg], part: &mut Part) {
    match verb(rest) {
        "install" | "download" | "wheel" => install(part, "pip install".into()),
        "uninstall" => part.add(C::Mutation, "pip uninstall"),
        "" | "list" | "show" | "freeze" | "check" | "search" | "help" | "config" | "debug" | "inspect" | "index" => {
            part.add(C::ReadOnly, "")
        }
        v => part.add(C::Mutation, format!("pip {v}")),
    }
}

/// Options package managers take before their verb, with a value.
const VALUE_OPTIONS: &[&str] = &[
    "--prefix",
    "-C",
    "--cwd",
    "--dir",
    "--workspace",
    "-w",
    "--filter",
    "-F",
    "--registry",
    "--manifest-path",
    "-Z",
    "--config",
    "--cache",
    "--userconfig",
    "--globalconfig",
    "--color",
    "--loglevel",
    "--target-dir",
    "--index-url",
    "-i",
    "--python",
    "-p",
    "--directory",
    "--project",
];

/// The words that are neither options nor their values, nor `+toolchain`.
fn operands(args: &[Arg]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if VALUE_OPTIONS.contains(&t) {
            i += 2;
            continue;
        }
        if !t.starts_with('-') && !t.starts_with('+') {
            out.push(t);
        }
        i += 1;
    }
    out
}

/// The first operand: the verb.
fn verb(args: &[Arg]) -> &str {
    operands(args).first().copied().unwrap_or("")
}

fn second_verb(args: &[Arg]) -> &str {
    operands(args).get(1).copied().unwrap_or("")
}

pub fn classify(_an: &mut Analyzer, name: &str, args: &[Arg], part: &mut Part) {
    let v = verb(args);
    let read_only = |part: &mut Part| part.add(C::ReadOnly, "");
    match name {
        "npm" | "pnpm" | "yarn" | "bun" => match v {
            "" if name == "yarn" => install(part, "yarn installs dependencies".into()),
            "install" | "i" | "in" | "ins" | "inst" | "insta" | "instal" | "isnt" | "isnta" | "isntal" | "isntall"
            | "add" | "ci" | "clean-install" | "ic" | "install-clean" | "isntall-clean" | "it" | "cit"
            | "install-test" | "install-ci-test" | "update" | "up" | "upgrade" | "udpate" | "dlx" | "x" | "exec"
            | "link" | "ln" => install(part, format!("{name} {v}")),
            "global" if matches!(second_verb(args), "add" | "upgrade" | "install") => {
                install(part, format!("{name} global"))
            }
            "publish" | "unpublish" | "deprecate" | "dist-tag" | "owner" | "access" | "team" | "star" => {
                publish(part, format!("{name} {v}"))
            }
            "" | "ls" | "list" | "view" | "info" | "show" | "outdated" | "search" | "help" | "root" | "bin"
            | "prefix" | "explain" | "why" | "docs" | "repo" | "--version" | "-v" => read_only(part),
            "audit" if !args.iter().any(|a| a.text == "fix") => read_only(part),
            _ => part.add(C::Mutation, format!("{name} {v} runs project code or changes files")),
        },
        "npx" | "pnpx" | "bunx" | "uvx" => install(part, format!("{name} fetches and runs a package")),
        "pipx" if v == "run" => install(part, format!("{name} fetches and runs a package")),
        "pipx" => match v {
            "install" | "inject" | "upgrade" | "upgrade-all" | "reinstall" => install(part, format!("pipx {v}")),
            "list" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("pipx {v}")),
        },
        "pip" | "pip3" => pip(args, part),
        _ if name.starts_with("pip3.") => pip(args, part),
        "uv" => match v {
            "pip" => pip(&args[args.iter().position(|a| a.text == "pip").map_or(0, |p| p + 1)..], part),
            "add" | "sync" | "lock" | "run" => install(part, format!("uv {v}")),
            "tool" if matches!(second_verb(args), "install" | "run" | "upgrade") => install(part, "uv tool".into()),
            "publish" => publish(part, "uv publish".into()),
            "" | "tree" | "version" | "help" => read_only(part),
            _ => part.add(C::Mutation, format!("uv {v}")),
        },
        "poetry" | "pipenv" => match v {
            "add" | "install" | "update" | "sync" | "lock" => install(part, format!("{name} {v}")),
            "publish" => publish(part, format!("{name} publish")),
            "show" | "check" | "env" | "graph" | "--version" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("{name} {v}")),
        },
        "conda" | "mamba" | "micromamba" => match v {
            "install" | "create" | "update" | "upgrade" => install(part, format!("{name} {v}")),
            "list" | "info" | "search" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("{name} {v}")),
        },
        "cargo" => match v {
            "install" | "add" | "binstall" => install(part, format!("cargo {v}")),
            "publish" | "yank" | "owner" => publish(part, format!("cargo {v}")),
            "tree" | "metadata" | "search" | "--version" | "-V" | "version" | "help" | "locate-project" | "pkgid"
            | "verify-project" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("cargo {v} builds or runs project code")),
        },
        "go" => match v {
            "install" | "get" => install(part, format!("go {v}")),
            "version" | "env" | "list" | "doc" | "help" | "" => read_only(part),
            "mod" if matches!(second_verb(args), "graph" | "why" | "verify") => read_only(part),
            _ => part.add(C::Mutation, format!("go {v} builds or runs project code")),
        },
        "gem" => match v {
            "install" | "i" | "update" => install(part, format!("gem {v}")),
            "push" | "yank" | "owner" => publish(part, format!("gem {v}")),
            "list" | "search" | "info" | "query" | "specification" | "contents" | "env" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("gem {v}")),
        },
        "bundle" | "bundler" => match v {
            "install" | "add" | "update" | "" => install(part, format!("bundle {v}")),
            "list" | "show" | "info" | "outdated" | "check" => read_only(part),
            _ => part.add(C::Mutation, format!("bundle {v}")),
        },
        "apt" | "apt-get" | "aptitude" | "dnf" | "yum" | "zypper" | "brew" | "port" | "snap" | "flatpak" => match v {
            "install" | "reinstall" | "upgrade" | "dist-upgrade" | "full-upgrade" | "update" | "in" | "tap" => {
                install(part, format!("{name} {v}"))
            }
            "list" | "search" | "show" | "info" | "policy" | "depends" | "rdepends" | "provides" | "--version" | "" => {
                read_only(part)
            }
            _ => part.add(C::Mutation, format!("{name} {v} changes installed packages")),
        },
        "apk" => match v {
            "add" | "upgrade" | "update" | "fix" => install(part, format!("apk {v}")),
            "info" | "search" | "list" | "policy" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("apk {v}")),
        },
        "pacman" => {
            if args.iter().any(|a| {
                a.text.starts_with("-S") || a.text.starts_with("-U") || a.text == "--sync" || a.text == "--upgrade"
            }) {
                install(part, "pacman installs packages".into());
            } else if args.iter().any(|a| a.text.starts_with("-Q") || a.text == "--query") {
                read_only(part);
            } else {
                part.add(C::Mutation, "pacman changes installed packages");
            }
        }
        "dpkg" | "rpm" => {
            if args.iter().any(|a| matches!(a.text.as_str(), "-i" | "--install" | "-U" | "--upgrade" | "-ivh" | "-Uvh"))
            {
                install(part, format!("{name} installs a package"));
            } else if args
                .iter()
                .any(|a| matches!(a.text.as_str(), "-l" | "-L" | "-s" | "-S" | "-q" | "-qa" | "--list" | "--status"))
            {
                read_only(part);
            } else {
                part.add(C::Mutation, format!("{name} changes installed packages"));
            }
        }
        "nix-env" => {
            if args.iter().any(|a| a.text == "-i" || a.text == "--install" || a.text.starts_with("-iA")) {
                install(part, "nix-env -i".into());
            } else {
                part.add(C::Mutation, "nix-env");
            }
        }
        "composer" => match v {
            "require" | "install" | "update" | "create-project" => install(part, format!("composer {v}")),
            "show" | "info" | "outdated" | "search" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("composer {v}")),
        },
        "twine" | "flit" => match v {
            "upload" | "publish" => publish(part, format!("{name} {v}")),
            _ => part.add(C::Mutation, format!("{name} {v}")),
        },
        "deno" => match v {
            "install" | "add" | "cache" => install(part, format!("deno {v}")),
            "publish" => publish(part, "deno publish".into()),
            _ => part.add(C::Opaque, format!("deno {v} runs code we cannot see into")),
        },
        "mvn" | "gradle" => {
            if args.iter().any(|a| matches!(a.text.as_str(), "deploy" | "publish" | "release:perform")) {
                publish(part, format!("{name} publishes artifacts"));
            } else {
                part.add(C::Mutation, format!("{name} builds project code"));
            }
        }
        _ => part.add(C::Mutation, format!("{name}: not known to be read-only")),
    }
}
