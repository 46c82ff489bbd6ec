//! git: its global options first (some of them choose what program runs), then the
//! subcommand.

use super::super::Part;
use super::super::walk::Analyzer;
use super::super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

/// Config keys whose value git runs as a shell command: one list with the hand-back's.
const EXEC_KEYS: &[&str] = cc_vectors::GIT_PROGRAM_KEYS;

const READ_ONLY: &[&str] = &[
    "status",
    "log",
    "show",
    "diff",
    "blame",
    "annotate",
    "shortlog",
    "describe",
    "rev-parse",
    "rev-list",
    "ls-files",
    "ls-tree",
    "ls-remote",
    "cat-file",
    "grep",
    "show-ref",
    "show-branch",
    "for-each-ref",
    "name-rev",
    "merge-base",
    "cherry",
    "whatchanged",
    "count-objects",
    "fsck",
    "verify-commit",
    "verify-tag",
    "check-ignore",
    "check-attr",
    "check-ref-format",
    "var",
    "help",
    "version",
    "diff-tree",
    "diff-files",
    "diff-index",
    "range-diff",
    "get-tar-commit-id",
    "check-mailmap",
    "column",
    "fetch-pack",
    "show-index",
    "verify-pack",
    "ls",
    "st",
];

const CREATES_COMMITS: &[&str] = &["commit", "merge", "rebase", "cherry-pick", "revert", "am", "pull"];

pub fn git(an: &mut Analyzer, args: &[Arg], part: &mut Part) {
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut alias_of = |v: Option<&Arg>| {
        if let Some((key, value)) = v.and_then(|v| v.text.split_once('='))
            && let Some(name) = key.to_ascii_lowercase().strip_prefix("alias.")
        {
            aliases.push((name.to_owned(), value.to_owned()));
        }
    };
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        match t {
            "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" | "--attr-source" => i += 2,
            "-c" => {
                alias_of(args.get(i + 1));
                config_override(an, args.get(i + 1), part);
                i += 2;
            }
            "--config-env" => {
                part.add(C::Opaque, "git --config-env takes configuration from the environment");
                i += 2;
            }
            "--exec-path" => {
                part.add(C::ReadOnly, "");
                i += 1;
            }
            "--version" | "--help" | "--html-path" | "--man-path" | "--info-path" => {
                part.add(C::ReadOnly, "");
                return;
            }
            _ if t.starts_with("--exec-path=") => {
                part.add(C::Opaque, format!("git {t} runs subcommands from another directory"));
                i += 1;
            }
            _ if t.starts_with("--config-env=") => {
                part.add(C::Opaque, "git --config-env takes configuration from the environment");
                i += 1;
            }
            _ if t.starts_with("-c") && t.len() > 2 => {
                let value = Arg { text: t[2..].to_owned(), ..a.clone() };
                alias_of(Some(&value));
                config_override(an, Some(&value), part);
                i += 1;
            }
            _ if t.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let Some(sub) = args.get(i) else {
        part.add(C::ReadOnly, "");
        return;
    };
    if !sub.literal {
        part.add(C::Opaque, format!("git subcommand computed at run time ({})", sub.text));
        return;
    }
    let rest = &args[i + 1..];
    // `git -c alias.p=push p`: the alias's words stand for the subcommand (a `!`
    // alias is a shell command, analysed with the other overrides).
    let lower = sub.text.to_ascii_lowercase();
    let alias = aliases
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|(_, v)| v.clone())
        .or_else(|| an.git_aliases.get(&lower).cloned());
    if let Some(value) = alias {
        if let Some(script) = value.strip_prefix('!') {
            an.script(script, Some("git alias"));
        }
        if !value.starts_with('!') {
            let mut expanded: Vec<Arg> = value.split_whitespace().map(Arg::word).collect();
            if let Some(first) = expanded.first().cloned() {
                expanded.extend(rest.iter().cloned());
                subcommand(an, &first.text, &expanded[1..], part);
            }
        }
        return;
    }
    subcommand(an, &sub.text, rest, part);
}

