//! What a shell word is once parsed: its literal text when it has one, and the commands
//! hidden in it (`$(…)`, backticks, `${x:-$(…)}`, `$(( $(…) ))`).

use brush_parser::ParserOptions;
use brush_parser::word::{self, WordPiece, WordPieceWithSource};

use super::vars::{Vars, simple_expansion};

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The unquoted text when `literal`; the source text otherwise.
    pub text: String,
    /// The word means the same whatever the environment: no expansion in it.
    pub literal: bool,
    /// An unquoted `*`, `?` or `[` makes it a pattern the shell expands.
    pub glob: bool,
    /// A `~` or `$HOME` / `${HOME}` at its start: it names the home directory.
    pub home: bool,
    /// For a process substitution `<(…)`: what it produces, when the line shows it.
    pub output: Option<String>,
}

impl Arg {
    pub fn is(&self, s: &str) -> bool {
        self.literal && self.text == s
    }

    /// A literal word.
    pub fn word(text: impl Into<String>) -> Arg {
        Arg { text: text.into(), literal: true, glob: false, home: false, output: None }
    }

    /// A word whose value is known only at run time; `source` is how it is written.
    pub fn dynamic(source: impl Into<String>) -> Arg {
        Arg { text: source.into(), literal: false, glob: false, home: false, output: None }
    }
}

/// A command substitution found inside a word, to be analysed as a script.
pub struct Substitution {
    pub script: String,
}

pub fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Parses `raw` (a word as it appears in the source) into its meaning and the scripts
/// hidden in it. Variables the line has shown are expanded; a word that splits into
/// several fields is given back joined (see [`analyse_fields`]).
pub fn analyse(raw: &str, subs: &mut Vec<Substitution>, vars: &Vars) -> Arg {
    let mut fields = analyse_fields(raw, subs, vars);
    if fields.len() == 1 {
        return fields.remove(0);
    }
    let text = fields.iter().map(|f| f.text.as_str()).collect::<Vec<_>>().join(" ");
    Arg { text, ..fields.into_iter().next().unwrap_or_else(|| Arg::word("")) }
}

/// Like [`analyse`], but a known variable expanded unquoted splits into fields the way
/// the shell splits it: `S='sudo id'; $S` is the two words `sudo` and `id`.
pub fn analyse_fields(raw: &str, subs: &mut Vec<Substitution>, vars: &Vars) -> Vec<Arg> {
    match word::parse(raw, &options()) {
        Ok(pieces) => {
            let mut acc = Acc { arg: Arg::word(""), done: Vec::new(), split: false, vars };
            fold(raw, &pieces, &mut acc, subs, false, 0);
            let Acc { mut arg, mut done, split, .. } = acc;
            if !arg.literal {
                arg.text = raw.to_owned();
            }
            arg.home |= starts_with_home(raw);
            if !split || !arg.literal {
                return vec![arg];
            }
            if !arg.text.is_empty() {
                done.push(arg.text.clone());
            }
            done.into_iter().map(|text| Arg { text, home: false, ..arg.clone() }).collect()
        }
        // A word the word grammar refuses is still a word to the shell; keep its text
        // and call it dynamic, the worst case for every caller.
        Err(_) => {
            scan_for_substitutions(raw, subs, 0);
            vec![Arg { home: starts_with_home(raw), ..Arg::dynamic(raw) }]
        }
    }
}

/// The script a shell started with this word (`bash -c "git push origin $BRANCH"`)
/// reads, when the line shows all of it but variables from the environment: the word's
/// value with each such variable written back as `${NAME}`, for the script's own
/// analysis to take as an unknown word. The outer shell splices a value into the
/// script as text, so this holds only for names the line never assigns (their values
/// are the run's environment, which the agent does not write); a name the line
/// assigns in a way we cannot follow, a command's output (`$(…)`, spliced as code),
/// or any fancier expansion gives None: the script stays opaque.
pub fn script_text(raw: &str, vars: &Vars) -> Option<String> {
    let pieces = word::parse(raw, &options()).ok()?;
    let mut out = String::new();
    script_pieces(raw, &pieces, vars, false, &mut out).then_some(out)
}

