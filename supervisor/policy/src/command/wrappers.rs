//! Wrappers with a grammar of their own: GNU parallel (a command template and its
//! inputs, run through a shell), xargs when the line shows its input, the tools that
//! run a command inside an environment they set up (`op run --`, `nix develop -c`,
//! `mise exec --`), and a command name computed at run time, which may be any wrapper.

use super::Part;
use super::classify::{Unwrapped, skip_options};
use super::walk::Analyzer;
use super::words::Arg;
use crate::effect::{CommandClass as C, Effect as E};

/// parallel's options that take a value (short letters, long names).
const PARALLEL_SHORT: &str = "adEIjLnNPSsCW";
const PARALLEL_LONG: &[&str] = &[
    "jobs",
    "arg-file",
    "delimiter",
    "eof",
    "max-lines",
    "max-args",
    "max-replace-args",
    "sshlogin",
    "sshloginfile",
    "slf",
    "colsep",
    "workdir",
    "wd",
    "joblog",
    "results",
    "res",
    "tmpdir",
    "timeout",
    "delay",
    "retries",
    "halt",
    "memfree",
    "load",
    "nice",
    "tag-string",
    "tagstring",
    "env",
    "basefile",
    "bf",
    "transfer",
    "return",
    "block",
    "recstart",
    "recend",
    "limit",
    "ssh",
    "termseq",
    "header",
    "arg-sep",
    "arg-file-sep",
    "semaphorename",
    "id",
    "fg",
    "sqlmaster",
    "sqlworker",
    "sql",
    "pipe-part",
];
/// Inputs listed on the line are analysed up to this many.
const MAX_INPUTS: usize = 16;

/// `parallel [options] [command] ::: inputs…`: parallel joins the command's words,
/// puts each input in place of `{}` (or after the words) and runs the result through a
/// shell. With no command, each input is a command line.
pub fn parallel<'a>(an: &mut Analyzer, name: &str, rest: &'a [Arg], part: &mut Part) -> Unwrapped<'a> {
    part.via.push("parallel");
    if rest.iter().any(|a| {
        a.text == "-S"
            || a.text.starts_with("--sshlogin")
            || a.text.starts_with("--slf")
            || a.text.starts_with("-S") && a.text.len() > 2
    }) {
        part.add(C::RemoteMutation, format!("{name} -S runs commands on other hosts"));
        part.effects.insert(E::AccessNetwork);
    }
    if rest.iter().any(|a| matches!(a.text.as_str(), "--dry-run" | "--dryrun")) {
        part.add(C::ReadOnly, "");
        return Unwrapped::Done;
    }
    let after = skip_options(rest, PARALLEL_SHORT, PARALLEL_LONG);
    let separator = |a: &Arg| a.literal && matches!(a.text.as_str(), ":::" | "::::" | ":::+" | "::::+");
    let command_end = after.iter().position(separator).unwrap_or(after.len());
    let command = &after[..command_end];
    // Inputs: the words after each `:::`; `::::` names files, whose lines we cannot see.
    let mut inputs: Vec<&Arg> = Vec::new();
    let mut from_files = command_end == after.len();
    let mut i = command_end;
    while let Some(sep) = after.get(i) {
        let group_end = after[i + 1..].iter().position(separator).map_or(after.len(), |p| i + 1 + p);
        if sep.text.starts_with("::::") {
            from_files = true;
        } else {
            inputs.extend(&after[i + 1..group_end]);
        }
        i = group_end;
    }
    if command.is_empty() {
        if from_files {
            part.add(C::Opaque, format!("{name} runs commands read from its input"));
        }
        for input in inputs.iter().take(MAX_INPUTS) {
            if input.literal {
                an.shell_script(&input.text, "parallel input", None);
            } else {
                part.add(C::Opaque, format!("{name} runs a command computed at run time ({})", input.text));
            }
        }
        if inputs.len() > MAX_INPUTS {
            part.add(C::Opaque, format!("{name}: more commands than are analysed"));
        }
        part.add(C::ReadOnly, "");
        return Unwrapped::Done;
    }
    if !command.iter().all(|a| a.literal) {
        part.add(C::Opaque, format!("{name} runs a command computed at run time"));
        return Unwrapped::Done;
    }
    let template = command.iter().map(|a| a.text.as_str()).collect::<Vec<_>>().join(" ");
    // `-N0`: each job gets no arguments; the template runs as it is.
    let no_arguments =
        rest.windows(2).any(|w| matches!(w[0].text.as_str(), "-N" | "-n" | "--max-args") && w[1].text == "0")
            || rest.iter().any(|a| matches!(a.text.as_str(), "-N0" | "-n0" | "--max-args=0"));
    if no_arguments {
        an.shell_script(&template, "parallel command", None);
        part.add(C::ReadOnly, "");
        return Unwrapped::Done;
    }
    let mut substituted_any = false;
    for input in inputs.iter().take(MAX_INPUTS) {
        let value = if input.literal { quote(&input.text) } else { input.text.clone() };
        let (line, placed) = place(&template, &value);
        substituted_any = true;
        let line = if placed { line } else { format!("{template} {value}") };
        an.shell_script(&line, "parallel command", None);
    }
    if !substituted_any || from_files {
        // Inputs we cannot see stand in as a word whose value is unknown.
        let unknown = "\"$PARALLEL_INPUT\"";
        let (line, placed) = place(&template, unknown);
        let line = if placed { line } else { format!("{template} {unknown}") };
        an.shell_script(&line, "parallel command", None);
    }
    part.add(C::ReadOnly, "");
    Unwrapped::Done
}

