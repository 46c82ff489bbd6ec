//! Network clients, forges, clusters and containers.

use super::super::Part;
use super::super::classify::skip_options;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

/// The host of a URL or of `user@host:path`, lowercased; None when there is none.
pub fn host_of(target: &str) -> Option<String> {
    let rest = match target.split_once("://") {
        Some((_, r)) => r,
        None if target.contains('@') || target.contains(':') => target,
        None if target.contains('.') && !target.starts_with('.') && !target.starts_with('/') => target,
        None => return None,
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        rest.split(['/', ':', '?', '#']).next().unwrap_or("")
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn network(part: &mut Part, targets: &[&Arg]) {
    part.effects.insert(E::AccessNetwork);
    for t in targets {
        if let Some(h) = host_of(&t.text)
            && !part.scope.domains.contains(&h)
        {
            part.scope.domains.push(h);
        }
    }
}

const CURL_SHORT_WITH_VALUE: &str = "oeudHXAbcTFxKwmrEDzYyCtQPU";
const CURL_LONG_WITH_VALUE: &[&str] = &[
    "output",
    "data",
    "data-raw",
    "data-binary",
    "data-urlencode",
    "data-ascii",
    "json",
    "header",
    "request",
    "user",
    "user-agent",
    "referer",
    "cookie",
    "cookie-jar",
    "upload-file",
    "form",
    "form-string",
    "proxy",
    "config",
    "write-out",
    "max-time",
    "range",
    "cert",
    "key",
    "cacert",
    "capath",
    "dump-header",
    "time-cond",
    "speed-limit",
    "speed-time",
    "retry",
    "retry-delay",
    "retry-max-time",
    "connect-timeout",
    "resolve",
    "connect-to",
    "url",
    "unix-socket",
    "abstract-unix-socket",
    "interface",
    "limit-rate",
    "continue-at",
    "quote",
    "output-dir",
    "proxy-user",
    "oauth2-bearer",
    "aws-sigv4",
    "variable",
    "expand-url",
    "trace",
    "trace-ascii",
    "stderr",
    "local-port",
    "max-filesize",
    "ftp-port",
    "mail-from",
    "mail-rcpt",
    "netrc-file",
    "preproxy",
    "request-target",
];

pub fn curl(args: &[Arg], part: &mut Part) {
    let mut urls = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        let value = || args.get(i + 1).map(|v| v.text.as_str()).unwrap_or("");
        let (flag, attached): (&str, Option<&str>) = if let Some(long) = t.strip_prefix("--") {
            match long.split_once('=') {
                Some((f, v)) => (f, Some(v)),
                None => (long, None),
            }
        } else if let Some(short) = t.strip_prefix('-').and_then(|s| s.get(..1)) {
            let attached = t.get(2..).filter(|v| !v.is_empty() && CURL_SHORT_WITH_VALUE.contains(short));
            (short, attached)
        } else {
            urls.push(a);
            i += 1;
            continue;
        };
        let takes = CURL_LONG_WITH_VALUE.contains(&flag) || (flag.len() == 1 && CURL_SHORT_WITH_VALUE.contains(flag));
        let v = attached.unwrap_or_else(|| if takes { value() } else { "" });
        match flag {
            "o" | "output" if v != "-" && v != "/dev/null" => {
                part.add(C::Mutation, format!("curl writes {v}"));
                part.effects.insert(E::WriteFile);
                part.scope.paths.push(v.to_owned());
            }
            "O" | "remote-name" | "remote-name-all" | "J" | "remote-header-name" | "c" | "cookie-jar" | "D"
            | "dump-header" | "output-dir" | "create-dirs" => {
                part.add(C::Mutation, "curl writes files");
                part.effects.insert(E::WriteFile);
            }
            "d" | "data" | "data-raw" | "data-binary" | "data-urlencode" | "data-ascii" | "json" | "F" | "form"
            | "form-string" | "T" | "upload-file" => part.add(C::RemoteMutation, "curl sends data"),
            "X" | "request" if !v.eq_ignore_ascii_case("GET") && !v.eq_ignore_ascii_case("HEAD") => {
                part.add(C::RemoteMutation, format!("curl -X {v}"))
            }
            "K" | "config" => part.add(C::Opaque, "curl reads its options from a file"),
            "url" => {}
            "unix-socket" | "abstract-unix-socket" => part.add(C::Mutation, "curl talks to a local socket"),
            _ => {}
        }
        if flag == "url" && !v.is_empty() {
            part.scope.domains.extend(host_of(v));
        }
        i += if takes && attached.is_none() { 2 } else { 1 };
    }
    part.add(C::ReadOnly, "");
    network(part, &urls);
}

pub fn wget(args: &[Arg], part: &mut Part) {
    let to_stdout =
        args.windows(2).any(|w| (w[0].text == "-O" || w[0].text == "--output-document") && w[1].text == "-")
            || args.iter().any(|a| {
                a.text == "-O-"
                    || a.text == "--output-document=-"
                    || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.ends_with("O-"))
            });
    if args
        .iter()
        .any(|a| a.text.starts_with("--post-") || a.text.starts_with("--method") || a.text.starts_with("--body-"))
    {
        part.add(C::RemoteMutation, "wget sends data");
    }
    if to_stdout {
        part.add(C::ReadOnly, "");
    } else {
        part.add(C::Mutation, "wget writes the files it downloads");
        part.effects.insert(E::WriteFile);
    }
    let urls: Vec<&Arg> =
        skip_options(args, "OoaePiUtTwQ", &[]).iter().chain(args.iter().filter(|a| a.text.contains("://"))).collect();
    network(part, &urls);
}