fn script_pieces(source: &str, pieces: &[WordPieceWithSource], vars: &Vars, quoted: bool, out: &mut String) -> bool {
    for p in pieces {
        match &p.piece {
            WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => out.push_str(t),
            WordPiece::EscapeSequence(e) => out.push_str(e.strip_prefix('\\').unwrap_or(e)),
            WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                if !script_pieces(source, inner, vars, true, out) {
                    return false;
                }
            }
            WordPiece::ParameterExpansion(_) => {
                let slice = source.get(p.start_index..p.end_index).unwrap_or("");
                let Some(name) = simple_expansion(slice) else { return false };
                match vars.value(name) {
                    // Unquoted, a value with blanks would split the word itself.
                    Some(value) if quoted || !value.contains([' ', '\t', '\n']) => out.push_str(&value),
                    Some(_) => return false,
                    None if vars.is_environments(name) => out.push_str(&format!("${{{name}}}")),
                    None => return false,
                }
            }
            _ => return false,
        }
    }
    true
}

/// A word being put together: the current field, the fields already split off.
struct Acc<'v> {
    arg: Arg,
    done: Vec<String>,
    split: bool,
    vars: &'v Vars,
}

impl Acc<'_> {
    /// A known value expanded: quoted it is text; unquoted it splits on blanks and its
    /// `*`, `?`, `[` are patterns.
    fn expand(&mut self, value: &str, quoted: bool) {
        if quoted {
            self.arg.text.push_str(value);
            return;
        }
        if value.contains(['*', '?', '[']) {
            self.arg.glob = true;
        }
        let blanks = |c: char| c == ' ' || c == '\t' || c == '\n';
        if !value.contains(blanks) && !value.is_empty() {
            self.arg.text.push_str(value);
            return;
        }
        self.split = true;
        let mut pieces = value.split(blanks).peekable();
        while let Some(piece) = pieces.next() {
            self.arg.text.push_str(piece);
            if pieces.peek().is_some() && !self.arg.text.is_empty() {
                self.done.push(std::mem::take(&mut self.arg.text));
            }
        }
    }
}

fn starts_with_home(raw: &str) -> bool {
    let unquoted = raw.trim_start_matches('"');
    ["~", "$HOME", "${HOME}"].iter().any(|p| {
        unquoted.strip_prefix(p).is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('"'))
    })
}

const MAX_NESTING: u32 = 16;

/// brush's word parser backtracks on parentheses left open (an extglob's `+(`,
/// `@(`…), in time exponential in how deep they go: 27 of them inside a quoted `$(`
/// took over 10 s (the fuzzer's find). Text deeper than this is not given to it; what
/// follows each `$(` is analysed as a script instead, never skipped.
const MAX_PARSED_PARENS: usize = 8;

/// How deep the text's parentheses go, counting every one (quotes included: this
/// only decides whether the parser may be trusted with the text).
fn paren_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn fold(
    source: &str,
    pieces: &[WordPieceWithSource],
    acc: &mut Acc<'_>,
    subs: &mut Vec<Substitution>,
    quoted: bool,
    depth: u32,
) {
    for p in pieces {
        let arg = &mut acc.arg;
        let slice = source.get(p.start_index..p.end_index).unwrap_or("");
        match &p.piece {
            WordPiece::Text(t) => {
                if !quoted && (t.contains(['*', '?']) || t.find('[').is_some_and(|i| t[i..].contains(']'))) {
                    arg.glob = true;
                }
                arg.text.push_str(t);
            }
            WordPiece::SingleQuotedText(t) => arg.text.push_str(t),
            // bash ends the string at a NUL: `$'sudo\0'` is sudo.
            WordPiece::AnsiCQuotedText(t) => match ansi_c_decode(t) {
                Some(decoded) => arg.text.push_str(decoded.split('\0').next().unwrap_or("")),
                None => arg.literal = false,
            },
            WordPiece::EscapeSequence(e) => arg.text.push_str(e.strip_prefix('\\').unwrap_or(e)),
            WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                fold(source, inner, acc, subs, true, depth)
            }
            WordPiece::TildeExpansion(_) => {
                arg.literal = false;
                arg.home = true;
            }
            WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                arg.literal = false;
                subs.push(Substitution { script: s.clone() });
            }
            WordPiece::ParameterExpansion(_) => {
                if let Some(name) = simple_expansion(slice)
                    && let Some(value) = acc.vars.value(name)
                {
                    // `"$@"` is one word per parameter even in quotes: split it.
                    acc.expand(&value, quoted && name != "@");
                    continue;
                }
                acc.arg.literal = false;
                // `${x:-$(cmd)}` runs cmd: look inside the braces as if they were a word.
                let inner = slice.strip_prefix("${").and_then(|s| s.strip_suffix('}')).unwrap_or("");
                scan_for_substitutions(inner, subs, depth + 1);
            }
            WordPiece::ArithmeticExpression(expr) => {
                arg.literal = false;
                scan_for_substitutions(&expr.value, subs, depth + 1);
            }
        }
    }
}

