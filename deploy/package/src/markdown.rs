//! The little Markdown the docs checks need: fenced code blocks with their info strings,
//! and pipe tables. Pure, so that it is tested on its own.

/// A fenced code block: its info string (what follows the opening fence), its body, and
/// the 1-based lines of its opening and closing fences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub info: String,
    pub body: String,
    pub line: usize,
    pub end: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MarkdownError {
    #[error("line {0}: a code block opened here is never closed")]
    Unclosed(usize),
}

/// Every fenced code block (``` or ~~~, three or more), in order.
pub fn fences(text: &str) -> Result<Vec<Fence>, MarkdownError> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(marker) = fence_marker(trimmed) {
                    let info = trimmed[marker.len()..].trim().to_owned();
                    open = Some((marker, info, index + 1, String::new()));
                }
            }
            Some((marker, _, _, body)) => {
                let closes = trimmed.starts_with(marker.as_str())
                    && trimmed.trim_end().chars().all(|c| c == marker.chars().next().unwrap_or('`'));
                if closes {
                    if let Some((_, info, line, body)) = open.take() {
                        out.push(Fence { info, body, line, end: index + 1 });
                    }
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    match open {
        Some((_, _, line, _)) => Err(MarkdownError::Unclosed(line)),
        None => Ok(out),
    }
}

fn fence_marker(line: &str) -> Option<String> {
    let first = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run: String = line.chars().take_while(|c| *c == first).collect();
    (run.len() >= 3).then_some(run)
}

/// The cells of a pipe-table row, trimmed; a `|` inside backticks is part of its cell.
/// None for a line that is not a table row.
pub fn table_row(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    let inner = line.strip_prefix('|')?.strip_suffix('|')?;
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    cells.push(cell.trim().to_owned());
    Some(cells)
}

/// Whether a row is a table's `|---|---|` separator.
pub fn is_separator(cells: &[String]) -> bool {
    cells.iter().all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_keep_their_info_and_line() {
        let text = "# t\n\n```sh run\necho a\n```\n\ntext\n\n~~~text\nout\n~~~\n";
        let found = fences(text).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0], Fence { info: "sh run".into(), body: "echo a\n".into(), line: 3, end: 5 });
        assert_eq!(found[1].info, "text");
        assert_eq!(found[1].body, "out\n");
    }

    #[test]
    fn a_longer_fence_holds_a_shorter_one() {
        let text = "````md\n```sh\nx\n```\n````\n";
        let found = fences(text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].body, "```sh\nx\n```\n");
    }

    #[test]
    fn an_unclosed_fence_is_an_error_with_its_line() {
        assert_eq!(fences("a\n```sh\necho\n"), Err(MarkdownError::Unclosed(2)));
    }

    #[test]
    fn table_cells_keep_pipes_inside_code() {
        let row = table_row("| `a.b` | `\"x|y\"` | one | two |").unwrap();
        assert_eq!(row, ["`a.b`", "`\"x|y\"`", "one", "two"]);
        assert!(table_row("not a row").is_none());
        assert!(is_separator(&table_row("|---|:--:|").unwrap()));
        assert!(!is_separator(&row));
    }
}