pub fn httpie(args: &[Arg], part: &mut Part) {
    let positional: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
    let method = positional.first().map(|a| a.text.as_str()).filter(|m| m.chars().all(|c| c.is_ascii_uppercase()));
    let data =
        positional.iter().skip(1).any(|a| a.text.contains('=') || a.text.contains(":=") || a.text.starts_with('@'));
    match method {
        Some("GET" | "HEAD" | "OPTIONS") | None if !data => part.add(C::ReadOnly, ""),
        _ => part.add(C::RemoteMutation, "sends data"),
    }
    if args.iter().any(|a| a.text == "-d" || a.text == "--download" || a.text == "-o" || a.text.starts_with("--output"))
    {
        part.add(C::Mutation, "writes the download");
    }
    network(part, &positional);
}

/// ping, dig and the like: they only ask, but they ask the network.
pub fn lookup(args: &[Arg], part: &mut Part) {
    let targets: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-') && !a.text.starts_with('@')).collect();
    part.add(C::ReadOnly, "");
    network(part, &targets);
}

pub fn client(name: &str, args: &[Arg], part: &mut Part) {
    let targets: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
    part.add(C::Mutation, format!("{name} opens connections that can send anything"));
    network(part, &targets);
}

pub fn remote_copy(name: &str, args: &[Arg], part: &mut Part) {
    let operands: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
    let remote: Vec<&Arg> =
        operands.iter().copied().filter(|a| name == "ssh" || name == "sftp" || a.text.contains(':')).collect();
    if name == "rsync" && remote.is_empty() {
        part.add(C::Mutation, "rsync copies files");
        part.effects.insert(E::WriteFile);
        return;
    }
    match name {
        "ssh" => part.add(C::RemoteMutation, "ssh runs commands on another host"),
        _ if remote.iter().any(|r| operands.last().is_some_and(|l| std::ptr::eq(*l, *r))) || name == "sftp" => {
            part.add(C::RemoteMutation, format!("{name} writes to another host"))
        }
        _ => {
            part.add(C::Mutation, format!("{name} copies files here"));
            part.effects.insert(E::WriteFile);
        }
    }
    network(part, &remote);
}

/// mosh, autossh, ssh-copy-id: a shell or a key on another host.
pub fn remote_shell(name: &str, args: &[Arg], part: &mut Part) {
    let targets: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).take(1).collect();
    part.add(C::RemoteMutation, format!("{name} changes another host"));
    network(part, &targets);
}

/// gsutil, s3cmd, rclone, mc: copies to a remote store change it; listing reads.
pub fn object_store(name: &str, args: &[Arg], part: &mut Part) {
    let words: Vec<&Arg> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
    let verb = words.first().map(|a| a.text.as_str()).unwrap_or("");
    let remote = |a: &Arg| a.text.contains("://") || (name == "rclone" || name == "mc") && a.text.contains(':');
    part.effects.insert(E::AccessNetwork);
    match verb {
        "" | "ls" | "lsd" | "lsl" | "lsf" | "du" | "cat" | "stat" | "size" | "info" | "version" | "help" | "tree"
        | "listremotes" | "check" | "md5sum" | "sha1sum" | "hashsum" | "find" | "diff" => part.add(C::ReadOnly, ""),
        "cp" | "copy" | "mv" | "move" | "sync" | "rsync" | "put" | "copyto" | "moveto"
            if !words.last().is_some_and(|d| remote(d)) =>
        {
            part.add(C::Mutation, format!("{name} {verb} writes local files"));
            part.effects.insert(E::WriteFile);
        }
        "config" => part.add(C::Mutation, format!("{name} config changes its configuration")),
        v => part.add(C::RemoteMutation, format!("{name} {v} changes a remote store")),
    }
}

