//! The man pages: ccctl(1) and one page per subcommand (`ccctl-run-start(1)`, as git
//! does), cc-supervisor(8) from clap, and control-center.toml(5) from
//! docs/reference/config.md, so that `man` says what the docs say.

use std::io;
use std::path::Path;

use roff::{Roff, bold, roman};

use crate::config_reference::{self, DocumentedDefault, ReferenceError};

/// The configuration reference, compiled in: the config file's page is made from it.
pub const CONFIG_REFERENCE: &str = include_str!("../../../docs/reference/config.md");

#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("cannot write the man pages into {dir}: {source}")]
    Write { dir: String, source: io::Error },
    #[error("docs/reference/config.md: {0}")]
    Reference(#[from] ReferenceError),
}

/// Writes every page into `dir/man1`, `dir/man5` and `dir/man8`.
pub fn write_all(dir: &Path) -> Result<(), ManError> {
    let write_error = |source| ManError::Write { dir: dir.display().to_string(), source };
    for section in ["man1", "man5", "man8"] {
        std::fs::create_dir_all(dir.join(section)).map_err(write_error)?;
    }
    clap_mangen::generate_to(cc_client::cli::command(), dir.join("man1")).map_err(write_error)?;
    let mut supervisor = Vec::new();
    clap_mangen::Man::new(cc_supervisor::cli::command()).section("8").render(&mut supervisor).map_err(write_error)?;
    std::fs::write(dir.join("man8/cc-supervisor.8"), supervisor).map_err(write_error)?;
    std::fs::write(dir.join("man5/control-center.toml.5"), config_page(CONFIG_REFERENCE)?).map_err(write_error)?;
    Ok(())
}

/// control-center.toml(5): every documented key under its table, with its default.
pub fn config_page(reference: &str) -> Result<String, ReferenceError> {
    let rows = config_reference::parse(reference)?;
    let mut page = Roff::new();
    page.control("TH", ["CONTROL-CENTER.TOML", "5", "", "Control Center"])
        .control("SH", ["NAME"])
        .text([roman("control-center.toml \\- the Control Center supervisor's configuration file")])
        .control("SH", ["SYNOPSIS"])
        .text([bold("$DATA/config.toml"), roman(", or the file given to "), bold("cc-supervisor --config")])
        .control("SH", ["DESCRIPTION"])
        .text([roman(
            "A TOML file read once at start-up. Every key is known: a key the supervisor does not know, \
             or a value of the wrong kind, stops start-up with a one-line error that names the line. \
             The [credentials] tables are the exception: the supervisor hands them to cc-broker, which \
             checks them as it starts and fails (and is restarted, then reported failed) when they are wrong. \
             The defaults are below. Upper-case names in a key (NAME, HOST) stand for a name of your choosing.",
        )]);
    let mut section = String::new();
    for row in &rows {
        if row.section != section {
            section = row.section.clone();
            page.control("SS", [plain(&section).as_str()]);
        }
        let default = match &row.default {
            DocumentedDefault::Literal(literal) => format!("default: {literal}"),
            DocumentedDefault::Words(words) => plain(words),
        };
        page.control("TP", [] as [&str; 0])
            .text([bold(row.key.as_str()), roman(format!(" ({default})"))])
            .text([roman(plain(&row.meaning))]);
    }
    page.control("SH", ["SEE ALSO"])
        .text([roman("cc-supervisor(8), ccctl(1); docs/reference/config.md in the sources")]);
    Ok(page.render())
}

/// Markdown inline text as plain words: code spans unmarked, links as their text. (`*`
/// stays: it is a wildcard in allowlist entries far more often than emphasis.)
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' => {}
            '[' => {
                let label: String = chars.by_ref().take_while(|c| *c != ']').collect();
                out.push_str(&label);
                if chars.peek() == Some(&'(') {
                    chars.by_ref().take_while(|c| *c != ')').for_each(drop);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_plain_words() {
        assert_eq!(
            plain("see [egress](../concepts/egress.md), `x` and `*.cdn.example`"),
            "see egress, x and *.cdn.example"
        );
    }

    #[test]
    fn the_config_page_has_every_documented_key() {
        let page = config_page(CONFIG_REFERENCE).unwrap();
        let rows = config_reference::parse(CONFIG_REFERENCE).unwrap();
        assert!(!rows.is_empty());
        for row in rows {
            assert!(page.contains(&row.key), "{} is missing from the page", row.key);
        }
    }
}
