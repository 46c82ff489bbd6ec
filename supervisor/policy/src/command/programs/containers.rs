//! docker, podman and nerdctl: the verb decides (`image push` publishes, `image ls`
//! reads, `image rm` changes local state), and flags that hand a container the host
//! are an escape.

use super::super::Part;
use super::super::classify::{normalize, skip_options};
use super::super::words::Arg;
use super::is_system_dir;
use crate::effect::{CommandClass as C, Effect as E};

/// Global options that take a value, before the verb (`--context default run`).
const GLOBAL_WITH_VALUE: &[&str] = &[
    "context",
    "host",
    "config",
    "log-level",
    "tlscacert",
    "tlscert",
    "tlskey",
    "url",
    "connection",
    "root",
    "runroot",
    "storage-driver",
    "cgroup-manager",
];

/// Verbs that only read, at the top level or under an object (`image ls`).
const READS: &[&str] = &[
    "ps",
    "images",
    "inspect",
    "logs",
    "version",
    "info",
    "top",
    "stats",
    "search",
    "history",
    "port",
    "diff",
    "events",
    "ls",
    "list",
    "df",
    "wait",
    "config",
    "du",
    "help",
    "--version",
    "--help",
    "",
];

/// Verbs that start a container: the escape flags matter.
const STARTS: &[&str] = &["run", "create", "exec", "start", "up", "debug"];

pub fn container(name: &str, args: &[Arg], part: &mut Part) {
    let words = skip_options(args, "Hcl", GLOBAL_WITH_VALUE);
    let verb = words.first().map(|a| a.text.as_str()).unwrap_or("");
    let rest = words.get(1..).unwrap_or(&[]);
    // `docker image push`, `docker container run`, `docker buildx build`, `docker compose up`.
    let (object, verb, rest) = match verb {
        "image" | "container" | "volume" | "network" | "system" | "builder" | "buildx" | "compose" | "manifest"
        | "context" | "plugin" | "trust" | "secret" | "config" | "node" | "service" | "stack" | "swarm" | "machine"
        | "pod" => {
            let inner = skip_options(rest, "fp", &["file", "project-name", "profile", "env-file", "builder"]);
            (verb, inner.first().map(|a| a.text.as_str()).unwrap_or(""), inner.get(1..).unwrap_or(&[]))
        }
        _ => ("", verb, rest),
    };
    let label = if object.is_empty() { format!("{name} {verb}") } else { format!("{name} {object} {verb}") };
    let pushes = rest.iter().any(|a| a.text == "--push" || a.text.starts_with("--output=type=registry"))
        || rest.windows(2).any(|w| w[0].text == "--output" && w[1].text.contains("type=registry"));
    match (object, verb) {
        (_, "push") | ("manifest", "create" | "annotate") | ("trust", "sign") => {
            part.add(C::RemoteMutation, format!("{label} publishes an image"));
            part.effects.insert(E::PublishPackage);
        }
        ("buildx" | "builder", "build" | "bake") | ("", "build") if pushes => {
            part.add(C::RemoteMutation, format!("{label} --push publishes an image"));
            part.effects.insert(E::PublishPackage);
        }
        ("buildx", "imagetools") if rest.first().is_some_and(|a| a.text == "create") => {
            part.add(C::RemoteMutation, format!("{label} create publishes an image"));
            part.effects.insert(E::PublishPackage);
        }
        ("" | "container" | "compose", v) if STARTS.contains(&v) => {
            escapes(name, args, part);
            part.add(C::Mutation, label);
        }
        ("context", "show") | ("buildx", "imagetools" | "version") => part.add(C::ReadOnly, ""),
        (_, v) if READS.contains(&v) => part.add(C::ReadOnly, ""),
        _ => part.add(C::Mutation, label),
    }
}

/// Flags and mounts that give the container the host.
fn escapes(name: &str, args: &[Arg], part: &mut Part) {
    let host_flags = [
        "--privileged",
        "--pid=host",
        "--net=host",
        "--network=host",
        "--ipc=host",
        "--uts=host",
        "--userns=host",
        "--cgroupns=host",
    ];
    for (i, a) in args.iter().enumerate() {
        let t = a.text.as_str();
        let next = args.get(i + 1).map(|v| v.text.as_str()).unwrap_or("");
        let mount = match t {
            "-v" | "--volume" | "--mount" => Some(next),
            _ => t.strip_prefix("--volume=").or_else(|| t.strip_prefix("--mount=")).or_else(|| t.strip_prefix("-v")),
        };
        // `-v SRC:DST` or `--mount k=v,…` with source= anywhere among the keys.
        let host_path = mount.map(|m| {
            let keyed = m.split(',').find_map(|kv| kv.strip_prefix("source=").or_else(|| kv.strip_prefix("src=")));
            match keyed {
                Some(src) => src.to_owned(),
                None if m.contains('=') => String::new(),
                None => m.split(':').next().unwrap_or("").to_owned(),
            }
        });
        let host_dir = |p: &str| {
            let p = normalize(p);
            is_system_dir(&p)
                || p.ends_with(".sock")
                || ["/var/run", "/run", "/var/lib/docker", "/proc", "/sys", "/dev", "/etc", "/root", "/home", "/boot"]
                    .iter()
                    .any(|d| p == *d || p.starts_with(&format!("{d}/")))
        };
        let escapes = host_flags.contains(&t)
            || t.starts_with("--privileged")
            || t.starts_with("--cap-add")
            || t.starts_with("--security-opt")
            || t.starts_with("--device")
            || matches!((t, next), ("--pid" | "--net" | "--network" | "--ipc" | "--uts" | "--userns", "host"))
            || host_path.as_deref().is_some_and(host_dir);
        if escapes {
            part.add(C::NamespaceEscape, format!("{name} {t} gives the container the host"));
        }
    }
}
