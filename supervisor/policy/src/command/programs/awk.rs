//! awk: read-only unless its program runs a command or writes a file, which awk can do
//! only in a few spellings, all found here.

use super::super::Part;
use super::super::classify::skip_options;
use super::super::words::Arg;
use crate::effect::CommandClass as C;

pub fn awk(args: &[Arg], part: &mut Part) {
    if args.iter().any(|a| a.text == "-i" || a.text == "inplace" || a.text.starts_with("--include")) {
        part.add(C::Mutation, "awk -i inplace edits files");
    }
    let program = skip_options(args, "fvFE", &[]).first();
    if args.iter().any(|a| {
        (a.text.starts_with('-') && !a.text.starts_with("--") && a.text.contains(['f', 'E']))
            || a.text.starts_with("--source")
            || a.text.starts_with("--file")
            || a.text.starts_with("--exec")
            || a.text.starts_with("--load")
            || a.text == "-l"
    }) {
        part.add(C::Opaque, "awk runs a program file or source we cannot see");
    } else if let Some(p) = program
        && (!p.literal || awk_program_acts(&p.text))
    {
        part.add(C::Opaque, "the awk program may run commands or write files");
    }
    part.add(C::ReadOnly, "");
}

/// Whether an awk program may run a command or write a file: `system(…)`, a pipe
/// (`print | "cmd"`, `"cmd" | getline`, `|&`), an output redirection of a `print` or
/// `printf` (`print > "f"`, `>> "f"`), or gawk's `@include`/`@load`. A `>` anywhere
/// else is a comparison (`NR>=40 && NR<=90`, `$3 > 100`), as awk's grammar reads it:
/// inside a print's own parentheses too (`print (a > b)`). Strings and regular
/// expressions are skipped, so `/a|b/` and `"x > y"` are text.
pub fn awk_program_acts(program: &str) -> bool {
    let chars: Vec<char> = program.chars().collect();
    let mut i = 0;
    let mut depth = 0usize;
    // The paren depth of the print statement we are in, if any.
    let mut print_at: Option<usize> = None;
    // Whether the last significant token was an operand (so `/` divides).
    let mut operand = false;
    while let Some(&c) = chars.get(i) {
        match c {
            '"' => {
                i += 1;
                while let Some(&d) = chars.get(i) {
                    if d == '\\' {
                        i += 1;
                    } else if d == '"' {
                        break;
                    }
                    i += 1;
                }
                operand = true;
            }
            '/' if !operand => {
                i += 1;
                while let Some(&d) = chars.get(i) {
                    if d == '\\' {
                        i += 1;
                    } else if d == '/' || d == '\n' {
                        break;
                    }
                    i += 1;
                }
                operand = true;
            }
            '#' => {
                while chars.get(i).is_some_and(|d| *d != '\n') {
                    i += 1;
                }
                continue;
            }
            '(' | '[' => {
                depth += 1;
                operand = false;
            }
            ')' | ']' => {
                depth = depth.saturating_sub(1);
                if print_at.is_some_and(|at| depth < at) {
                    print_at = None;
                }
                operand = true;
            }
            ';' | '{' | '}' | '\n' => {
                print_at = None;
                operand = false;
            }
            '@' => return true,
            '|' if chars.get(i + 1) == Some(&'|') => {
                i += 1;
                operand = false;
            }
            '|' => return true,
            '>' if chars.get(i + 1) == Some(&'=') => {
                i += 1;
                operand = false;
            }
            '>' if print_at == Some(depth) => return true,
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while chars.get(i + 1).is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_') {
                    i += 1;
                }
                let word: String = chars[start..=i].iter().collect();
                match word.as_str() {
                    "print" | "printf" => {
                        print_at = Some(depth);
                        operand = false;
                    }
                    "system" => return true,
                    // Keywords after which a `/` begins a regular expression.
                    "in" | "return" | "case" | "if" | "while" | "else" | "do" => operand = false,
                    _ => operand = true,
                }
            }
            c if c.is_ascii_digit() || c == '$' => operand = true,
            c if c.is_whitespace() => {}
            _ => operand = false,
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::awk_program_acts as acts;

    #[test]
    fn comparisons_are_not_redirections_and_every_way_out_is_found() {
        for reads in [
            "NR>=40 && NR<=90",
            "$3 > 100 {print $1}",
            "{ if ($1 > max) max = $1 } END { print max }",
            "{print (NR > 1)}",
            "/error|warn/ {n++} END {print n}",
            "{print \"a > b\"}",
            "$1 > 0 && $2 >= 3 || $4 > 5",
            "{ getline line < \"other\"; print line }",
            "{ x = a / b; y = c > d }",
        ] {
            assert!(!acts(reads), "{reads}");
        }
        for acting in [
            "{print > \"out\"}",
            "{print $1 >> \"big\"}",
            "{printf(\"%s\\n\", $1) > \"f\"}",
            "$1 > 0 {print $1 > \"/tmp/x\"}",
            "{print | \"sort\"}",
            "{ \"date\" | getline d }",
            "BEGIN {system(\"id\")}",
            "BEGIN { system (\"id\") }",
            "@include \"x.awk\"",
            "{ print |& \"cmd\" }",
            "{ if (x) print > f }",
        ] {
            assert!(acts(acting), "{acting}");
        }
    }
}