/// `git -c KEY=VALUE` with a key that only changes what git prints (its colours,
/// quoting, prefixes, dates, the pager `cat`): no program, hook or remote is named by
/// it. Anything else, a key we do not list included, may make git run something.
fn only_changes_output(setting: &str) -> bool {
    const KEYS: &[&str] = &[
        "core.quotepath",
        "core.abbrev",
        "column.ui",
        "diff.noprefix",
        "diff.mnemonicprefix",
        "diff.renames",
        "diff.algorithm",
        "diff.context",
        "diff.interhunkcontext",
        "diff.indentheuristic",
        "diff.relative",
        "diff.statgraphwidth",
        "diff.colormoved",
        "log.decorate",
        "log.date",
        "log.abbrevcommit",
        "log.follow",
        "log.showroot",
        "log.mailmap",
        "format.pretty",
        "status.short",
        "status.branch",
        "status.relativepaths",
        "status.showuntrackedfiles",
        "status.showstash",
        "status.aheadbehind",
        "grep.linenumber",
        "grep.patterntype",
        "grep.extendedregexp",
        "grep.fullname",
        "grep.column",
        "blame.date",
        "blame.coloring",
        "blame.showemail",
        "blame.blankboundary",
        "init.defaultbranch",
        "user.name",
        "user.email",
    ];
    let Some((key, value)) = setting.split_once('=') else { return false };
    let key = key.to_ascii_lowercase();
    let off = matches!(value.to_ascii_lowercase().as_str(), "false" | "no" | "off" | "0");
    match key.as_str() {
        // A pager that only copies; `pager.log=false` turns paging off.
        "core.pager" => matches!(value, "cat" | ""),
        _ if key.starts_with("pager.") => off || matches!(value, "cat" | "" | "true"),
        // Showing signatures runs the signing program.
        "log.showsignature" => off,
        _ => {
            KEYS.contains(&key.as_str())
                || key.starts_with("color.")
                || key.starts_with("advice.")
                || key.starts_with("i18n.")
        }
    }
}

/// `git -c key=value`: a key git runs as a command is analysed as a script; any
/// override may change what git does, so the part is never read-only.
fn config_override(an: &mut Analyzer, value: Option<&Arg>, part: &mut Part) {
    let Some(v) = value else { return };
    if v.literal && only_changes_output(&v.text) {
        return;
    }
    part.add(C::Opaque, "git -c can make git run another program");
    let Some((key, val)) = v.text.split_once('=') else { return };
    let key = key.to_ascii_lowercase();
    let runs = EXEC_KEYS.contains(&key.as_str())
        || (key.starts_with("alias.") && val.starts_with('!'))
        || (key.starts_with("pager.")
            || key.starts_with("filter.")
            || key.ends_with(".textconv")
            || key.ends_with(".command"))
        || key.starts_with("remote.") && (key.ends_with(".uploadpack") || key.ends_with(".receivepack"));
    if runs && v.literal {
        an.script(val.trim_start_matches('!'), Some("git -c"));
    }
}

