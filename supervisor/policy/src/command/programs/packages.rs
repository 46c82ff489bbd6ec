//! Package managers: installs ask in chat, publishes are remote mutations, the rest runs
//! project code and is a mutation.

use super::super::Part;
use super::super::classify::{argv, operand_words, skip_options};
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
    "mvnw",
    "gradle",
    "gradlew",
    "apt-cache",
    "pdm",
    "hatch",
    "rye",
    "pixi",
    "maturin",
    "dotnet",
    "cpanm",
    "cpan",
    "luarocks",
    "opam",
    "cabal",
    "stack",
    "mix",
    "rebar3",
    "vcpkg",
    "conan",
    "pecl",
    "pear",
    "rustup",
    "dart",
    "flutter",
    "swift",
    "spack",
    "emerge",
    "xbps-install",
    "pkg",
    "pkgin",
    "pkg_add",
    "choco",
    "winget",
    "scoop",
    "volta",
    "fnm",
    "nvm",
    "nimble",
    "elm",
    "sdk",
    "bower",
    "lerna",
    "changeset",
    "vsce",
    "ovsx",
    "goreleaser",
    "semantic-release",
    "release-it",
    "nuget",
    "sbt",
    "anaconda",
];

/// Every manager this module knows, for the README's list.
pub fn covered() -> &'static [&'static str] {
    MANAGERS
}

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
        "config" if !matches!(second_verb(rest), "" | "list" | "get" | "debug") => {
            part.add(C::Mutation, "pip config changes pip's configuration")
        }
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
    let mut words = operand_words(args, VALUE_OPTIONS);
    words.retain(|w| !w.starts_with('+'));
    words
}

/// The first operand: the verb.
/// `-v`, `--version`, `-version` alone: a build tool saying which it is.
fn version_probe(args: &[Arg]) -> bool {
    matches!(args, [a] if matches!(a.text.as_str(), "-v" | "-V" | "--version" | "-version"))
}

fn verb(args: &[Arg]) -> &str {
    operands(args).first().copied().unwrap_or("")
}

fn second_verb(args: &[Arg]) -> &str {
    operands(args).get(1).copied().unwrap_or("")
}

/// `poetry run CMD`, `bundle exec CMD`: the command runs inside the project's
/// environment and is judged as itself, on top of what the manager does.
fn run_inside(an: &mut Analyzer, args: &[Arg], verb: &str, part: &mut Part) {
    let Some(at) = args.iter().position(|a| a.text == verb) else { return };
    let rest = &args[at + 1..];
    let command = match rest.iter().position(|a| a.is("--")) {
        Some(p) => &rest[p + 1..],
        None => skip_options(rest, "n", &["name", "prefix", "environment", "env", "with", "python", "group"]),
    };
    if !command.is_empty() {
        part.via.push("package manager run");
        argv(an, command, None, part);
    }
}

