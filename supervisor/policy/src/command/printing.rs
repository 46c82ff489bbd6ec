//! What `echo` and `printf` print when their words are literal, so that text piped into
//! a shell (`printf 'rm -rf /' | bash`) is analysed like a heredoc would be. Where the
//! output depends on something this does not model, the answer is None (opaque).

use brush_parser::ast::{Command, CommandPrefixOrSuffixItem, CompoundList, IoRedirect};

use super::classify;
use super::vars::Vars;
use super::words::{self, ansi_c_decode};

/// bash's builtin echo: `-n`, `-e` and `-E` options (in any cluster), then the words
/// joined by spaces. With `-e`, `\c` ends the output.
pub fn echo(args: &[String]) -> String {
    let mut escapes = false;
    let mut words = args;
    while let Some(first) = words.first() {
        let flags = first.strip_prefix('-').filter(|f| !f.is_empty() && f.chars().all(|c| "neE".contains(c)));
        let Some(flags) = flags else { break };
        for c in flags.chars() {
            match c {
                'e' => escapes = true,
                'E' => escapes = false,
                _ => {}
            }
        }
        words = &words[1..];
    }
    let joined = words.join(" ");
    if !escapes {
        return joined;
    }
    let stopped = joined.split("\\c").next().unwrap_or("");
    ansi_c_decode(stopped).unwrap_or_else(|| stopped.to_owned())
}

/// printf FORMAT [ARG…]: the format is reused until the arguments run out. `%s`, `%b`,
/// `%d`, `%c` and `%%` are followed; anything fancier (widths, `%q`) is None.
pub fn printf(args: &[String]) -> Option<String> {
    let (format, mut rest) = match args.split_first()? {
        (f, r) if f == "--" => (r.first()?, r.get(1..).unwrap_or(&[])),
        (f, _) if f == "-v" => return None,
        (f, r) => (f, r),
    };
    let mut out = String::new();
    loop {
        let mut consumed = false;
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let conversion = chars.next()?;
                    if conversion == '%' {
                        out.push('%');
                        continue;
                    }
                    let (arg, after) = rest.split_first().map_or(("", &[][..]), |(a, r)| (a.as_str(), r));
                    consumed |= !rest.is_empty();
                    rest = after;
                    match conversion {
                        's' | 'd' | 'i' | 'u' => out.push_str(arg),
                        'c' => out.extend(arg.chars().next()),
                        'b' => out.push_str(&ansi_c_decode(arg)?),
                        _ => return None,
                    }
                }
                '\\' => {
                    let e = chars.next()?;
                    out.push_str(&ansi_c_decode(&format!("\\{e}"))?);
                }
                other => out.push(other),
            }
        }
        if rest.is_empty() || !consumed {
            return Some(out);
        }
    }
}

/// The one simple command a list is made of, if that is all it is.
pub fn single_command(list: &CompoundList) -> Option<&Command> {
    let [item] = list.0.as_slice() else { return None };
    if !item.0.additional.is_empty() {
        return None;
    }
    match item.0.first.seq.as_slice() {
        [only] => Some(only),
        _ => None,
    }
}

/// What a command prints, when the line shows it: a literal `echo` or `printf`, or
/// `cat` of a heredoc or of what it is piped. None for anything else.
pub fn literal_output(command: &Command, piped: Option<&str>) -> Option<String> {
    let Command::Simple(simple) = command else { return None };
    let mut argv = Vec::new();
    let mut stdin: Option<String> = None;
    let items = simple.prefix.iter().flat_map(|p| p.0.iter()).chain(simple.suffix.iter().flat_map(|s| s.0.iter()));
    for item in items {
        match item {
            CommandPrefixOrSuffixItem::Word(w) => argv.push(w),
            CommandPrefixOrSuffixItem::IoRedirect(IoRedirect::HereDocument(_, doc)) if !doc.requires_expansion => {
                stdin = Some(doc.doc.value.clone())
            }
            CommandPrefixOrSuffixItem::IoRedirect(IoRedirect::HereString(_, w)) => {
                stdin = Some(literal_word(&w.value)? + "\n")
            }
            // Output sent elsewhere, or anything else: we do not say what it prints.
            _ => return None,
        }
    }
    let name = literal_word(&simple.word_or_name.as_ref()?.value)?;
    let args: Vec<String> = argv.iter().map(|w| literal_word(&w.value)).collect::<Option<_>>()?;
    match classify::basename(&name) {
        "echo" => Some(echo(&args)),
        "printf" => printf(&args),
        "cat" if args.is_empty() || args.iter().all(|a| a == "-") => stdin.or(piped.map(str::to_owned)),
        _ => None,
    }
}

fn literal_word(raw: &str) -> Option<String> {
    let arg = words::analyse(raw, &mut Vec::new(), &Vars::default());
    (arg.literal && !arg.glob).then_some(arg.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[&str]) -> Vec<String> {
        ws.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn echo_prints_its_words() {
        assert_eq!(echo(&words(&["sudo", "id"])), "sudo id");
        assert_eq!(echo(&words(&["-n", "sudo id"])), "sudo id");
        assert_eq!(echo(&words(&["-e", "rm -rf /\\nls"])), "rm -rf /\nls");
        assert_eq!(echo(&words(&["-ne", "a\\cb"])), "a");
        assert_eq!(echo(&words(&["-x", "a"])), "-x a");
    }

    #[test]
    fn printf_follows_simple_formats() {
        assert_eq!(printf(&words(&["rm -rf /"])).as_deref(), Some("rm -rf /"));
        assert_eq!(printf(&words(&["%s %s\\n", "sudo", "id"])).as_deref(), Some("sudo id\n"));
        assert_eq!(printf(&words(&["%s\\n", "a", "b"])).as_deref(), Some("a\nb\n"));
        assert_eq!(printf(&words(&["100%%"])).as_deref(), Some("100%"));
        assert_eq!(printf(&words(&["%5s", "x"])), None);
        assert_eq!(printf(&words(&["-v", "x", "y"])), None);
    }
}
