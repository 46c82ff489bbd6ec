//! Shells and how they are told what to run: each shell's option grammar, so that
//! `bash -euo pipefail -c 'sudo id'` is read as the script `sudo id` and not as a script
//! file named `pipefail`.

use super::super::Part;
use super::super::walk::Analyzer;
use super::super::words::{Arg, script_text};
use crate::effect::CommandClass as C;

/// Shells whose options follow the POSIX `sh` pattern (`-c`, clusters, `-o NAME`).
#[rustfmt::skip]
pub const POSIX_SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "ksh93", "mksh", "pdksh", "oksh", "lksh", "ash", "yash", "posh", "rbash",
    "rzsh", "rksh",
];

pub fn is_shell(name: &str) -> bool {
    POSIX_SHELLS.contains(&name) || matches!(name, "fish" | "tcsh" | "csh")
}

/// What a shell's arguments ask it to run.
#[derive(Debug, PartialEq, Eq)]
pub enum Invocation<'a> {
    /// `-c STRING [NAME [ARG…]]`; `init` is a command fish runs first (`-C`).
    Command { script: Option<&'a Arg>, positional: &'a [Arg], init: Option<&'a Arg> },
    /// A script file and its arguments.
    File { file: &'a Arg, init: Option<&'a Arg> },
    /// Commands read from standard input (`-s`, `-i`, or no operand).
    Stdin { init: Option<&'a Arg> },
    /// The arguments end the shell before it runs anything (`--version`, `-n`).
    Nothing,
}

/// Reads a POSIX-style shell's options: clusters of letters after `-` or `+`, where
/// each `o` (and bash's `O`) takes the next word; `--long` options, of which
/// `--rcfile`/`--init-file` (bash) and `--emulate` (zsh) take a value; `-` or `--`
/// ends them. A word that is not an option ends them too; bash would refuse a
/// malformed cluster, and we then read that word as the operand, the worse case.
fn posix<'a>(name: &str, args: &'a [Arg]) -> Invocation<'a> {
    let mut i = 0;
    let (mut command, mut stdin, mut no_exec) = (false, false, false);
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if !a.literal {
            break;
        }
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let takes_value = matches!(long, "rcfile" | "init-file") || (name == "zsh" && long == "emulate");
            match long {
                "version" | "help" => return Invocation::Nothing,
                "noexec" => no_exec = true,
                _ => {}
            }
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        let cluster = t.strip_prefix('-').or_else(|| t.strip_prefix('+'));
        let Some(cluster) = cluster.filter(|c| !c.is_empty() && c.chars().all(|c| c.is_ascii_alphabetic())) else {
            break;
        };
        let mut values = 0;
        for c in cluster.chars() {
            match c {
                // bash takes `+c` as `-c` too.
                'c' => command = true,
                's' | 'i' => stdin = true,
                'n' if t.starts_with('-') => no_exec = true,
                'o' | 'O' => values += 1,
                _ => {}
            }
        }
        i += 1 + values;
    }
    after_options(args.get(i..).unwrap_or(&[]), command, stdin, no_exec && !command)
}

/// fish: `-c CMD`/`--command CMD`/`--command=CMD`, `-C CMD`/`--init-command` run
/// first; `-n` parses only; `-d`, `-o`, `-f`, `--profile` take values.
fn fish(args: &[Arg]) -> Invocation<'_> {
    let mut i = 0;
    let (mut script, mut init, mut no_exec) = (None, None, false);
    let mut command = false;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        match t {
            "--" => {
                i += 1;
                break;
            }
            "-c" | "--command" => {
                command = true;
                script = args.get(i + 1);
                i += 2;
            }
            "-C" | "--init-command" => {
                init = args.get(i + 1);
                i += 2;
            }
            "-n" | "--no-execute" => {
                no_exec = true;
                i += 1;
            }
            "-v" | "--version" | "-h" | "--help" => return Invocation::Nothing,
            "-d" | "--debug" | "-o" | "--debug-output" | "-f" | "--features" | "--profile" | "--profile-startup" => {
                i += 2
            }
            _ if t.starts_with("--command=") || t.starts_with("--init-command=") => {
                // The value is attached: hand back the word itself and let the caller
                // see the prefix; fish runs what follows the `=`.
                if t.starts_with("--command=") {
                    command = true;
                    script = Some(a);
                } else {
                    init = Some(a);
                }
                i += 1;
            }
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ => break,
        }
    }
    if no_exec {
        return Invocation::Nothing;
    }
    let rest = args.get(i..).unwrap_or(&[]);
    if command {
        return Invocation::Command { script, positional: rest, init };
    }
    match rest.first() {
        Some(file) => Invocation::File { file, init },
        None => Invocation::Stdin { init },
    }
}

