//! The acp adapter's pure parts: how the gate sees a `session/request_permission`,
//! a terminal's command line, the agent's output cut into lines, and the steps its
//! `session/update` notifications become. The connection itself is [`client`].

pub mod client;

use agent_client_protocol::v1::schema::{
    ContentBlock, PermissionOption, PermissionOptionKind, RequestPermissionOutcome, SelectedPermissionOutcome,
    SessionUpdate, ToolCallStatus, ToolCallUpdateFields, ToolKind,
};
use cc_policy::paths::gate_path;
use cc_proto::agent_event::{MAX_EVENT_ID, MAX_EVENT_TEXT, clipped, clipped_id};
use cc_proto::runner::v1::agent_event::Step;
use cc_proto::runner::v1::{AgentEvent, AgentText, AgentToolResult, AgentToolUse, AgentUpdate, GateAsk};
use serde_json::Value;
use std::path::Path;

/// The most paths one permission request may name: the gate judges each, and past
/// this the request is refused rather than judged in part.
pub const MAX_PERMISSION_PATHS: usize = 64;
/// The fields of a tool call's raw input that name a path it touches: a move's
/// destination as much as its source.
const PATH_FIELDS: &[&str] =
    &["path", "file_path", "abs_path", "old_path", "new_path", "source", "destination", "target", "from", "to"];

/// What a permission request is to the gate.
#[derive(Debug, PartialEq, Eq)]
pub enum Permission {
    /// Judged as this harness call, its paths spelled as the gate's rules see them.
    Gate(GateAsk),
    /// Denied before anyone is asked, for this reason.
    Refused(String),
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

fn step(step: Step) -> AgentEvent {
    AgentEvent { step: Some(step) }
}

/// How the gate sees a permission request: by the kind of the tool call, the way the
/// harness's own tools are judged. A kind no rule can be written for is denied.
pub fn describe_permission(fields: &ToolCallUpdateFields, work_dir: &Path) -> Permission {
    let input = fields.raw_input.as_ref();
    let field = |name: &str| input.and_then(|i| i.get(name)).and_then(Value::as_str).filter(|s| !s.is_empty());
    let paths = || -> Vec<String> {
        let mut paths: Vec<String> = fields
            .locations
            .iter()
            .flatten()
            .map(|l| gate_path(&l.path.to_string_lossy(), work_dir))
            .chain(PATH_FIELDS.iter().filter_map(|f| field(f)).map(|p| gate_path(p, work_dir)))
            .collect();
        paths.sort();
        paths.dedup();
        paths
    };
    let judged = |tool: &'static str, paths: Vec<String>| {
        if paths.len() > MAX_PERMISSION_PATHS {
            return Permission::Refused(format!("the {tool} request names over {MAX_PERMISSION_PATHS} paths"));
        }
        Permission::Gate(GateAsk { tool: tool.into(), paths, command_line: None, domains: vec![] })
    };
    let files = |tool: &'static str| match paths() {
        paths if paths.is_empty() => Permission::Refused(format!("the {tool} request names no file")),
        paths => judged(tool, paths),
    };
    match fields.kind {
        Some(ToolKind::Execute) => {
            let command = field("command").map(str::to_owned).or_else(|| {
                // `["cargo", "test"]`: an argv, quoted back into the command line it is.
                let argv = input?.get("command")?.as_array()?;
                let words: Option<Vec<&str>> = argv.iter().map(Value::as_str).collect();
                shlex::try_join(words?).ok()
            });
            // An empty command line is no command: nothing for the gate to judge.
            let command = command.filter(|c| !c.trim().is_empty());
            match command {
                Some(command) => Permission::Gate(GateAsk {
                    tool: "bash".into(),
                    paths: vec![],
                    command_line: Some(command),
                    domains: vec![],
                }),
                None => Permission::Refused("the execute request has no command in its raw input".into()),
            }
        }
        Some(ToolKind::Edit | ToolKind::Delete) => files("write"),
        // A move writes where it goes as much as where it comes from: one that does
        // not say where it goes cannot be judged.
        Some(ToolKind::Move) => match paths() {
            paths if paths.len() < 2 => Permission::Refused("the move request does not name both its ends".into()),
            paths => judged("write", paths),
        },
        Some(ToolKind::Read) => files("read"),
        // A search that names no path searches the run's work directory.
        Some(ToolKind::Search) => match paths() {
            paths if paths.is_empty() => judged("search", vec![".".to_owned()]),
            paths => judged("search", paths),
        },
        Some(ToolKind::Fetch) => match field("url").and_then(|u| url::Url::parse(u).ok()) {
            Some(url) => match url.host_str() {
                Some(host) => Permission::Gate(GateAsk {
                    tool: "web_fetch".into(),
                    paths: vec![],
                    command_line: None,
                    domains: vec![host.trim_start_matches('[').trim_end_matches(']').to_owned()],
                }),
                None => Permission::Refused("the fetch request's URL names no host".into()),
            },
            None => Permission::Refused("the fetch request has no URL in its raw input".into()),
        },
        Some(ToolKind::Think) => Permission::Refused("Control Center has no rule for a think tool call; denied".into()),
        _ => Permission::Refused("Control Center has no rule for this kind of tool call; denied".into()),
    }
}