pub fn gh(args: &[Arg], part: &mut Part) {
    let words: Vec<&str> = args.iter().filter(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).collect();
    let (group, verb) = (words.first().copied().unwrap_or(""), words.get(1).copied().unwrap_or(""));
    match (group, verb) {
        ("pr", "create" | "new") => {
            part.add(C::RemoteMutation, "gh pr create opens a pull request");
            part.effects.insert(E::OpenPullRequest);
        }
        (
            "pr",
            "merge" | "review" | "comment" | "close" | "reopen" | "edit" | "ready" | "lock" | "unlock"
            | "update-branch",
        ) => {
            part.add(C::RemoteMutation, format!("gh pr {verb}"));
            part.effects.insert(E::PublishReviewOrMerge);
        }
        ("pr", "list" | "view" | "diff" | "status" | "checks" | "") => part.add(C::ReadOnly, ""),
        ("pr", "checkout") => part.add(C::Mutation, "gh pr checkout changes the work tree"),
        (
            "issue",
            "create" | "new" | "edit" | "comment" | "close" | "reopen" | "delete" | "transfer" | "pin" | "unpin"
            | "lock" | "unlock" | "develop",
        ) => {
            part.add(C::RemoteMutation, format!("gh issue {verb}"));
            part.effects.insert(E::WriteExternalTracker);
        }
        ("issue", "list" | "view" | "status" | "") => part.add(C::ReadOnly, ""),
        ("release", "create" | "upload" | "edit" | "delete" | "delete-asset") => {
            part.add(C::RemoteMutation, format!("gh release {verb}"));
            part.effects.insert(E::PublishPackage);
        }
        ("api", _) => {
            let method = args
                .windows(2)
                .find(|w| w[0].text == "-X" || w[0].text == "--method")
                .map(|w| w[1].text.to_ascii_uppercase());
            let method = method.or_else(|| {
                args.iter().find_map(|a| {
                    a.text
                        .strip_prefix("--method=")
                        .or_else(|| a.text.strip_prefix("-X").filter(|m| !m.is_empty()))
                        .map(str::to_ascii_uppercase)
                })
            });
            // gh switches to POST when given fields, attached (`-ftitle=x`) or not.
            let fields = args.iter().any(|a| {
                a.text.starts_with("-f")
                    || a.text.starts_with("-F")
                    || a.text.starts_with("--field")
                    || a.text.starts_with("--raw-field")
                    || a.text.starts_with("--input")
                    || a.text.starts_with("--field=")
                    || a.text.starts_with("--raw-field=")
            });
            match method.as_deref() {
                Some("GET" | "HEAD") => part.add(C::ReadOnly, ""),
                None if !fields => part.add(C::ReadOnly, ""),
                _ => part.add(C::RemoteMutation, "gh api changes remote state"),
            }
        }
        (
            "repo" | "release" | "run" | "workflow" | "gist" | "search" | "status" | "browse" | "label" | "cache"
            | "ruleset" | "project" | "codespace" | "secret" | "variable" | "org" | "extension",
            "list" | "view" | "status" | "diff" | "download" | "watch" | "",
        ) if group != "extension" || verb == "list" => {
            if verb == "download" {
                part.add(C::Mutation, "downloads files")
            } else {
                part.add(C::ReadOnly, "")
            }
        }
        ("search" | "status" | "browse" | "version" | "help" | "--version" | "", _) | ("auth", "status" | "token") => {
            part.add(C::ReadOnly, "")
        }
        ("repo", "clone") => part.add(C::Mutation, "gh repo clone writes files"),
        ("extension" | "ext", "install" | "upgrade") => {
            part.add(C::Mutation, format!("gh extension {verb} installs a program"));
            part.effects.insert(E::InstallPackage);
        }
        _ => part.add(C::RemoteMutation, format!("gh {group} {verb}: changes remote state")),
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts_are_read_off_urls_and_remote_paths() {
        assert_eq!(host_of("https://Example.com/x?y").as_deref(), Some("example.com"));
        assert_eq!(host_of("http://user:pw@a.b:8080/").as_deref(), Some("a.b"));
        assert_eq!(host_of("git@github.com:o/r.git").as_deref(), Some("github.com"));
        assert_eq!(host_of("[::1]:80").as_deref(), Some("::1"));
        assert_eq!(host_of("http://[::1]:80/").as_deref(), Some("::1"));
        assert_eq!(host_of("example.org/path").as_deref(), Some("example.org"));
        assert_eq!(host_of("/local/file"), None);
        assert_eq!(host_of("file"), None);
    }
}