/// tcsh and csh: `-c` takes the next word as the command, whatever it looks like
/// (`tcsh -c -rfenv` runs `-rfenv`, it does not read `-rfenv` as options); `-b`
/// ends options; `-n` parses only.
fn csh(args: &[Arg]) -> Invocation<'_> {
    let mut i = 0;
    let (mut command, mut stdin, mut no_exec) = (false, false, false);
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if t == "-b" || t == "--" || t == "-" {
            i += 1;
            break;
        }
        let Some(cluster) = t.strip_prefix('-').filter(|c| !c.is_empty() && c.chars().all(|c| c.is_ascii_alphabetic()))
        else {
            break;
        };
        command |= cluster.contains('c');
        stdin |= cluster.contains(['s', 'i']);
        no_exec |= cluster.contains('n');
        i += 1;
        if command {
            break;
        }
    }
    after_options(args.get(i..).unwrap_or(&[]), command, stdin, no_exec)
}

/// What the words after a shell's options are: the command string and its
/// parameters, a script file, or nothing (commands come from standard input).
fn after_options(rest: &[Arg], command: bool, stdin: bool, no_exec: bool) -> Invocation<'_> {
    if no_exec {
        return Invocation::Nothing;
    }
    if command {
        return Invocation::Command { script: rest.first(), positional: rest.get(1..).unwrap_or(&[]), init: None };
    }
    match rest.first() {
        Some(file) if !stdin => Invocation::File { file, init: None },
        _ => Invocation::Stdin { init: None },
    }
}

pub fn invocation<'a>(name: &str, args: &'a [Arg]) -> Invocation<'a> {
    match name {
        "fish" => fish(args),
        "tcsh" | "csh" => csh(args),
        _ => posix(name, args),
    }
}

