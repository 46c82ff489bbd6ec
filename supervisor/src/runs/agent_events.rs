//! The agent's steps as the run's events record them: one type for every adapter.
//! They come typed from the run's runner (`cc.runner.v1.AgentEvent`), which read them
//! from the agent's own protocol; the supervisor only writes them down.

pub use cc_proto::agent_event::AgentEventKind;
use cc_proto::agent_event::{MAX_EVENT_TEXT, clipped as clipped_to};
use cc_proto::runner::v1 as rn;
use cc_proto::runner::v1::agent_event::Step;
use cc_proto::supervisor::v1 as pb;
use serde_json::{Value, json};

/// One of the agent's steps, as the run's event log keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub kind: AgentEventKind,
    pub payload: Value,
}

impl AgentEvent {
    pub fn new(kind: AgentEventKind, payload: Value) -> Self {
        Self { kind, payload }
    }

    /// The step the run's process read; `None` for an empty one (a runner newer than
    /// this supervisor).
    pub fn from_step(event: rn::AgentEvent) -> Option<Self> {
        let (kind, payload) = match event.step? {
            Step::Init(init) => (
                AgentEventKind::Init,
                json!({
                    "session_id": init.session_id,
                    "model": init.model,
                    "cwd": init.cwd,
                    "permission_mode": init.permission_mode,
                    "tools": init.tools,
                    "mcp_servers": init.mcp_servers.into_iter()
                        .map(|s| json!({ "name": s.name, "status": s.status }))
                        .collect::<Vec<_>>(),
                }),
            ),
            Step::Text(text) => (AgentEventKind::Text, json!({ "text": text.text })),
            Step::Thought(thought) => (AgentEventKind::Thought, json!({ "text": thought.text })),
            Step::Update(update) => {
                (AgentEventKind::Update, json!({ "update": update.update, "detail": update.detail }))
            }
            Step::Permission(asked) => (
                AgentEventKind::Permission,
                json!({ "tool_call": asked.tool_call, "title": asked.title, "allowed": asked.allowed, "reason": asked.reason }),
            ),
            Step::Stop(stop) => (AgentEventKind::Result, json!({ "subtype": stop.stop_reason, "result": "" })),
            Step::ToolUse(call) => {
                (AgentEventKind::ToolUse, json!({ "id": call.id, "name": call.name, "input": call.input }))
            }
            Step::ToolResult(result) => (
                AgentEventKind::ToolResult,
                json!({ "tool_use_id": result.tool_use_id, "is_error": result.is_error, "content": result.content }),
            ),
            Step::Result(result) => (
                AgentEventKind::Result,
                json!({
                    "subtype": result.subtype,
                    "is_error": result.is_error,
                    "result": result.result,
                    "num_turns": result.num_turns,
                    "total_cost_usd": result.total_cost_usd,
                    "duration_ms": result.duration_ms,
                    "session_id": result.session_id,
                }),
            ),
        };
        Some(Self { kind, payload })
    }

    /// As a prompt's caller sees it.
    pub fn to_wire(&self) -> pb::AgentEvent {
        pb::AgentEvent { kind: self.kind.name().into(), payload_json: self.payload.to_string() }
    }
}

/// The events one prompt records at most: an agent that loops for hours must not fill
/// the event log. Past it one `agent_events_suppressed` says so; its steps still
/// stream to the prompt's caller.
pub const MAX_EVENTS_PER_PROMPT: u32 = 10_000;

/// What one prompt has recorded of its agent's steps, against [`MAX_EVENTS_PER_PROMPT`].
#[derive(Default)]
pub struct PromptBudget {
    recorded: u32,
}

impl PromptBudget {
    /// Records `event` under `subject` (`run:ID`), or counts it once the prompt's
    /// budget is spent.
    pub fn record(&mut self, events: &crate::events::EventLog, subject: &str, event: &AgentEvent) {
        self.recorded = self.recorded.saturating_add(1);
        if self.recorded <= MAX_EVENTS_PER_PROMPT {
            events.record(event.kind.name(), subject, event.payload.clone());
        } else if self.recorded == MAX_EVENTS_PER_PROMPT + 1 {
            events.record("agent_events_suppressed", subject, json!({ "after": MAX_EVENTS_PER_PROMPT }));
        }
    }
}

/// An event's text, cut to what the event log keeps.
pub fn clipped(text: &str) -> String {
    clipped_to(text, MAX_EVENT_TEXT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_recorded_with_the_fields_the_event_reference_names() {
        let init = rn::AgentEvent {
            step: Some(Step::Init(rn::AgentInit {
                session_id: "s1".into(),
                tools: vec!["Bash".into()],
                mcp_servers: vec![rn::McpServerState { name: "cc".into(), status: "connected".into() }],
                ..Default::default()
            })),
        };
        let init = AgentEvent::from_step(init).unwrap();
        assert_eq!(init.kind.name(), "agent_init");
        assert_eq!(init.payload["session_id"], "s1");
        assert_eq!(init.payload["tools"], json!(["Bash"]));
        assert_eq!(init.payload["mcp_servers"][0]["status"], "connected");
        let result = rn::AgentEvent {
            step: Some(Step::Result(rn::AgentResult { num_turns: 2, total_cost_usd: 0.5, ..Default::default() })),
        };
        let result = AgentEvent::from_step(result).unwrap();
        assert_eq!(
            (result.payload["num_turns"].as_u64(), result.payload["total_cost_usd"].as_f64()),
            (Some(2), Some(0.5))
        );
        assert!(AgentEvent::from_step(rn::AgentEvent { step: None }).is_none());
    }
}