/// The gate's answer as the agent hears it: an allow only as "allow once" (an
/// "always" would let the agent stop asking), a denial as "reject once" or, failing
/// that, "reject always". With no option of that kind the request is cancelled,
/// which no agent may take as a yes.
pub fn permission_outcome(options: &[PermissionOption], allowed: bool) -> RequestPermissionOutcome {
    let wanted: &[PermissionOptionKind] = if allowed {
        &[PermissionOptionKind::AllowOnce]
    } else {
        &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways]
    };
    wanted
        .iter()
        .find_map(|kind| options.iter().find(|o| o.kind == *kind))
        .map_or(RequestPermissionOutcome::Cancelled, |o| {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone()))
        })
}

/// A `terminal/create` as one bash command line, which the command policy and the
/// rules judge as they judge any: `cd DIR && NAME=VALUE … exec COMMAND ARGS…`, every
/// word quoted.
pub fn terminal_command_line(
    command: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Result<String, String> {
    let quote = |word: &str| {
        shlex::try_quote(word).map(|q| q.into_owned()).map_err(|_| format!("{:?} holds a NUL", short(word)))
    };
    if command.is_empty() {
        return Err("terminal/create names no command".into());
    }
    let mut line = String::new();
    if let Some(dir) = cwd {
        line.push_str(&format!("cd -- {} && ", quote(&dir.to_string_lossy())?));
    }
    for (name, value) in env {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("{:?} is not an environment variable's name", short(name)));
        }
        line.push_str(&format!("{name}={} ", quote(value)?));
    }
    line.push_str("exec ");
    line.push_str(&quote(command)?);
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg)?);
    }
    Ok(line)
}

/// The agent's output cut into its messages, one a line. Each chunk is searched
/// only where the last search stopped, so a long line arriving in many chunks costs
/// its length once, not its length for every chunk.
#[derive(Debug)]
pub struct LineSplitter {
    pending: Vec<u8>,
    scanned: usize,
    max: usize,
}

impl LineSplitter {
    /// Lines of at most `max` bytes, the newline not counted.
    pub fn new(max: usize) -> Self {
        LineSplitter { pending: Vec::new(), scanned: 0, max }
    }

    /// The lines `chunk` completes; `Err` once a line is over the limit, complete or not.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<String>, String> {
        self.pending.extend_from_slice(chunk);
        let mut lines = Vec::new();
        let mut start = 0;
        for end in self.scanned..self.pending.len() {
            if self.pending[end] != b'\n' {
                continue;
            }
            if end - start > self.max {
                return Err(self.too_long());
            }
            lines.push(String::from_utf8_lossy(&self.pending[start..end]).into_owned());
            start = end + 1;
        }
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        if self.pending.len() > self.max {
            return Err(self.too_long());
        }
        Ok(lines)
    }

    /// What is left when the output ends: a last line with no newline, if any.
    pub fn finish(&mut self) -> Option<String> {
        self.scanned = 0;
        let rest = std::mem::take(&mut self.pending);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }

    fn too_long(&self) -> String {
        format!("the agent wrote a line over {} bytes", self.max)
    }
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.get("type").cloned())
            .map_or_else(|| "[content]".to_owned(), |kind| format!("[{}]", kind.as_str().unwrap_or("content"))),
    }
}

/// The run events of one `session/update`. The agent's message arrives in chunks,
/// often a word each: they are gathered in `text` and become one `agent_text` when
/// something else happens (and at the prompt's end, by [`flush_text`]).
pub fn update_events(update: &SessionUpdate, text: &mut String) -> Vec<AgentEvent> {
    if let SessionUpdate::AgentMessageChunk(chunk) = update {
        if text.len() < 4 * MAX_EVENT_TEXT {
            text.push_str(&block_text(&chunk.content));
        }
        return vec![];
    }
    let mut events: Vec<AgentEvent> = flush_text(text).into_iter().collect();
    let event = match update {
        SessionUpdate::AgentThoughtChunk(chunk) => {
            step(Step::Thought(AgentText { text: clipped(&block_text(&chunk.content), MAX_EVENT_TEXT) }))
        }
        SessionUpdate::ToolCall(call) => step(Step::ToolUse(AgentToolUse {
            id: clipped_id(&call.tool_call_id.to_string()),
            name: clipped(&call.title, MAX_EVENT_TEXT),
            input: clipped(&call.raw_input.as_ref().map(Value::to_string).unwrap_or_default(), MAX_EVENT_TEXT),
        })),
        SessionUpdate::ToolCallUpdate(update)
            if matches!(update.fields.status, Some(ToolCallStatus::Completed | ToolCallStatus::Failed)) =>
        {
            let output = update.fields.raw_output.as_ref().map(Value::to_string).unwrap_or_default();
            step(Step::ToolResult(AgentToolResult {
                tool_use_id: clipped_id(&update.tool_call_id.to_string()),
                is_error: update.fields.status == Some(ToolCallStatus::Failed),
                content: clipped(&output, MAX_EVENT_TEXT),
            }))
        }
        other => {
            let value = serde_json::to_value(other).unwrap_or(Value::Null);
            let kind = value.get("sessionUpdate").and_then(Value::as_str).unwrap_or("unknown").to_owned();
            let detail = clipped(&value.to_string(), MAX_EVENT_TEXT);
            step(Step::Update(AgentUpdate { update: clipped(&kind, MAX_EVENT_ID), detail }))
        }
    };
    events.push(event);
    events
}

