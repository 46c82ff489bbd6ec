//! Claude Code's stream-json output (`claude -p --output-format stream-json`), one
//! JSON message a line, read into the agent's steps. A line that is not one of its
//! messages is still the agent's output and is dropped; nothing in a line can make
//! more than its own steps, each bounded ([`cc_proto::agent_event`]).
//!
//! The event log is what a person reads to learn what the agent did, so a step the
//! output cannot have honestly made is not recorded: a tool result for a call the
//! prompt never made is dropped, and said so.

use cc_proto::agent_event::{MAX_EVENT_LIST, MAX_EVENT_TEXT, clipped, clipped_id};
use cc_proto::runner::v1::agent_event::Step;
use cc_proto::runner::v1::parse_agent_output_response::Output;
use cc_proto::runner::v1::{
    AgentEvent, AgentInit, AgentResult, AgentText, AgentToolResult, AgentToolUse, McpServerState,
};
use serde_json::Value;

/// The most tool calls one prompt's reading remembers; past it, results of later
/// calls are not recorded (a prompt's event budget is spent long before).
pub const MAX_CALLS_REMEMBERED: usize = 10_000;

/// One prompt's output: the tool calls it has made so far.
#[derive(Default)]
pub struct Session {
    calls: std::collections::HashSet<String>,
}

impl super::StepReader for Session {
    fn line(&mut self, line: &str) -> Vec<Output> {
        let mut out = Vec::new();
        for event in events(line) {
            match &event.step {
                Some(Step::ToolUse(call)) if self.calls.len() < MAX_CALLS_REMEMBERED => {
                    self.calls.insert(call.id.clone());
                }
                Some(Step::ToolResult(result)) if !self.calls.contains(&result.tool_use_id) => {
                    let id = clipped(&result.tool_use_id, 64);
                    out.push(Output::Dropped(format!(
                        "a tool result for a call the agent never made ({id}) was not recorded"
                    )));
                    continue;
                }
                _ => {}
            }
            out.push(Output::Event(event));
        }
        out
    }
}

/// The steps in one line of the CLI's stream-json output.
pub fn events(line: &str) -> Vec<AgentEvent> {
    // serde_json refuses nesting past 128 levels, so a deep line is an error, not a
    // deep recursion.
    let Ok(message) = serde_json::from_str::<Value>(line) else { return vec![] };
    let id = |v: &Value, field: &str| clipped_id(v.get(field).and_then(Value::as_str).unwrap_or_default());
    let text =
        |v: &Value, field: &str| clipped(v.get(field).and_then(Value::as_str).unwrap_or_default(), MAX_EVENT_TEXT);
    let blocks =
        || message.pointer("/message/content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let step = |step: Step| AgentEvent { step: Some(step) };
    match (message.get("type").and_then(Value::as_str), message.get("subtype").and_then(Value::as_str)) {
        (Some("system"), Some("init")) => vec![step(Step::Init(AgentInit {
            session_id: id(&message, "session_id"),
            model: id(&message, "model"),
            cwd: id(&message, "cwd"),
            permission_mode: id(&message, "permissionMode"),
            tools: list(&message, "tools").filter_map(Value::as_str).map(clipped_id).collect(),
            mcp_servers: list(&message, "mcp_servers")
                .map(|server| McpServerState { name: id(server, "name"), status: id(server, "status") })
                .collect(),
        }))],
        (Some("assistant"), _) => blocks()
            .iter()
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => Some(step(Step::Text(AgentText { text: text(block, "text") }))),
                Some("tool_use") => Some(step(Step::ToolUse(AgentToolUse {
                    id: id(block, "id"),
                    name: id(block, "name"),
                    input: clipped(&block.get("input").map(Value::to_string).unwrap_or_default(), MAX_EVENT_TEXT),
                }))),
                _ => None,
            })
            .collect(),
        (Some("user"), _) => blocks()
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|block| {
                step(Step::ToolResult(AgentToolResult {
                    tool_use_id: id(block, "tool_use_id"),
                    is_error: block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    content: clipped(&content_text(block.get("content").unwrap_or(&Value::Null)), MAX_EVENT_TEXT),
                }))
            })
            .collect(),
        (Some("result"), subtype) => vec![step(Step::Result(AgentResult {
            subtype: clipped_id(subtype.unwrap_or_default()),
            is_error: message.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            result: text(&message, "result"),
            num_turns: message.get("num_turns").and_then(Value::as_u64).unwrap_or(0),
            total_cost_usd: message.get("total_cost_usd").and_then(Value::as_f64).unwrap_or(0.0),
            duration_ms: message.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
            session_id: id(&message, "session_id"),
        }))],
        _ => vec![],
    }
}

