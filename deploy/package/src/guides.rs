//! The docs' guides as scripts: every `sh` block of a guide is either run (` ```sh run `)
//! or shown with the reason it cannot be (` ```sh norun: REASON `); see docs/README.md.

use crate::markdown::{MarkdownError, fences};

/// What a test runs for one guide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuideScript {
    /// The runnable blocks in order, each headed by a comment naming its line.
    pub script: String,
    pub runnable: usize,
    pub shown_only: usize,
    /// `<!-- docs-test: no-supervisor -->`: the guide starts its own (the install guide).
    pub no_supervisor: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuideError {
    #[error(transparent)]
    Markdown(#[from] MarkdownError),
    #[error("line {line}: a shell block must be marked `sh run` or `sh norun: REASON`, found {info:?}")]
    Unmarked { line: usize, info: String },
    #[error("line {line}: `sh norun:` needs a reason after the colon")]
    NoReason { line: usize },
}

const NO_SUPERVISOR: &str = "<!-- docs-test: no-supervisor -->";
/// Info strings that are a shell's, whichever word the writer chose.
const SHELLS: [&str; 5] = ["sh", "bash", "shell", "console", "zsh"];

pub fn script(name: &str, markdown: &str) -> Result<GuideScript, GuideError> {
    let mut out = GuideScript {
        script: String::new(),
        runnable: 0,
        shown_only: 0,
        no_supervisor: markdown.lines().any(|l| l.trim() == NO_SUPERVISOR),
    };
    for fence in fences(markdown)? {
        let mut words = fence.info.split_whitespace();
        let Some(language) = words.next().filter(|w| SHELLS.contains(w)) else { continue };
        let rest: Vec<&str> = words.collect();
        match (language, rest.as_slice()) {
            ("sh", ["run"]) => {
                out.script.push_str(&format!("# {name}:{}\n{}\n", fence.line, fence.body));
                out.runnable += 1;
            }
            ("sh", [first, reason @ ..]) if first.starts_with("norun:") => {
                let inline = first.trim_start_matches("norun:");
                if inline.is_empty() && reason.is_empty() {
                    return Err(GuideError::NoReason { line: fence.line });
                }
                out.shown_only += 1;
            }
            _ => return Err(GuideError::Unmarked { line: fence.line, info: fence.info.clone() }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_blocks_are_joined_in_order_with_their_lines() {
        let text = "# G\n\n```sh run\nccctl status\n```\n\n```text\nok\n```\n\n```sh norun: needs systemd as PID 1\nsystemctl start x\n```\n\n```sh run\necho two\n```\n";
        let guide = script("g.md", text).unwrap();
        assert_eq!(guide.script, "# g.md:3\nccctl status\n\n# g.md:15\necho two\n\n");
        assert_eq!((guide.runnable, guide.shown_only, guide.no_supervisor), (2, 1, false));
    }

    #[test]
    fn an_unmarked_shell_block_is_refused() {
        for info in ["sh", "bash", "console", "sh runn", "bash run"] {
            let text = format!("```{info}\nx\n```\n");
            assert_eq!(script("g.md", &text), Err(GuideError::Unmarked { line: 1, info: info.into() }), "{info}");
        }
    }

    #[test]
    fn norun_needs_a_reason() {
        assert_eq!(script("g.md", "```sh norun:\nx\n```\n"), Err(GuideError::NoReason { line: 1 }));
        assert_eq!(script("g.md", "```sh norun:macOS\nx\n```\n").unwrap().shown_only, 1);
    }

    #[test]
    fn the_marker_asks_for_no_supervisor() {
        let guide = script("g.md", "<!-- docs-test: no-supervisor -->\n# Install\n").unwrap();
        assert!(guide.no_supervisor);
        assert_eq!(guide.runnable, 0);
    }
}