/// A shell run with `args`; `stdin_text` is what it reads when the line shows it.
pub fn shell(an: &mut Analyzer, name: &str, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    let via: &'static str = match name {
        "sh" => "sh -c",
        "zsh" => "zsh -c",
        "dash" => "dash -c",
        "fish" => "fish -c",
        "tcsh" | "csh" => "csh -c",
        "ksh" | "mksh" | "ksh93" => "ksh -c",
        _ => "bash -c",
    };
    // Arguments appended at run time (xargs, find -exec … +) make `$@` unknowable.
    let appended = an.args_appended;
    let script_of = |an: &mut Analyzer, word: &Arg, positional: Option<Vec<String>>, part: &mut Part| {
        let text = word.text.strip_prefix("--command=").or_else(|| word.text.strip_prefix("--init-command="));
        match (word.literal, &word.output) {
            (_, Some(output)) => an.shell_script(output, via, positional),
            (true, _) => an.shell_script(text.unwrap_or(&word.text), via, positional),
            (false, _) => match script_text(&word.text, &an.vars) {
                Some(script) => {
                    let body = script.strip_prefix("--command=").or_else(|| script.strip_prefix("--init-command="));
                    let body = if text.is_some() { body.unwrap_or(&script) } else { &script };
                    an.shell_script(body, via, positional)
                }
                None => part.add(C::Opaque, format!("{via} runs a script computed at run time ({})", word.text)),
            },
        }
    };
    match invocation(name, args) {
        Invocation::Nothing => part.add(C::ReadOnly, ""),
        Invocation::Command { script, positional, init } => {
            if let Some(init) = init {
                script_of(an, init, None, part);
            }
            let positional: Option<Vec<String>> = (!appended && positional.iter().all(|a| a.literal))
                .then(|| positional.iter().map(|a| a.text.clone()).collect());
            match script {
                Some(word) => script_of(an, word, positional, part),
                None => part.add(C::Opaque, format!("{via} without a command string")),
            }
            part.add(C::ReadOnly, "");
        }
        Invocation::File { file, init } => {
            if let Some(init) = init {
                script_of(an, init, None, part);
            }
            match &file.output {
                Some(output) => {
                    an.shell_script(output, "shell <(…)", None);
                    part.add(C::ReadOnly, "");
                }
                None => part.add(C::Opaque, format!("{name} runs the script file {}", file.text)),
            }
        }
        Invocation::Stdin { init } => {
            if let Some(init) = init {
                script_of(an, init, None, part);
            }
            match stdin_text {
                Some(text) => {
                    an.shell_script(text, "shell stdin", None);
                    part.add(C::ReadOnly, "");
                }
                None => part.add(C::Opaque, format!("{name} runs commands read from its input")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::word(*w)).collect()
    }

    fn command_of(name: &str, words: &[&str]) -> Option<(String, Vec<String>)> {
        let a = args(words);
        match invocation(name, &a) {
            Invocation::Command { script, positional, .. } => {
                Some((script?.text.clone(), positional.iter().map(|p| p.text.clone()).collect()))
            }
            _ => None,
        }
    }

    #[test]
    fn options_before_dash_c_are_skipped_with_their_values() {
        for (name, words) in [
            ("bash", &["-euo", "pipefail", "-c", "X"][..]),
            ("bash", &["-O", "extglob", "-c", "X"]),
            ("sh", &["-euxo", "pipefail", "-c", "X"]),
            ("bash", &["-oe", "pipefail", "-c", "X"]),
            ("bash", &["+o", "posix", "-c", "X"]),
            ("bash", &["--norc", "--noprofile", "-lc", "X"]),
            ("bash", &["--rcfile", "f", "-c", "X"]),
            ("bash", &["+c", "X"]),
            ("bash", &["-s", "-c", "X"]),
            ("zsh", &["--emulate", "sh", "-c", "X"]),
            ("ksh", &["-o", "errexit", "-c", "X"]),
            ("dash", &["-euc", "X"]),
            ("fish", &["--no-config", "-c", "X"]),
            ("fish", &["--command", "X"]),
            ("tcsh", &["-fc", "X"]),
            ("csh", &["-e", "-c", "X"]),
            // csh's -c takes the next word, even one that looks like options.
            ("tcsh", &["-f", "-c", "-rfenv"]),
            ("csh", &["-c", "-X"]),
        ] {
            let script = words.last().filter(|w| w.starts_with('-')).copied().unwrap_or("X");
            assert_eq!(command_of(name, words).map(|c| c.0).as_deref(), Some(script), "{name} {words:?}");
        }
    }

    #[test]
    fn positional_parameters_follow_the_command_string() {
        assert_eq!(command_of("sh", &["-c", "\"$0\" id", "sudo"]), Some(("\"$0\" id".into(), vec!["sudo".into()])));
    }

    #[test]
    fn script_files_stdin_and_no_execution_are_told_apart() {
        let a = args(&["-euo", "pipefail", "run.sh"]);
        assert!(matches!(invocation("bash", &a), Invocation::File { file, .. } if file.text == "run.sh"));
        let a = args(&["-s", "x"]);
        assert!(matches!(invocation("bash", &a), Invocation::Stdin { .. }));
        let a = args(&["-n", "x.sh"]);
        assert_eq!(invocation("bash", &a), Invocation::Nothing);
        let a = args(&["--version"]);
        assert_eq!(invocation("bash", &a), Invocation::Nothing);
        let a = args(&["-C", "sudo id", "-i"]);
        assert!(matches!(invocation("fish", &a), Invocation::Stdin { init: Some(i) } if i.text == "sudo id"));
    }
}