/// The agent's gathered message, as one event.
pub fn flush_text(text: &mut String) -> Option<AgentEvent> {
    if text.is_empty() {
        return None;
    }
    let all = std::mem::take(text);
    Some(step(Step::Text(AgentText { text: clipped(&all, MAX_EVENT_TEXT) })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ContentChunk, TextContent, ToolCallLocation};
    use serde_json::json;

    fn fields(kind: ToolKind, input: Value) -> ToolCallUpdateFields {
        ToolCallUpdateFields::new().kind(kind).raw_input(input)
    }

    fn gate(tool: &str, paths: &[&str], command: Option<&str>, domains: &[&str]) -> Permission {
        Permission::Gate(GateAsk {
            tool: tool.into(),
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            command_line: command.map(str::to_owned),
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        })
    }

    #[test]
    fn a_permission_request_is_judged_as_the_harness_call_it_amounts_to() {
        let w = Path::new("/w/run");
        assert_eq!(
            describe_permission(&fields(ToolKind::Execute, json!({ "command": "git push origin main" })), w),
            gate("bash", &[], Some("git push origin main"), &[])
        );
        assert_eq!(
            describe_permission(&fields(ToolKind::Execute, json!({ "command": ["rm", "-rf", "a b"] })), w),
            gate("bash", &[], Some("rm -rf 'a b'"), &[])
        );
        let edit = fields(ToolKind::Edit, json!({})).locations(vec![ToolCallLocation::new("/w/run/./secret/k")]);
        assert_eq!(describe_permission(&edit, w), gate("write", &["secret/k"], None, &[]));
        assert_eq!(
            describe_permission(&fields(ToolKind::Delete, json!({ "path": "/etc/passwd" })), w),
            gate("write", &["/etc/passwd"], None, &[])
        );
        assert_eq!(
            describe_permission(&fields(ToolKind::Fetch, json!({ "url": "https://Example.test/x" })), w),
            gate("web_fetch", &[], None, &["example.test"])
        );
        assert_eq!(
            describe_permission(&fields(ToolKind::Read, json!({ "file_path": "src/a.rs" })), w),
            gate("read", &["src/a.rs"], None, &[])
        );
        // A move is judged at both ends: a harmless source does not carry a secret
        // destination past the gate.
        let mv = fields(ToolKind::Move, json!({ "source": "notes.md", "destination": "/w/run/secret/k" }));
        assert_eq!(describe_permission(&mv, w), gate("write", &["notes.md", "secret/k"], None, &[]));
        let mv = fields(ToolKind::Move, json!({ "old_path": "a", "new_path": "../../etc/x" }))
            .locations(vec![ToolCallLocation::new("/w/run/a")]);
        assert_eq!(describe_permission(&mv, w), gate("write", &["../../etc/x", "a"], None, &[]));
        // A search that names no path searches the work directory, and is judged so.
        assert_eq!(describe_permission(&fields(ToolKind::Search, json!({})), w), gate("search", &["."], None, &[]));
        assert_eq!(
            describe_permission(&fields(ToolKind::Search, json!({ "path": "src" })), w),
            gate("search", &["src"], None, &[])
        );
    }

    #[test]
    fn an_allow_is_only_ever_once_and_a_denial_never_an_allow() {
        let option = |id: &str, kind| PermissionOption::new(id.to_owned(), id.to_owned(), kind);
        let all = [
            option("always", PermissionOptionKind::AllowAlways),
            option("once", PermissionOptionKind::AllowOnce),
            option("never", PermissionOptionKind::RejectAlways),
            option("no", PermissionOptionKind::RejectOnce),
        ];
        let selected = |outcome| match outcome {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.to_string()),
            _ => None,
        };
        assert_eq!(selected(permission_outcome(&all, true)).as_deref(), Some("once"));
        assert_eq!(selected(permission_outcome(&all, false)).as_deref(), Some("no"));
        assert_eq!(selected(permission_outcome(&all[..3], false)).as_deref(), Some("never"));
        // Only "always" on offer: an allow is not widened into it, it is cancelled.
        assert_eq!(selected(permission_outcome(&all[..1], true)), None);
        assert_eq!(selected(permission_outcome(&all[..2], false)), None);
        assert_eq!(selected(permission_outcome(&[], true)), None);
    }

    #[test]
    fn a_permission_request_no_rule_can_judge_is_denied() {
        let w = Path::new("/w");
        for f in [
            fields(ToolKind::Execute, json!({})),
            fields(ToolKind::Execute, json!({ "command": 7 })),
            fields(ToolKind::Execute, json!({ "command": ["a", 1] })),
            fields(ToolKind::Execute, json!({ "command": [] })),
            fields(ToolKind::Execute, json!({ "command": "  " })),
            fields(ToolKind::Edit, json!({})),
            fields(ToolKind::Fetch, json!({ "url": "not a url" })),
            fields(ToolKind::Think, json!({})),
            fields(ToolKind::Move, json!({ "path": "a" })),
            fields(ToolKind::Move, json!({ "source": "a", "destination": "./a" })),
            fields(ToolKind::Read, json!({})).locations(
                (0..=MAX_PERMISSION_PATHS).map(|i| ToolCallLocation::new(format!("f{i}"))).collect::<Vec<_>>(),
            ),
            fields(ToolKind::Other, json!({ "command": "ls" })),
            ToolCallUpdateFields::new(),
        ] {
            assert!(matches!(describe_permission(&f, w), Permission::Refused(_)), "{f:?}");
        }
    }

    #[test]
    fn a_terminal_is_one_quoted_command_line() {
        let env = [("LANG".to_owned(), "C; rm -rf /".to_owned())];
        let line = terminal_command_line("cargo", &["test".into(), "a b".into()], &env, Some(Path::new("/w/x y")));
        assert_eq!(line.unwrap(), "cd -- '/w/x y' && LANG='C; rm -rf /' exec cargo test 'a b'");
        assert_eq!(terminal_command_line("ls", &[], &[], None).unwrap(), "exec ls");
        assert!(terminal_command_line("", &[], &[], None).is_err());
        assert!(terminal_command_line("ls", &["a\0b".into()], &[], None).is_err());
        for name in ["", "1A", "A-B", "A B", "A=B"] {
            assert!(terminal_command_line("ls", &[], &[(name.into(), "v".into())], None).is_err(), "{name:?}");
        }
    }

    #[test]
    fn the_agents_output_is_cut_into_lines_of_bounded_length() {
        let mut split = LineSplitter::new(8);
        assert_eq!(split.push(b"{\"a\":1}\n{\"b").unwrap(), ["{\"a\":1}"]);
        assert!(split.push(b"\":").unwrap().is_empty());
        assert_eq!(split.push(b"2}\n\n").unwrap(), ["{\"b\":2}", ""]);
        assert_eq!(split.push(b"last").unwrap(), Vec::<String>::new());
        assert_eq!(split.finish().as_deref(), Some("last"));
        assert_eq!(split.finish(), None);
        // Over the limit, whether the line is complete or still coming.
        assert!(LineSplitter::new(8).push(b"123456789\n").is_err());
        let mut split = LineSplitter::new(8);
        assert!(split.push(b"12345").unwrap().is_empty());
        assert!(split.push(b"6789").is_err());
        // A line of exactly the limit is whole, and invalid UTF-8 is replaced.
        assert_eq!(LineSplitter::new(8).push(b"12345678\n\xff\n").unwrap(), ["12345678", "\u{fffd}"]);
    }

    #[test]
    fn message_chunks_become_one_event_and_tool_calls_their_own() {
        let chunk = |t: &str| {
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(t.to_owned()))))
        };
        let mut text = String::new();
        assert!(update_events(&chunk("hel"), &mut text).is_empty());
        assert!(update_events(&chunk("lo"), &mut text).is_empty());
        let thought =
            SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::Text(TextContent::new("hmm".to_owned()))));
        let steps: Vec<Step> = update_events(&thought, &mut text).into_iter().filter_map(|e| e.step).collect();
        let hmm = AgentText { text: "hmm".into() };
        assert_eq!(steps, [Step::Text(AgentText { text: "hello".into() }), Step::Thought(hmm)]);
        assert!(flush_text(&mut text).is_none());
        update_events(&chunk(&"x".repeat(100_000)), &mut text);
        let Some(Step::Text(flushed)) = flush_text(&mut text).and_then(|e| e.step) else { panic!("no text") };
        assert!(flushed.text.ends_with("bytes in all)"));
    }
}
