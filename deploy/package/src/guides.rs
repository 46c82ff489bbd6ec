//! The docs' guides as scripts: every `sh` block of a guide is either run (` ```sh run `)
//! or shown with the reason it cannot be (` ```sh norun: REASON `); see docs/README.md.
//! A `text` block right after a run block is the output a reader sees, which the test
//! compares with what the block printed (`crate::shown`).

use crate::markdown::{Fence, MarkdownError, fences};

/// What a test runs for one guide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuideScript {
    /// The runnable blocks in order, each headed by a comment naming its line and a
    /// command printing its [`marker`], so that its output can be told apart.
    pub script: String,
    /// The runnable blocks, with the output each shows.
    pub blocks: Vec<RunBlock>,
    pub runnable: usize,
    pub shown_only: usize,
    /// `<!-- docs-test: no-supervisor -->`: the guide starts its own (the install guide).
    pub no_supervisor: bool,
    /// `<!-- docs-test: unprivileged -->`: its reader is not root (the install guide's
    /// user service and data directory are a person's own).
    pub unprivileged: bool,
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

/// A runnable block: `NAME:LINE` of its opening fence, and the `text` block after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBlock {
    pub at: String,
    pub shown: Option<String>,
}

/// The line a block's script prints before it runs; `crate::shown::split` cuts there.
pub fn marker(at: &str) -> String {
    format!("@@docs-block {at}@@")
}

const NO_SUPERVISOR: &str = "<!-- docs-test: no-supervisor -->";
const UNPRIVILEGED: &str = "<!-- docs-test: unprivileged -->";
/// Info strings that are a shell's, whichever word the writer chose.
const SHELLS: [&str; 5] = ["sh", "bash", "shell", "console", "zsh"];

pub fn script(name: &str, markdown: &str) -> Result<GuideScript, GuideError> {
    let mut out = GuideScript {
        script: String::new(),
        blocks: Vec::new(),
        runnable: 0,
        shown_only: 0,
        no_supervisor: markdown.lines().any(|l| l.trim() == NO_SUPERVISOR),
        unprivileged: markdown.lines().any(|l| l.trim() == UNPRIVILEGED),
    };
    let all = fences(markdown)?;
    let lines: Vec<&str> = markdown.lines().collect();
    for (index, fence) in all.iter().enumerate() {
        let mut words = fence.info.split_whitespace();
        let Some(language) = words.next().filter(|w| SHELLS.contains(w)) else { continue };
        let rest: Vec<&str> = words.collect();
        match (language, rest.as_slice()) {
            ("sh", ["run"]) => {
                let at = format!("{name}:{}", fence.line);
                let shown = all.get(index + 1).filter(|next| shows_output_of(next, fence, &lines));
                out.script.push_str(&format!("# {at}\necho '{}'\n{}\n", marker(&at), fence.body));
                out.blocks.push(RunBlock { at, shown: shown.map(|s| s.body.clone()) });
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

/// Whether `next` is a `text` block with nothing but blank lines between it and `run`.
fn shows_output_of(next: &Fence, run: &Fence, lines: &[&str]) -> bool {
    next.info == "text" && lines[run.end..next.line - 1].iter().all(|l| l.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_blocks_are_joined_in_order_with_their_lines() {
        let text = "# G\n\n```sh run\nccctl status\n```\n\n```text\nok\n```\n\n```sh norun: needs systemd as PID 1\nsystemctl start x\n```\n\n```sh run\necho two\n```\n";
        let guide = script("g.md", text).unwrap();
        assert_eq!(
            guide.script,
            "# g.md:3\necho '@@docs-block g.md:3@@'\nccctl status\n\n# g.md:15\necho '@@docs-block g.md:15@@'\necho two\n\n"
        );
        assert_eq!(
            guide.blocks,
            vec![
                RunBlock { at: "g.md:3".into(), shown: Some("ok\n".into()) },
                RunBlock { at: "g.md:15".into(), shown: None }
            ]
        );
        assert_eq!((guide.runnable, guide.shown_only, guide.no_supervisor), (2, 1, false));
    }

    #[test]
    fn only_a_text_block_right_after_a_run_block_is_its_output() {
        let text = "```sh run\na\n```\nwords\n```text\nnot a's\n```\n```sh run\nb\n```\n\n\n```text\nb's\n```\n";
        let shown: Vec<Option<String>> = script("g.md", text).unwrap().blocks.into_iter().map(|b| b.shown).collect();
        assert_eq!(shown, vec![None, Some("b's\n".into())]);
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
        let guide =
            script("g.md", "<!-- docs-test: no-supervisor -->\n<!-- docs-test: unprivileged -->\n# Install\n").unwrap();
        assert!(guide.no_supervisor && guide.unprivileged);
        assert_eq!(guide.runnable, 0);
    }
}
