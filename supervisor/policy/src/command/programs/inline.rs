//! Interpreters. Their programs are opaque, but inline code the line shows (`python3 -c`,
//! `node -e`, `perl -e`, a heredoc fed to `python3`) is searched for the calls that run
//! a shell command with a literal string, `os.system("sudo id")` or
//! `execSync('rm -rf /')`, and each such command is analysed as a script. What is
//! computed stays unseen: the part is opaque either way.

use super::super::Part;
use super::super::walk::Analyzer;
use super::super::words::Arg;
use super::packages;
use crate::effect::{CommandClass as C, Effect as E};

/// Functions, across languages, whose first argument is a command to run.
const RUNS_COMMANDS: &[&str] = &[
    "system",
    "popen",
    "run",
    "call",
    "check_call",
    "check_output",
    "Popen",
    "getoutput",
    "getstatusoutput",
    "spawn",
    "spawnSync",
    "exec",
    "execSync",
    "execFile",
    "execFileSync",
    "execv",
    "execvp",
    "execl",
    "execlp",
    "shell_exec",
    "passthru",
    "proc_open",
    "capture2",
    "capture2e",
    "capture3",
    "popen3",
    "spawnv",
    "spawnvp",
    "$",
];

/// Options whose value is inline code, per interpreter family.
fn code_options(name: &str) -> &'static [&'static str] {
    if name.starts_with("python") || name.starts_with("pypy") {
        &["-c"]
    } else {
        match name {
            "node" | "nodejs" | "bun" => &["-e", "--eval", "-p", "--print"],
            "perl" | "ruby" => &["-e", "-E"],
            "php" => &["-r"],
            "lua" | "luajit" => &["-e"],
            _ => &["-c", "-e", "-E", "--eval", "-p", "--print", "-r"],
        }
    }
}

pub fn interpreter(an: &mut Analyzer, name: &str, args: &[Arg], stdin_text: Option<&str>, part: &mut Part) {
    let first = args.first().map(|a| a.text.as_str()).unwrap_or("");
    if matches!(first, "--version" | "-V" | "-v" | "--help" | "-h") && args.len() == 1 {
        part.add(C::ReadOnly, "");
        return;
    }
    if (name.starts_with("python") || name.starts_with("pypy"))
        && let Some(pos) = args.iter().position(|a| a.text.starts_with("-m"))
    {
        // `-m pip` and `-mpip` alike; `rest` is what follows the module name.
        let attached = args[pos].text.strip_prefix("-m").filter(|m| !m.is_empty());
        let (module, rest) = match attached {
            Some(m) => (m, args.get(pos + 1..).unwrap_or(&[])),
            None => (args.get(pos + 1).map(|a| a.text.as_str()).unwrap_or(""), args.get(pos + 2..).unwrap_or(&[])),
        };
        if module == "pip" || module == "ensurepip" {
            packages::pip(rest, part);
            return;
        }
        if module == "twine" && rest.first().is_some_and(|a| a.is("upload")) {
            part.add(C::RemoteMutation, "twine upload publishes a package");
            part.effects.insert(E::PublishPackage);
            return;
        }
    }
    let options = code_options(name);
    let mut code: Vec<&str> = Vec::new();
    let mut inline = false;
    for (i, a) in args.iter().enumerate() {
        let t = a.text.as_str();
        if options.contains(&t) {
            inline = true;
            if let Some(v) = args.get(i + 1).filter(|v| v.literal) {
                code.push(&v.text);
            }
        } else if let Some(attached) = options.iter().filter(|o| o.len() == 2).find_map(|o| t.strip_prefix(o))
            && !attached.is_empty()
            && a.literal
            && !t.starts_with("--")
        {
            inline = true;
            code.push(attached);
        }
    }
    let from_stdin = !inline && args.iter().all(|a| a.text.starts_with('-'));
    if let Some(text) = stdin_text.filter(|_| from_stdin) {
        code.push(text);
    }
    let backticks = matches!(name, "perl" | "ruby" | "php");
    for c in code {
        for command in embedded_commands(c, backticks) {
            an.shell_script(&command, "inline code", None);
        }
    }
    if inline {
        part.add(C::Opaque, format!("{name} runs inline code"));
    } else {
        part.add(C::Opaque, format!("{name} runs a program we cannot see into"));
    }
}