pub fn classify(an: &mut Analyzer, name: &str, args: &[Arg], part: &mut Part) {
    let v = verb(args);
    let read_only = |part: &mut Part| part.add(C::ReadOnly, "");
    if matches!(
        (name, v),
        ("poetry" | "pipenv" | "pdm" | "hatch" | "rye" | "pixi" | "uv" | "conda" | "mamba" | "micromamba", "run")
            | ("bundle" | "bundler" | "pnpm" | "npm" | "yarn", "exec")
            | ("dotnet", "tool")
    ) && !(name == "dotnet" && second_verb(args) != "run")
    {
        let verb = if name == "dotnet" { "run" } else { v };
        run_inside(an, args, verb, part);
    }
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
            // yarn 2+: `yarn npm publish`, `yarn npm tag add`.
            "npm" if name == "yarn" && matches!(second_verb(args), "publish" | "tag") => {
                publish(part, format!("yarn npm {}", second_verb(args)))
            }
            "npm" if name == "yarn" && matches!(second_verb(args), "info" | "whoami" | "audit") => read_only(part),
            "publish" | "unpublish" | "deprecate" | "dist-tag" | "owner" | "access" | "team" | "star" => {
                publish(part, format!("{name} {v}"))
            }
            "" | "ls" | "list" | "view" | "info" | "show" | "outdated" | "search" | "help" | "root" | "bin"
            | "prefix" | "explain" | "why" | "docs" | "repo" | "--version" | "-v" => read_only(part),
            "audit" if !args.iter().any(|a| a.text == "fix") => read_only(part),
            "pkg" if second_verb(args) == "get" => read_only(part),
            "config" | "c" if matches!(second_verb(args), "get" | "list" | "ls") => read_only(part),
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
            "env" if matches!(second_verb(args), "create" | "update") => install(part, format!("{name} env create")),
            "env" if matches!(second_verb(args), "list" | "export" | "") => read_only(part),
            "list" | "info" | "search" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("{name} {v}")),
        },
        "cargo" => match v {
            "install" if args.iter().any(|a| a.text == "--list") => read_only(part),
            "install" | "add" | "binstall" => install(part, format!("cargo {v}")),
            "publish" | "yank" | "owner" => publish(part, format!("cargo {v}")),
            "tree" | "metadata" | "search" | "--version" | "-V" | "version" | "help" | "locate-project" | "pkgid"
            | "verify-project" | "" => read_only(part),
            _ => part.add(C::Mutation, format!("cargo {v} builds or runs project code")),
        },
        "go" => match v {
            "install" | "get" => install(part, format!("go {v}")),
            "env" if args.iter().any(|a| a.text == "-w" || a.text == "-u") => {
                part.add(C::Mutation, "go env -w changes go's user configuration")
            }
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
        "apt-cache" => match v {
            "gencaches" => part.add(C::Mutation, "apt-cache gencaches writes apt's caches"),
            _ => read_only(part),
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
        // The wrapper scripts (`./mvnw`, `./gradlew`) run the build tool they name.
        "mvn" | "gradle" | "mvnw" | "gradlew" => {
            let publishes = |t: &str| {
                matches!(t, "deploy" | "publish" | "release:perform")
                    || t.starts_with("publish") && (t.ends_with("Repository") || t.ends_with("Publication"))
            };
            if args.iter().any(|a| publishes(&a.text)) {
                publish(part, format!("{name} publishes artifacts"));
            } else if version_probe(args) {
                read_only(part);
            } else {
                part.add(C::Mutation, format!("{name} builds project code"));
            }
        }
        _ => more(name, v, args, part),
    }
}

