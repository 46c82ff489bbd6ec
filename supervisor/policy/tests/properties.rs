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
        let wrapped = format!("{shell} {}", single_quoted(&line));
        for mode in Mode::ALL {
            let before = check(&line, mode).decision;
            let after = check(&wrapped, mode).decision;
            prop_assert!(after >= before, "{mode}: {line:?} is {before:?} but {wrapped:?} is {after:?}");
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
