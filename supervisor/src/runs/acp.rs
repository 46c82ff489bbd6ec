//! The acp adapter's parts that stay in the supervisor: the agent's command line and
//! a terminal's end and output window. Everything the agent says is read by the run's
//! runner (`cc-runner`'s `adapters::acp`); the link to it is [`super::acp_link`].

/// The longest `--agent-command`.
pub const MAX_AGENT_COMMAND_BYTES: usize = 4096;

/// The agent's argv from `--agent-command`, split as a POSIX shell splits words
/// (quotes, no expansion): the agent is started directly, never by a shell.
pub fn agent_argv(command: &str) -> Result<Vec<String>, String> {
    if command.len() > MAX_AGENT_COMMAND_BYTES || command.contains('\0') {
        return Err(format!("an agent command must be at most {MAX_AGENT_COMMAND_BYTES} bytes, with no NUL"));
    }
    match shlex::split(command) {
        Some(argv) if !argv.is_empty() => Ok(argv),
        Some(_) => Err("the acp adapter needs --agent-command, the command that starts the agent".into()),
        None => Err(format!("the agent command {:?} has an unclosed quote or a trailing backslash", short(command))),
    }
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A command's end as the agent hears it: `(code, signal)`. Our init reports a
/// command killed by a signal as a shell does, 128 + the signal, so under an
/// envelope such a code is that signal.
pub fn exit_of(code: Option<i32>, signal: Option<i32>, enveloped: bool) -> (Option<i32>, Option<i32>) {
    match (code, signal) {
        (_, Some(signal)) => (None, Some(signal)),
        (Some(code @ 129..=192), None) if enveloped => (None, Some(code - 128)),
        other => other,
    }
}

/// A terminal's output as ACP keeps it: at most `limit` bytes, the oldest dropped
/// first, always cut at a character boundary. The agent's own limit is honoured up
/// to `most`, which is also the limit when it gives none: a command's output may be
/// endless, the supervisor's memory is not.
#[derive(Debug, Default)]
pub struct OutputTail {
    limit: usize,
    bytes: Vec<u8>,
    truncated: bool,
}

impl OutputTail {
    pub fn new(asked: Option<u64>, most: usize) -> Self {
        let limit = asked.map_or(most, |a| usize::try_from(a).unwrap_or(usize::MAX).min(most));
        OutputTail { limit, ..Default::default() }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        let limit = self.limit;
        if self.bytes.len() <= limit {
            return;
        }
        let mut cut = self.bytes.len() - limit;
        // Never start inside a character: skip its continuation bytes.
        while cut < self.bytes.len() && (self.bytes[cut] & 0xC0) == 0x80 {
            cut += 1;
        }
        self.bytes.drain(..cut);
        self.truncated = true;
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_command_is_split_like_a_shell_and_never_run_by_one() {
        assert_eq!(agent_argv("npx -y 'my agent' --acp").unwrap(), ["npx", "-y", "my agent", "--acp"]);
        assert_eq!(agent_argv("a $(rm -rf /)").unwrap(), ["a", "$(rm", "-rf", "/)"]);
        for bad in ["", "   ", "a 'b", "a\\", "a\0b"] {
            assert!(agent_argv(bad).is_err(), "{bad:?}");
        }
        assert!(agent_argv(&"a".repeat(MAX_AGENT_COMMAND_BYTES + 1)).is_err());
    }

    #[test]
    fn a_command_killed_under_an_envelope_ended_by_its_signal() {
        assert_eq!(exit_of(Some(137), None, true), (None, Some(9)));
        assert_eq!(exit_of(Some(137), None, false), (Some(137), None));
        assert_eq!(exit_of(Some(128), None, true), (Some(128), None));
        assert_eq!(exit_of(Some(193), None, true), (Some(193), None));
        assert_eq!(exit_of(None, Some(15), false), (None, Some(15)));
        assert_eq!(exit_of(Some(0), None, true), (Some(0), None));
    }

    #[test]
    fn a_terminals_output_keeps_its_last_bytes_and_whole_characters() {
        let mut tail = OutputTail::new(Some(5), 1 << 20);
        tail.push(b"abc");
        assert_eq!((tail.text(), tail.truncated()), ("abc".to_owned(), false));
        tail.push(b"defg");
        assert_eq!((tail.text(), tail.truncated()), ("cdefg".to_owned(), true));
        let mut tail = OutputTail::new(Some(4), 1 << 20);
        tail.push("aé€".as_bytes()); // 1 + 2 + 3 bytes: the last 4 start inside é
        assert_eq!(tail.text(), "€");
        // No limit of the agent's, or one past ours: ours.
        for asked in [None, Some(u64::MAX)] {
            let mut all = OutputTail::new(asked, 10_000);
            all.push(&[b'x'; 10_000]);
            assert_eq!((all.text().len(), all.truncated()), (10_000, false));
            all.push(b"y");
            assert_eq!((all.text().len(), all.truncated()), (10_000, true));
        }
    }
}