/// The literal commands inline code hands to a shell or to exec.
pub fn embedded_commands(code: &str, backticks: bool) -> Vec<String> {
    const MAX_COMMANDS: usize = 32;
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() && found.len() < MAX_COMMANDS {
        let c = bytes[i] as char;
        if backticks
            && let Some(opener) = ["qx{", "qx(", "qx/", "%x(", "%x{"].iter().find(|o| code[i..].starts_with(**o))
        {
            let close = match opener.as_bytes()[2] {
                b'{' => '}',
                b'(' => ')',
                _ => '/',
            };
            if let Some(end) = code[i + 3..].find(close) {
                found.push(code[i + 3..i + 3 + end].to_owned());
                i += 3 + end + 1;
                continue;
            }
        }
        if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < bytes.len()
                && ((bytes[i] as char).is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'$')
            {
                i += 1;
            }
            let ident = &code[start..i];
            let rest = code[i..].trim_start();
            if RUNS_COMMANDS.contains(&ident)
                && let Some(args) = rest.strip_prefix('(')
                && let Some(command) = call_arguments(args)
            {
                found.push(command);
            }
            continue;
        }
        if backticks
            && c == '`'
            && let Some(end) = code[i + 1..].find('`')
        {
            found.push(code[i + 1..i + 1 + end].to_owned());
            i += end + 2;
            continue;
        }
        i += c.len_utf8().max(1);
        while i < bytes.len() && !code.is_char_boundary(i) {
            i += 1;
        }
    }
    found
}

/// `("sudo id")`, `(['sudo', 'id'])`, `('sudo', ['id'])`: the command the call names.
fn call_arguments(text: &str) -> Option<String> {
    let text = text.trim_start();
    if let Some(list) = text.strip_prefix('[') {
        return Some(string_list(list)?.0.join(" "));
    }
    let (first, rest) = string_literal(text)?;
    let mut words = vec![first];
    let rest = rest.trim_start();
    if let Some(more) = rest.strip_prefix(',').map(str::trim_start).and_then(|r| r.strip_prefix('['))
        && let Some((list, _)) = string_list(more)
    {
        words.extend(list);
    }
    Some(words.join(" "))
}

/// Quoted strings separated by commas up to `]`.
fn string_list(text: &str) -> Option<(Vec<String>, &str)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix(']') {
            return Some((out, after));
        }
        let (word, after) = string_literal(rest)?;
        out.push(shell_quote(&word));
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// A string literal at the start of `text` (an `f`/`r`/`b` prefix allowed), unescaped,
/// and what follows it.
fn string_literal(text: &str) -> Option<(String, &str)> {
    let text = text.trim_start_matches(['f', 'r', 'b', 'u', 'F', 'R', 'B', 'U']);
    let quote = text.chars().next().filter(|q| matches!(q, '"' | '\'' | '`'))?;
    let triple: String = std::iter::repeat_n(quote, 3).collect();
    let (body_start, closing) = if text.starts_with(&triple) { (3, triple.as_str()) } else { (1, &text[..1]) };
    let body = &text[body_start..];
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        if body[i..].starts_with(closing) {
            return Some((out, &body[i + closing.len()..]));
        }
        if c == '\\' {
            match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, e)) => out.push(e),
                None => return None,
            }
        } else {
            out.push(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_handed_to_a_shell_are_found() {
        assert_eq!(embedded_commands(r#"import os; os.system("sudo id")"#, false), ["sudo id"]);
        assert_eq!(embedded_commands("import subprocess; subprocess.run(['rm', '-rf', '/'])", false), ["rm -rf /"]);
        assert_eq!(embedded_commands("require('child_process').execSync('sudo id')", false), ["sudo id"]);
        assert_eq!(embedded_commands("spawn('sudo', ['id', '-u'])", false), ["sudo id -u"]);
        assert_eq!(embedded_commands("print `sudo id`", true), ["sudo id"]);
        assert_eq!(embedded_commands("my $x = qx{reboot};", true), ["reboot"]);
        assert_eq!(embedded_commands("os.system(cmd)", false), Vec::<String>::new());
        assert_eq!(embedded_commands("print('hello')", false), Vec::<String>::new());
        assert_eq!(embedded_commands(r#"os.system("echo \"a b\"")"#, false), [r#"echo "a b""#]);
        assert_eq!(embedded_commands("subprocess.run(['echo', 'a b'])", false), ["echo 'a b'"]);
    }
}
