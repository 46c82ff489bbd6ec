//! Parsing a script with brush-parser, behind guards for the inputs its grammar handles
//! badly (a panic or exponential backtracking): those are refused as "does not parse".

use std::io::Cursor;

use brush_parser::Parser;

use super::words;

/// Parses a script; a panic inside the parser (a bug of its, never seen in fuzzing) is
/// taken as "does not parse" rather than taking the gate down.
pub fn parse(text: &str) -> Result<brush_parser::ast::Program, String> {
    // brush's grammar backtracks exponentially over unclosed parentheses (32 of them
    // took 90 s in the fuzzer); a line like that is refused before it reaches it.
    let (depth, unclosed) = paren_nesting(text);
    if depth > MAX_PAREN_DEPTH || unclosed > MAX_UNCLOSED_PARENS {
        return Err(format!("parentheses nested {depth} deep ({unclosed} unclosed): too deep to parse"));
    }
    // brush unwraps the parse of a descriptor number before `<` or `>` (`99999999999>f`
    // panics on overflow): such a line is refused here instead.
    if has_oversized_fd_number(text) {
        return Err("a file descriptor number too large for a redirection".into());
    }
    let options = words::options();
    std::panic::catch_unwind(|| {
        let mut parser = Parser::new(Cursor::new(text.as_bytes()), &options);
        parser.parse_program().map_err(|e| e.to_string())
    })
    .unwrap_or_else(|_| Err("the parser failed on this input".into()))
}

/// A run of more than nine digits right before `<` or `>`: more than an i32 holds.
fn has_oversized_fd_number(text: &str) -> bool {
    let mut digits = 0usize;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits += 1;
        } else {
            if (c == '<' || c == '>') && digits > 9 {
                return true;
            }
            digits = 0;
        }
    }
    false
}

/// Deeper nesting than this is refused before parsing (real command lines stay far
/// below; bash itself would take it).
const MAX_PAREN_DEPTH: usize = 24;
/// Unclosed parentheses are where the grammar backtracks; a line with more than this
/// does not parse in bash either.
const MAX_UNCLOSED_PARENS: usize = 6;

/// The deepest nesting of parentheses outside quotes, and how many stay unclosed.
fn paren_nesting(text: &str) -> (usize, usize) {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut chars = text.chars();
    let mut double = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if !double => {
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                }
            }
            '"' => double = !double,
            // Counted in double quotes too: a `$(` there opens shell syntax again, and
            // counting too many only makes a line opaque.
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (max, depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::walk::Analyzer;

    #[test]
    fn unclosed_parentheses_are_refused_before_the_parser_sees_them() {
        let started = std::time::Instant::now();
        let parts = Analyzer::analyze(&format!("{}ls", "((".repeat(40)));
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
        assert!(parts.iter().any(|p| p.notes.iter().any(|n| n.contains("too deep to parse"))), "{parts:?}");
        assert_eq!(paren_nesting("echo '((((((((' \\( \"(\" $(ls) \"$(a (b))\""), (3, 1));
        assert_eq!(paren_nesting("((a)"), (2, 1));
        assert!(has_oversized_fd_number("cc<&c<&e&(<$4e$$ee&(2222222222222222222222<$4e$$e"));
        assert!(!has_oversized_fd_number("echo 123456789> f 2>&1"));
        let parts = Analyzer::analyze("ls 99999999999>f");
        assert!(parts.iter().any(|p| p.notes.iter().any(|n| n.contains("descriptor number"))), "{parts:?}");
        // Balanced nesting parses (it is fast) up to the limit.
        let balanced = format!("{}ls{}", "(".repeat(20), ")".repeat(20));
        assert!(parse(&balanced).is_ok());
    }
}