/// The managers of the other ecosystems agents work in, by verb.
fn more(name: &str, v: &str, args: &[Arg], part: &mut Part) {
    let second = second_verb(args);
    let read_only = |part: &mut Part| part.add(C::ReadOnly, "");
    let lists = |v: &str| {
        matches!(
            v,
            "" | "list"
                | "ls"
                | "show"
                | "info"
                | "search"
                | "outdated"
                | "tree"
                | "version"
                | "--version"
                | "-V"
                | "help"
                | "--help"
                | "query"
                | "which"
                | "current"
                | "env"
                | "doctor"
                | "config"
        )
    };
    match (name, v) {
        ("pdm" | "rye" | "pixi", "add" | "install" | "sync" | "update" | "lock" | "upgrade" | "global") => {
            install(part, format!("{name} {v}"))
        }
        ("pdm" | "rye" | "hatch" | "maturin", "publish" | "upload") => publish(part, format!("{name} {v}")),
        ("hatch", "env") if matches!(second, "create" | "") => install(part, "hatch env create".into()),
        ("maturin", "develop") => install(part, "maturin develop installs into the environment".into()),
        ("dotnet", "add") if second == "package" => install(part, "dotnet add package".into()),
        ("dotnet", "tool") if matches!(second, "install" | "update" | "restore") => {
            install(part, format!("dotnet tool {second}"))
        }
        ("dotnet", "tool") if second == "list" => read_only(part),
        ("dotnet", "nuget") if second == "push" => publish(part, "dotnet nuget push".into()),
        ("dotnet", "restore" | "workload") => install(part, format!("dotnet {v}")),
        ("dotnet", "--version" | "--info" | "--list-sdks" | "--list-runtimes" | "") => read_only(part),
        ("dotnet", "list") => read_only(part),
        ("nuget", "push") => publish(part, "nuget push".into()),
        ("cpanm", _) if args.iter().any(|a| a.text == "--info" || a.text == "--version") => read_only(part),
        ("cpanm" | "cpan", _) => install(part, format!("{name} installs Perl modules")),
        (
            "luarocks" | "opam" | "cabal" | "nimble" | "elm" | "pecl" | "pear" | "spack" | "vcpkg" | "conan" | "choco"
            | "winget" | "scoop" | "volta" | "fnm" | "nvm" | "sdk" | "bower" | "pkg" | "pkgin",
            "install" | "add" | "update" | "upgrade" | "i" | "get" | "fetch" | "pin" | "switch" | "restore",
        ) => install(part, format!("{name} {v}")),
        // Switches among versions already installed, in this shell.
        ("nvm" | "fnm" | "sdk", "use") => part.add(C::Mutation, format!("{name} use switches the active version")),
        ("volta" | "scoop", "use") => install(part, format!("{name} {v}")),
        ("luarocks" | "opam" | "cabal" | "nimble" | "pkg", "upload" | "publish") => {
            publish(part, format!("{name} {v}"))
        }
        ("stack", "install" | "build" | "setup" | "upgrade") => install(part, format!("stack {v}")),
        ("stack", "upload") | ("sbt", "publish" | "publishSigned" | "release") => publish(part, format!("{name} {v}")),
        ("mix", "deps.get" | "deps.update" | "archive.install" | "escript.install" | "local.hex" | "local.rebar") => {
            install(part, format!("mix {v}"))
        }
        ("mix", "hex.publish") => publish(part, "mix hex.publish".into()),
        ("rebar3", "get-deps" | "upgrade") => install(part, format!("rebar3 {v}")),
        ("rebar3", "hex") if second == "publish" => publish(part, "rebar3 hex publish".into()),
        ("rustup", "toolchain" | "component" | "target") if matches!(second, "install" | "add" | "update" | "link") => {
            install(part, format!("rustup {v} {second}"))
        }
        ("rustup", "install" | "update" | "default" | "self") => install(part, format!("rustup {v}")),
        ("rustup", "show" | "which" | "--version" | "") => read_only(part),
        ("rustup", _) if second == "list" => read_only(part),
        ("dart" | "flutter", "pub") if matches!(second, "get" | "add" | "upgrade" | "global" | "downgrade") => {
            install(part, format!("{name} pub {second}"))
        }
        ("dart" | "flutter", "pub") if matches!(second, "publish" | "lish") => {
            publish(part, format!("{name} pub publish"))
        }
        ("dart" | "flutter", "pub") if matches!(second, "deps" | "outdated") => read_only(part),
        ("swift", "package") if matches!(second, "resolve" | "update" | "add-dependency") => {
            install(part, format!("swift package {second}"))
        }
        ("swift", "package-registry") if second == "publish" => publish(part, "swift package-registry publish".into()),
        ("swift", "build" | "test" | "run" | "package") => {
            part.add(C::Mutation, format!("swift {v} builds project code"))
        }
        ("swift", "--version") => read_only(part),
        ("swift", _) => part.add(C::Opaque, "swift runs a program we cannot see into"),
        ("emerge" | "xbps-install" | "pkg_add", _) if !args.iter().any(|a| a.text == "--search" || a.text == "-s") => {
            install(part, format!("{name} installs packages"))
        }
        ("lerna" | "changeset" | "vsce" | "ovsx", "publish")
        | ("goreleaser", "release" | "")
        | ("semantic-release" | "release-it", _)
        | ("anaconda", "upload") => publish(part, format!("{name} {v}")),
        ("dotnet", _) => part.add(C::Mutation, format!("dotnet {v} builds or runs project code")),
        (_, v) if lists(v) => read_only(part),
        (_, v) => part.add(C::Mutation, format!("{name} {v} changes installed packages or project files")),
    }
}