fn subcommand(an: &mut Analyzer, sub: &str, rest: &[Arg], part: &mut Part) {
    let positional: Vec<&str> = rest.iter().filter(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).collect();
    let has = |flag: &str| rest.iter().any(|a| a.text == flag);
    // Any subcommand: options that name a program for git to run, local or remote.
    if rest.iter().any(|a| {
        a.text.starts_with("--upload-pack")
            || a.text.starts_with("--receive-pack")
            || a.text.starts_with("--exec")
            || (a.text == "-u" && sub == "ls-remote")
    }) {
        part.add(C::Opaque, format!("git {sub} runs the program it is given"));
    }
    match sub {
        "push" | "send-pack" => push(rest, part),
        "subtree" | "lfs" if positional.first() == Some(&"push") => {
            let after = rest.iter().position(|a| a.text == "push").map_or(rest.len(), |p| p + 1);
            push(&rest[after..], part)
        }
        _ if CREATES_COMMITS.contains(&sub) => {
            part.add(C::Mutation, format!("git {sub}"));
            part.effects.insert(E::CreateCommit);
        }
        _ if READ_ONLY.contains(&sub) => {
            // Long options by any unambiguous prefix (`--open-files` is `--open-files-in-pager`).
            let long = |a: &Arg, full: &str, min: usize| {
                let l = a.text.split('=').next().unwrap_or("");
                l.len() >= min && full.starts_with(l)
            };
            if rest.iter().any(|a| long(a, "--output", 5)) {
                part.add(C::Mutation, format!("git {sub} --output writes a file"));
            } else if rest.iter().any(|a| a.text.starts_with("-O") || long(a, "--open-files-in-pager", 4)) {
                part.add(C::Opaque, format!("git {sub} -O runs the program it is given"));
            } else if rest.iter().any(|a| long(a, "--ext-diff", 5) || a.text.starts_with("--textconv")) {
                part.add(C::Opaque, format!("git {sub} runs the configured diff program"));
            } else {
                part.add(C::ReadOnly, "");
            }
        }
        "branch" => {
            let changes = rest.iter().any(|a| {
                matches!(
                    a.text.as_str(),
                    "-d" | "-D"
                        | "-m"
                        | "-M"
                        | "-c"
                        | "-C"
                        | "-f"
                        | "--delete"
                        | "--move"
                        | "--copy"
                        | "--force"
                        | "-u"
                        | "--set-upstream-to"
                        | "--unset-upstream"
                        | "--edit-description"
                        | "--track"
                ) || a.text.starts_with("--set-upstream-to=")
                    || (a.text.starts_with("-u") && a.text.len() > 2)
            });
            let lists = rest.iter().any(|a| {
                matches!(
                    a.text.as_str(),
                    "-l" | "--list"
                        | "-a"
                        | "-r"
                        | "--all"
                        | "--remotes"
                        | "--contains"
                        | "--merged"
                        | "--no-merged"
                        | "--points-at"
                )
            });
            // Names xargs or `find -exec … +` add at run time are operands too.
            let operands = !positional.is_empty() || an.args_appended;
            if changes || (operands && !lists) {
                part.add(C::Mutation, "git branch changes branches");
            } else {
                part.add(C::ReadOnly, "");
            }
        }
        "tag" => {
            let lists = rest.iter().any(|a| {
                matches!(a.text.as_str(), "-l" | "--list" | "-v" | "--verify" | "--contains" | "--points-at" | "-n")
            });
            let deletes = rest.iter().any(|a| a.text == "-d" || a.text == "--delete");
            if !deletes && (lists || (positional.is_empty() && !an.args_appended)) {
                part.add(C::ReadOnly, "")
            } else {
                part.add(C::Mutation, "git tag creates or deletes a tag")
            }
        }
        "remote" => match positional.first() {
            None if an.args_appended => part.add(C::Mutation, "git remote is given its verb at run time"),
            None | Some(&"show") | Some(&"get-url") => part.add(C::ReadOnly, ""),
            Some(verb) => part.add(C::Mutation, format!("git remote {verb}")),
        },
        "config" => {
            // `git config [--global] alias.p push`: later in the line, `git p` is a push.
            let words: Vec<&Arg> = rest.iter().filter(|a| !a.text.starts_with('-')).collect();
            let words: Vec<&Arg> =
                if words.first().is_some_and(|w| w.text == "set") { words[1..].to_vec() } else { words };
            if let [key, value, ..] = words.as_slice()
                && let Some(name) = key.text.to_ascii_lowercase().strip_prefix("alias.")
            {
                an.git_aliases.insert(name.to_owned(), value.text.clone());
            }
            let reads = rest.iter().any(|a| a.text.starts_with("--get") || matches!(a.text.as_str(), "-l" | "--list"))
                || matches!(positional.first(), Some(&"get") | Some(&"list"))
                || (positional.len() == 1
                    && !matches!(positional[0], "edit" | "set" | "unset" | "rename-section" | "remove-section")
                    && !rest.iter().any(|a| {
                        matches!(
                            a.text.as_str(),
                            "--unset"
                                | "--unset-all"
                                | "--add"
                                | "--replace-all"
                                | "--edit"
                                | "-e"
                                | "--rename-section"
                                | "--remove-section"
                        )
                    }));
            if reads { part.add(C::ReadOnly, "") } else { part.add(C::Mutation, "git config changes configuration") }
        }
        "stash" => match positional.first() {
            Some(&"list") | Some(&"show") => part.add(C::ReadOnly, ""),
            _ => part.add(C::Mutation, "git stash changes the work tree"),
        },
        "reflog" => match positional.first() {
            Some(&"expire") | Some(&"delete") => part.add(C::Mutation, "git reflog changes the reflog"),
            _ => part.add(C::ReadOnly, ""),
        },
        "svn" => match positional.first() {
            Some(&"dcommit") | Some(&"set-tree") | Some(&"branch") | Some(&"tag") | Some(&"commit-diff") => {
                part.add(C::RemoteMutation, "git svn commits to the Subversion server");
                part.effects.insert(E::PushRemote);
            }
            Some(&"log")
            | Some(&"info")
            | Some(&"find-rev")
            | Some(&"show-ignore")
            | Some(&"blame")
            | Some(&"propget")
            | Some(&"proplist")
            | Some(&"show-externals") => part.add(C::ReadOnly, ""),
            _ => part.add(C::Mutation, "git svn changes the repository"),
        },
        "worktree" | "notes" | "sparse-checkout" | "bisect" => match positional.first() {
            Some(&"list") | Some(&"show") | None if sub != "bisect" => part.add(C::ReadOnly, ""),
            _ => part.add(C::Mutation, format!("git {sub} changes the repository")),
        },
        "submodule" => match positional.first() {
            None | Some(&"status") | Some(&"summary") => part.add(C::ReadOnly, ""),
            Some(&"foreach") => {
                let body_at = rest.iter().position(|a| a.text == "foreach").map(|p| p + 1);
                let words: Vec<Arg> = body_at
                    .map(|p| rest[p..].iter().filter(|a| !a.text.starts_with("--")).cloned().collect())
                    .unwrap_or_default();
                super::join_as_script(an, &words, "git submodule foreach", part);
                part.add(C::Mutation, "git submodule foreach");
            }
            Some(verb) => part.add(C::Mutation, format!("git submodule {verb}")),
        },
        "archive" | "format-patch" | "bundle" => {
            if has("--stdout")
                || (sub == "archive"
                    && !rest.iter().any(|a| {
                        a.text.starts_with("--output") || a.text.starts_with("-o") || a.text.starts_with("--remote")
                    }))
            {
                part.add(C::ReadOnly, "");
            } else {
                part.add(C::Mutation, format!("git {sub} writes files"));
            }
        }
        "clean" => {
            part.add(C::Mutation, "git clean deletes untracked files");
            part.effects.insert(E::DeleteFile);
        }
        "rm" => {
            part.add(C::Mutation, "git rm deletes files");
            part.effects.insert(E::DeleteFile);
        }
        "fetch" | "clone" | "init" | "add" | "mv" | "restore" | "reset" | "checkout" | "switch" | "gc" | "prune"
        | "repack" | "update-ref" | "update-index" | "apply" | "filter-branch" | "replace" | "symbolic-ref"
        | "read-tree" | "write-tree" | "commit-tree" | "hash-object" | "mktag" | "mktree" | "pack-refs"
        | "maintenance" | "lfs" | "send-email" | "request-pull" | "difftool" | "mergetool" | "instaweb" | "daemon"
        | "credential" => part.add(C::Mutation, format!("git {sub}")),
        _ => part.add(C::Mutation, format!("git {sub}: an unknown subcommand (an alias or a git-{sub} program)")),
    }
}