/// Brace expansion, which bash does before anything else: `{sudo,reboot}` is the
/// two words `sudo reboot`, `/{usr,etc}` is `/usr /etc`. One level of braces in an
/// unquoted word is expanded; anything fancier (nesting, quotes mixed in) makes the
/// word dynamic rather than misread. `{1..3}` and a lone `{` stay as they are.
pub fn brace_expand(raw: &str, arg: Arg) -> Vec<Arg> {
    let bare = unquoted_skeleton(raw);
    let (Some(open), Some(close)) = (bare.find('{'), bare.rfind('}')) else { return vec![arg] };
    if close <= open || !bare[open..close].contains(',') {
        return vec![arg];
    }
    let (Some(open), Some(close)) = (raw.find('{'), raw.rfind('}')) else { return vec![arg] };
    let inner = &raw[open + 1..close.max(open + 1)];
    if close <= open || !inner.contains(',') {
        return vec![arg];
    }
    if !arg.literal || raw.contains(['\'', '"', '\\', '$', '`']) || inner.contains(['{', '}']) {
        return vec![Arg { literal: false, ..arg }];
    }
    let (head, tail) = (&raw[..open], &raw[close + 1..]);
    inner.split(',').map(|alt| Arg { text: format!("{head}{alt}{tail}"), ..arg.clone() }).collect()
}

/// The word without its quoted parts and escaped characters: what bash expands.
fn unquoted_skeleton(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' | '"' => {
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Decodes the inside of `$'…'` the way bash does (`$'\x72m'` is `rm`); None for an
/// escape we do not know, which makes the word dynamic rather than misread.
pub fn ansi_c_decode(raw: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            '0'..='7' => (8, 3),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            'c' => {
                let ctl = chars.next()?;
                out.push(char::from_u32((ctl.to_ascii_uppercase() as u32) ^ 0x40)?);
                continue;
            }
            _ => return None,
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(e);
        }
        while digits.len() < max {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => digits.push(chars.next()?),
                _ => break,
            }
        }
        out.push(char::from_u32(u32::from_str_radix(&digits, radix).ok()?)?);
    }
    Some(out)
}

/// Finds the command substitutions in text that is not a word of its own (the inside of
/// `${…}` or `$((…))`, a heredoc body). Past the nesting limit, or when the text does not
/// parse, whatever follows a `$(` or a backtick is taken as a script anyway: a
/// substitution we cannot delimit is still analysed, never skipped.
pub fn scan_for_substitutions(text: &str, subs: &mut Vec<Substitution>, depth: u32) {
    if !text.contains("$(") && !text.contains('`') {
        return;
    }
    if depth < MAX_NESTING
        && paren_depth(text) <= MAX_PARSED_PARENS
        && let Ok(pieces) = word::parse(text, &options())
    {
        let vars = Vars::default();
        let mut scratch = Acc { arg: Arg::word(""), done: Vec::new(), split: false, vars: &vars };
        fold(text, &pieces, &mut scratch, subs, false, depth);
        return;
    }
    for (i, _) in text.match_indices("$(").chain(text.match_indices('`')) {
        let start = if text[i..].starts_with('`') { i + 1 } else { i + 2 };
        subs.push(Substitution { script: text[start..].to_owned() });
    }
}