/// Replaces parallel's replacement strings (`{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{#}`,
/// `{%}`, `{1}`…) with `value`; says whether there was one.
fn place(template: &str, value: &str) -> (String, bool) {
    let mut out = String::new();
    let mut placed = false;
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        let inside = &rest[open + 1..open + close];
        if inside.chars().all(|c| c.is_ascii_digit() || "./#%".contains(c)) {
            out.push_str(&rest[..open]);
            out.push_str(value);
            placed = true;
        } else {
            out.push_str(&rest[..open + close + 1]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    (out, placed)
}

fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Tools that set up an environment (secrets, toolchains, a dev shell) and run a command
/// in it. Returns the command, or None when there is none (the part is classified).
pub fn runner<'a>(an: &mut Analyzer, name: &str, rest: &'a [Arg], part: &mut Part) -> Option<&'a [Arg]> {
    let after_dashes = || rest.iter().position(|a| a.is("--")).map(|p| &rest[p + 1..]);
    let verb = rest.iter().find(|a| !a.text.starts_with('-')).map(|a| a.text.as_str()).unwrap_or("");
    let install = |part: &mut Part, what: String| {
        part.add(C::Mutation, what);
        part.effects.insert(E::InstallPackage);
    };
    // The tool runs nothing and only reads.
    let read_only = |part: &mut Part| -> Option<&'a [Arg]> {
        part.add(C::ReadOnly, "");
        None
    };
    match name {
        "op" | "doppler" | "infisical" | "dotenvx" => match verb {
            "run" => Some(after_dashes().unwrap_or_else(|| skip_options(&rest[1..], "", &["env-file", "config"]))),
            "read" | "whoami" | "list" | "get" | "inject" | "--version" | "" => read_only(part),
            v => {
                part.add(C::RemoteMutation, format!("{name} {v} changes a secrets store"));
                None
            }
        },
        "aws-vault" => match verb {
            "exec" => after_dashes().or_else(|| rest.get(2..)).filter(|r| !r.is_empty()).or_else(|| read_only(part)),
            "list" | "ls" | "" => read_only(part),
            v => {
                part.add(C::Mutation, format!("aws-vault {v}"));
                None
            }
        },
        "mise" | "rtx" | "asdf" | "rbenv" | "pyenv" | "nodenv" | "devbox" | "flox" => match verb {
            "exec" | "x" | "run" | "shell" => Some(after_dashes().unwrap_or_else(|| {
                let words = skip_options(rest, "", &[]);
                // `asdf exec CMD`, `mise x node@20 -- CMD`: without `--`, the word after the verb.
                words.get(1..).unwrap_or(&[])
            })),
            "install" | "i" | "use" | "u" | "add" | "global" | "local" | "plugin" | "upgrade" | "sync" => {
                install(part, format!("{name} {verb} installs tools"));
                None
            }
            "ls" | "list" | "current" | "which" | "where" | "version" | "versions" | "doctor" | "--version" | "" => {
                read_only(part)
            }
            v => {
                part.add(C::Mutation, format!("{name} {v}"));
                None
            }
        },
        "direnv" => match verb {
            "exec" => rest.iter().position(|a| a.text == "exec").and_then(|p| rest.get(p + 2..)),
            "status" | "version" | "" => read_only(part),
            v => {
                part.add(C::Mutation, format!("direnv {v}"));
                None
            }
        },
        "nix" | "nix-shell" => {
            // `nix-shell --run CMD` runs a script; `nix develop -c CMD` a command.
            // Fetching the packages first is an install.
            if let Some(pos) = rest.iter().position(|a| a.is("--run") || (name == "nix-shell" && a.is("--command"))) {
                install(part, format!("{name} fetches packages"));
                super::classify::body(an, rest.get(pos + 1), "nix-shell --run", part);
                return None;
            }
            let sub = rest.iter().filter(|a| !a.text.starts_with('-')).nth(1).map(|a| a.text.as_str());
            match (name, verb) {
                ("nix-shell", _) | ("nix", "run") => {
                    install(part, format!("{name} fetches packages"));
                    None
                }
                (_, "develop" | "shell") => {
                    install(part, format!("nix {verb} fetches packages"));
                    let command = rest.iter().position(|a| a.is("-c") || a.is("--command")).map(|p| &rest[p + 1..]);
                    command.filter(|c| !c.is_empty())
                }
                (_, "profile" | "registry") if matches!(sub, Some("install" | "add" | "upgrade")) => {
                    install(part, format!("nix {verb} installs packages"));
                    None
                }
                (_, "flake") if matches!(sub, Some("show" | "metadata" | "info" | "check")) => read_only(part),
                (_, "search" | "eval" | "show-config" | "path-info" | "log" | "why-depends" | "--version" | "") => {
                    read_only(part)
                }
                (_, v) => {
                    part.add(C::Mutation, format!("nix {v}"));
                    None
                }
            }
        }
        "env-cmd" | "dotenv" | "cross-env" => {
            super::classify::assignment_args(an, rest, part);
            let after = skip_options(rest, "fer", &["file", "environments", "rc-file"]);
            let after =
                &after[after.iter().position(|a| !super::classify::is_assignment(&a.text)).unwrap_or(after.len())..];
            Some(after_dashes().unwrap_or(after))
        }
        _ => None,
    }
}