/// The first [`MAX_EVENT_LIST`] items of an array field; none when it is not one.
fn list<'a>(message: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    message.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default().iter().take(MAX_EVENT_LIST)
}

/// A tool result's content: a string, or blocks of which the text ones are kept.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Step {
        let mut events = events(line);
        assert_eq!(events.len(), 1, "{line}");
        events.remove(0).step.unwrap()
    }

    #[test]
    fn stream_json_lines_become_steps() {
        let init = r#"{"type":"system","subtype":"init","session_id":"s1","model":"m","cwd":"/w","permissionMode":"bypassPermissions","tools":["Bash",7],"mcp_servers":[{"name":"cc","status":"connected"}]}"#;
        let Step::Init(init) = one(init) else { panic!("not an init") };
        assert_eq!((init.session_id.as_str(), init.permission_mode.as_str()), ("s1", "bypassPermissions"));
        assert_eq!(init.tools, ["Bash"]);
        assert_eq!(init.mcp_servers, [McpServerState { name: "cc".into(), status: "connected".into() }]);
        let assistant = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#;
        let steps: Vec<Step> = events(assistant).into_iter().filter_map(|e| e.step).collect();
        assert_eq!(steps[0], Step::Text(AgentText { text: "hi".into() }));
        let Step::ToolUse(call) = &steps[1] else { panic!("not a tool use") };
        assert_eq!((call.name.as_str(), call.input.as_str()), ("Bash", r#"{"command":"ls"}"#));
        let user = r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"denied"}]}]}}"#;
        let Step::ToolResult(result) = one(user) else { panic!("not a tool result") };
        assert!(result.is_error);
        assert_eq!(result.content, "denied");
        let result = r#"{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"done","total_cost_usd":0.5,"session_id":"s1"}"#;
        let Step::Result(result) = one(result) else { panic!("not a result") };
        assert_eq!((result.num_turns, result.total_cost_usd), (2, 0.5));
    }

    #[test]
    fn what_is_not_one_of_its_messages_makes_no_step() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep_object =
            format!(r#"{{"type":"assistant","message":{}1{}}}"#, r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
        for junk in ["", "not json", "[]", r#"{"type":"stream_event"}"#, r#"{"type":"assistant"}"#, &deep, &deep_object]
        {
            assert!(events(junk).is_empty(), "{}", &junk[..junk.len().min(40)]);
        }
    }

    #[test]
    fn a_result_for_a_call_never_made_is_dropped_and_said_so() {
        use super::super::StepReader;
        let call =
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}"#;
        let result = |id: &str| {
            format!(
                r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"{id}","content":"ok"}}]}}}}"#
            )
        };
        let mut session = Session::default();
        assert!(matches!(session.line(&result("t1"))[..], [Output::Dropped(ref why)] if why.contains("(t1)")));
        assert!(matches!(session.line(call)[..], [Output::Event(_)]));
        assert!(matches!(session.line(&result("t1"))[..], [Output::Event(_)]));
        assert!(matches!(session.line(&result("t2"))[..], [Output::Dropped(_)]));
    }

    #[test]
    fn every_field_is_bounded() {
        let long = "é".repeat(20_000);
        let text = format!(r#"{{"type":"assistant","message":{{"content":[{{"type":"text","text":"{long}"}}]}}}}"#);
        let Step::Text(text) = one(&text) else { panic!("not a text") };
        assert!(text.text.ends_with("(40000 bytes in all)"));
        let tools: Vec<String> = (0..10_000).map(|i| format!("\"t{i}\"")).collect();
        let init =
            format!(r#"{{"type":"system","subtype":"init","session_id":"{long}","tools":[{}]}}"#, tools.join(","));
        let Step::Init(init) = one(&init) else { panic!("not an init") };
        assert!(init.session_id.len() <= cc_proto::agent_event::MAX_EVENT_ID);
        assert_eq!(init.tools.len(), MAX_EVENT_LIST);
    }
}