/// Finds the substitutions in a heredoc body that expands.
pub fn heredoc_substitutions(body: &str, subs: &mut Vec<Substitution>) {
    if !body.contains("$(") && !body.contains('`') && !body.contains("${") {
        return;
    }
    if paren_depth(body) > MAX_PARSED_PARENS {
        return scan_for_substitutions(body, subs, MAX_NESTING);
    }
    match word::parse_heredoc(body, &options()) {
        Ok(pieces) => {
            let vars = Vars::default();
            let mut scratch = Acc { arg: Arg::word(""), done: Vec::new(), split: false, vars: &vars };
            fold(body, &pieces, &mut scratch, subs, true, 0);
        }
        Err(_) => scan_for_substitutions(body, subs, MAX_NESTING),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(raw: &str) -> (Arg, Vec<String>) {
        let mut subs = Vec::new();
        let a = analyse(raw, &mut subs, &Vars::default());
        (a, subs.into_iter().map(|s| s.script).collect())
    }

    #[test]
    fn parentheses_left_open_do_not_make_the_parser_backtrack_for_ever() {
        // The fuzzer's find: before the guard this took over 10 s (2^n in the parens).
        let line = format!("printf -v PS3 '$(touch pw g+{})'; set -x; :", "(".repeat(40));
        let verdict = crate::command::check(&line, crate::Mode::ALL[0]);
        // The substitution is still analysed: `touch` is seen.
        assert!(verdict.parts.iter().any(|p| p.part.argv.first().is_some_and(|a| a == "touch")), "{verdict:?}");
        assert_eq!(paren_depth("a((b)c(d))"), 2);
        assert_eq!(paren_depth("))(("), 2);
        let mut subs = Vec::new();
        heredoc_substitutions(&format!("$(rm -rf x {})\n", "(".repeat(40)), &mut subs);
        assert!(
            subs.iter().any(|s| s.script.starts_with("rm -rf x")),
            "{:?}",
            subs.iter().map(|s| &s.script).collect::<Vec<_>>()
        );
    }

    #[test]
    fn quoting_is_removed_from_literal_words() {
        assert_eq!(arg("'git'").0.text, "git");
        assert_eq!(arg("\"pu\"sh").0.text, "push");
        assert_eq!(arg("pu\\sh").0.text, "push");
        assert!(arg("'a b'").0.literal);
    }

    #[test]
    fn expansions_make_a_word_dynamic_and_keep_its_source() {
        let (a, _) = arg("$CMD");
        assert!(!a.literal);
        assert_eq!(a.text, "$CMD");
        assert!(arg("\"$HOME\"").0.home);
        assert!(arg("~").0.home);
        assert!(arg("~/").0.home);
        assert!(!arg("$HOMEWORK").0.home);
    }

    #[test]
    fn ansi_c_quoting_is_decoded() {
        assert_eq!(arg("$'\\x72m'").0.text, "rm");
        assert_eq!(arg("$'\\162m'").0.text, "rm");
        assert_eq!(arg("$'\\u0072m'").0.text, "rm");
        assert_eq!(arg("$'a\\tb'").0.text, "a\tb");
        assert!(arg("$'\\x72m'").0.literal);
        assert!(!arg("$'\\q'").0.literal);
    }

    #[test]
    fn braces_expand_into_words() {
        let expand =
            |raw: &str| brace_expand(raw, arg(raw).0).into_iter().map(|a| (a.text, a.literal)).collect::<Vec<_>>();
        assert_eq!(expand("{sudo,reboot}"), vec![("sudo".into(), true), ("reboot".into(), true)]);
        assert_eq!(expand("/{usr,etc}"), vec![("/usr".into(), true), ("/etc".into(), true)]);
        assert_eq!(expand("{a}"), vec![("{a}".into(), true)]);
        assert_eq!(expand("x"), vec![("x".into(), true)]);
        assert!(!expand("{a,{b,c}}")[0].1);
        assert!(!expand("'a'{b,c}")[0].1);
        assert_eq!(expand("'{print $1,$2}'"), vec![("{print $1,$2}".into(), true)]);
        assert_eq!(arg("$'sudo\\0x'").0.text, "sudo");
    }

    #[test]
    fn globs_count_only_unquoted() {
        assert!(arg("*.rs").0.glob);
        assert!(!arg("'*.rs'").0.glob);
        assert!(!arg("\"a*\"").0.glob);
    }

    #[test]
    fn substitutions_are_found_wherever_they_hide() {
        assert_eq!(arg("$(git push)").1, vec!["git push"]);
        assert_eq!(arg("`git push`").1, vec!["git push"]);
        assert_eq!(arg("\"x$(rm -rf /)y\"").1, vec!["rm -rf /"]);
        assert_eq!(arg("${X:-$(rm -rf /)}").1, vec!["rm -rf /"]);
        assert_eq!(arg("$(( $(id -u) + 1 ))").1, vec!["id -u"]);
        assert_eq!(arg("${A:-${B:-`reboot`}}").1, vec!["reboot"]);
    }

    #[test]
    fn a_scripts_text_keeps_environment_names_and_splices_known_values() {
        let mut vars = Vars::new_shell(None);
        assert_eq!(script_text("\"git push origin $BRANCH\"", &vars).as_deref(), Some("git push origin ${BRANCH}"));
        assert_eq!(script_text("\"grep -rn \\\"$P\\\" src\"", &vars).as_deref(), Some("grep -rn \"${P}\" src"));
        vars.assign("X", Some("; sudo id"), true);
        assert_eq!(script_text("\"ls $X\"", &vars).as_deref(), Some("ls ; sudo id"), "spliced as code");
        vars.assign("Y", None, true);
        assert_eq!(script_text("\"ls $Y\"", &vars), None, "assigned in a way we cannot follow");
        assert_eq!(script_text("\"ls $(cat dirs)\"", &vars), None, "a command's output");
        assert_eq!(script_text("\"ls ${D:-.}\"", &vars), None, "more than a name");
        vars.forget_all();
        assert_eq!(script_text("\"ls $Z\"", &vars), None, "after anything that may assign any name");
    }
}