/// A command name computed at run time is never judged looser than what the line
/// shows of it: `${SUDO:-sudo} apt-get install` as if the default ran, and `$RUN
/// apt-get install` as an unknown wrapper of the command in its arguments.
pub fn computed_command(an: &mut Analyzer, first: &Arg, rest: &[Arg], part: &mut Part) {
    let default = first
        .text
        .strip_prefix("${")
        .and_then(|t| t.strip_suffix('}'))
        .and_then(|t| t.split_once(":-").or_else(|| t.split_once('-')))
        .filter(|(name, _)| super::classify::is_assignment(&format!("{name}=")))
        .map(|(_, word)| word)
        .filter(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "._/+-".contains(c)));
    let in_child = std::mem::replace(&mut an.in_child, true);
    match default {
        Some(word) => {
            let mut command = vec![Arg::word(word)];
            command.extend(rest.iter().cloned());
            super::classify::argv(an, &command, None, part);
        }
        None => super::programs::search_arguments(an, rest, part),
    }
    an.in_child = in_child;
}

/// What xargs runs when the line shows its input: the command with the input's words
/// added. None when an option makes the words other than blank-separated arguments
/// (`-I`, `-d`, `-0`, `-a`, `-E`), or there is no command (xargs runs echo).
pub fn xargs_with_input(rest: &[Arg], input: &str) -> Option<Vec<Arg>> {
    const MAX_WORDS: usize = 64;
    let reshapes = |t: &str| {
        t.starts_with("--replace")
            || t.starts_with("--delimiter")
            || t.starts_with("--null")
            || t.starts_with("--arg-file")
            || t.starts_with("--eof")
            || (t.starts_with('-') && !t.starts_with("--") && t.contains(['I', 'i', 'd', '0', 'a', 'E', 'e']))
    };
    let options: Vec<&Arg> = rest.iter().take_while(|a| a.text.starts_with('-')).collect();
    if options.iter().any(|a| !a.literal || reshapes(&a.text)) {
        return None;
    }
    let after = skip_options(
        rest,
        "ILnPdaEs",
        &["max-lines", "max-args", "max-procs", "delimiter", "arg-file", "max-chars", "process-slot-var"],
    );
    if after.is_empty() {
        return None;
    }
    let mut command = after.to_vec();
    command.extend(input.split_whitespace().take(MAX_WORDS).map(Arg::word));
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_strings_are_placed() {
        assert_eq!(place("rm -rf {}", "'/'"), ("rm -rf '/'".into(), true));
        assert_eq!(place("mv {} {.}.bak", "x"), ("mv x x.bak".into(), true));
        assert_eq!(place("awk '{print}'", "x"), ("awk '{print}'".into(), false));
        assert_eq!(place("rm -rf", "x"), ("rm -rf".into(), false));
    }
}
