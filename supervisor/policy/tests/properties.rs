//! Properties of the command policy over arbitrary input: it never panics, and no
//! addition makes a decision less restrictive.

use cc_policy::command::check;
use cc_policy::{Decision, Mode};
use proptest::prelude::*;

mod common;

use common::corpus_lines;

/// Lines built from the shell's own pieces, so the parser's deep paths get exercised.
fn shellish() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "git",
        "push",
        "rm",
        "-rf",
        "/",
        "sudo",
        "bash",
        "-c",
        "'",
        "\"",
        "$(",
        ")",
        "`",
        "|",
        "&&",
        "||",
        ";",
        "&",
        "(",
        "{",
        "}",
        "<<EOF\n",
        "\nEOF\n",
        ">",
        ">>",
        "<",
        "${",
        "$((",
        "))",
        "\\",
        "\n",
        "#",
        "=",
        "x",
        "*",
        "eval",
        "env",
        "xargs",
        "find",
        "-exec",
        "\\;",
        "~",
        "$HOME",
        "if",
        "then",
        "fi",
        "for",
        "in",
        "do",
        "done",
        "case",
        "esac",
        "f()",
        "[[",
        "]]",
        "<(",
        ">(",
        "$'\\x72m'",
        " ",
        " ",
        " ",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
}

const DENIED: &[&str] = &["rm -rf /", "sudo id", "reboot", "mkfs.ext4 /dev/sda"];

/// Wrapped in `sh -c`, a line runs with no positional parameters: `"$@"` is then known
/// to be empty, which the line alone cannot know (`exec "$@"` runs nothing). The
/// wrapping properties hold for the lines that do not read them.
fn reads_positional(line: &str) -> bool {
    ["$@", "$*", "${@", "${*", "$#"].iter().any(|p| line.contains(p))
        || (1..10).any(|n| line.contains(&format!("${n}")))
}

fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_on_arbitrary_text(s in any::<String>()) {
        for mode in Mode::ALL {
            let _ = check(&s, mode);
        }
    }

    #[test]
    fn never_panics_on_shell_fragments(s in shellish()) {
        for mode in Mode::ALL {
            let _ = check(&s, mode);
        }
    }

    #[test]
    fn appending_a_denied_command_never_loosens(
        line in prop_oneof![shellish(), prop::sample::select(corpus_lines())],
        denied in prop::sample::select(DENIED),
        separator in prop::sample::select(vec!["; ", "\n", " && ", " || ", " & ", " | "]),
    ) {
        // A trailing backslash joins the next line to this one: not a separate command.
        prop_assume!(line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 0);
        // An open heredoc may take the appended line as its delimiter, which is not run.
        prop_assume!(!line.contains("<<"));
        let joined = format!("{line}{separator}{denied}");
        for mode in Mode::ALL {
            let before = check(&line, mode).decision;
            let after = check(&joined, mode).decision;
            prop_assert!(after >= before, "{mode}: {line:?} is {before:?} but {joined:?} is {after:?}");
        }
    }

    #[test]
    fn wrapping_in_a_shell_never_loosens(
        line in prop_oneof![shellish(), prop::sample::select(corpus_lines())],
        shell in prop::sample::select(vec!["bash -c", "sh -c", "bash -lc", "zsh -c", "dash -c", "sudo bash -c", "env bash -c"]),
    ) {
        prop_assume!(!reads_positional(&line));
        let wrapped = format!("{shell} {}", single_quoted(&line));
        for mode in Mode::ALL {
            let before = check(&line, mode).decision;
            let after = check(&wrapped, mode).decision;
            prop_assert!(after >= before, "{mode}: {line:?} is {before:?} but {wrapped:?} is {after:?}");
        }
    }
}

/// Options a person or an agent puts before `-c`, per shell.
fn shell_with_options() -> impl Strategy<Value = String> {
    let posix = prop::sample::select(vec!["bash", "sh", "zsh", "dash", "ksh", "mksh"]);
    let options = prop::sample::select(vec![
        "-euo pipefail",
        "-e",
        "-eu",
        "-x",
        "-euxo pipefail",
        "-o errexit -o nounset",
        "-oe pipefail",
        "+o posix",
        "+e",
        "-l",
        "-s",
        "-i",
        "--norc",
        "--noprofile --norc -e",
        "--login",
        "-O extglob",
        "-O globstar -O nullglob",
        "--rcfile /dev/null",
    ]);
    let fish = prop::sample::select(vec!["fish --no-config", "fish -l", "fish -N -P", "tcsh -f", "csh -e"]);
    prop_oneof![(posix, options).prop_map(|(s, o)| format!("{s} {o}")), fish.prop_map(str::to_owned),]
}