/// `git push [options] [remote [refspec…]]`: the refs it names, for rules on branches.
fn push(rest: &[Arg], part: &mut Part) {
    let mut positional = Vec::new();
    let mut i = 0;
    let mut dry_run = false;
    while let Some(a) = rest.get(i) {
        let t = a.text.as_str();
        match t {
            "-o" | "--push-option" | "--repo" | "--receive-pack" | "--exec" => i += 2,
            "-n" | "--dry-run" => {
                dry_run = true;
                i += 1;
            }
            "--no-dry-run" => {
                dry_run = false;
                i += 1;
            }
            "--all" | "--mirror" | "--branches" => {
                part.scope.refs_unknown = true;
                i += 1;
            }
            "--tags" => {
                part.scope.refs.push("refs/tags/*".into());
                i += 1;
            }
            _ if t.starts_with('-') => i += 1,
            _ => {
                positional.push(a);
                i += 1;
            }
        }
    }
    if rest.iter().any(|a| a.text.starts_with("--receive-pack") || a.text.starts_with("--exec")) {
        part.add(C::Opaque, "git push --receive-pack runs another program on the remote");
    }
    let refspecs = positional.get(1..).unwrap_or(&[]);
    if refspecs.is_empty() && !part.scope.refs.iter().any(|r| r.starts_with("refs/tags")) {
        part.scope.refs_unknown = true;
    }
    for spec in refspecs {
        if !spec.literal {
            part.scope.refs_unknown = true;
            continue;
        }
        let s = spec.text.trim_start_matches('+');
        let dst = s.rsplit_once(':').map_or(s, |(_, d)| d);
        // git reads `heads/main` as refs/heads/main and `tags/v1` as refs/tags/v1.
        let full;
        let dst = if let Some(b) = dst.strip_prefix("heads/") {
            b
        } else if let Some(t) = dst.strip_prefix("tags/") {
            full = format!("refs/tags/{t}");
            full.as_str()
        } else {
            dst
        };
        if dst.is_empty() || dst == "HEAD" || dst.contains(['*', '@']) {
            part.scope.refs_unknown = true;
        } else {
            part.scope.refs.push(dst.strip_prefix("refs/heads/").unwrap_or(dst).to_owned());
        }
    }
    if dry_run {
        part.add(C::ReadOnly, "git push --dry-run sends nothing");
    } else {
        part.effects.insert(E::PushRemote);
        let names =
            if part.scope.refs_unknown { "refs it does not name".to_owned() } else { part.scope.refs.join(", ") };
        part.add(C::RemoteMutation, format!("git push to {names}"));
    }
}