/// `cd X && TEMPLATE(p)` against `TEMPLATE(X/p)`: templates that change the files they name.
const PATH_TEMPLATES: &[&str] = &[
    "rm -rf {}",
    "rm -f {}",
    "rm {}",
    "chmod -R 777 {}",
    "chown -R x {}",
    "echo x > {}",
    "echo x >> {}",
    "echo x | tee {}",
    "cp a {}",
    "mv {} /tmp/x",
    "truncate -s 0 {}",
    "shred -u {}",
    "dd if=/dev/zero of={}",
    "sed -i s/a/b/ {}",
    "find {} -delete",
    "touch {}",
    "ln -sf a {}",
    "install -m 644 a {}",
    "tar -xf a.tar -C {}",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn options_before_dash_c_never_loosen(
        line in prop_oneof![shellish(), prop::sample::select(corpus_lines())],
        shell in shell_with_options(),
    ) {
        prop_assume!(!reads_positional(&line));
        let wrapped = format!("{shell} -c {}", single_quoted(&line));
        for mode in Mode::ALL {
            let before = check(&line, mode).decision;
            let after = check(&wrapped, mode).decision;
            prop_assert!(after >= before, "{mode}: {line:?} is {before:?} but {wrapped:?} is {after:?}");
        }
    }

    #[test]
    fn wrapping_in_parallel_never_loosens(
        line in prop_oneof![shellish(), prop::sample::select(corpus_lines())],
        form in 0..3usize,
    ) {
        // parallel reads a leading `-` as its own option, as it would any option.
        prop_assume!(form != 2 || !line.trim_start().starts_with('-'));
        let quoted = single_quoted(&line);
        let wrapped = match form {
            0 => format!("parallel ::: {quoted}"),
            1 => format!("parallel -j4 --joblog log ::: {quoted} 'true'"),
            _ => format!("parallel -N0 {quoted} ::: 1"),
        };
        for mode in Mode::ALL {
            let before = check(&line, mode).decision;
            let after = check(&wrapped, mode).decision;
            prop_assert!(after >= before, "{mode}: {line:?} is {before:?} but {wrapped:?} is {after:?}");
        }
    }

    #[test]
    fn changing_directory_first_is_never_looser_than_the_absolute_path(
        dir in prop::sample::select(vec!["/", "/etc", "/usr/lib", "~", "/tmp/w", "/home", "/var/lib", "/root", "/boot"]),
        template in prop::sample::select(PATH_TEMPLATES),
        path in prop::sample::select(vec!["*", ".", "..", "lib", "passwd", "./*", "ssh/x", ".*", "../..", "sudoers", "a/../b"]),
        separator in prop::sample::select(vec![" && ", "; ", "\n"]),
    ) {
        let separator = separator.replace("\\n", "\n");
        let relative = template.replace("{}", path);
        let absolute = template.replace("{}", &format!("{}/{path}", dir.trim_end_matches('/')));
        let line = format!("cd {dir}{separator}{relative}");
        for mode in Mode::ALL {
            let want = check(&absolute, mode).decision;
            let got = check(&line, mode).decision;
            prop_assert!(got >= want, "{mode}: {line:?} is {got:?} but {absolute:?} is {want:?}");
        }
    }
}

#[test]
fn a_denied_command_after_any_corpus_line_that_parses_is_denied() {
    for line in corpus_lines() {
        for denied in DENIED {
            let joined = format!("{line}\n{denied}");
            let unparsed = check(&line, Mode::Chat)
                .parts
                .iter()
                .any(|p| p.part.notes.iter().any(|n| n.starts_with("does not parse")));
            let open_heredoc = line.contains("<<") && !line.contains("\nEOF");
            if unparsed || open_heredoc {
                continue;
            }
            for mode in Mode::ALL {
                assert_eq!(check(&joined, mode).decision, Decision::Deny, "{mode}: {joined:?}");
            }
        }
    }
}
