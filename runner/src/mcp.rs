//! cc-mcp: the product's MCP server, launched by Claude Code (over stdio, from the MCP
//! config the supervisor writes) inside the run's envelope. Its tools open a pull
//! request and create, comment on and close GitHub issues. Each call goes to the run's
//! agent socket (`AgentGate.CallProductTool`); the supervisor asks the gate and makes
//! the write with a credential that never enters the envelope. The server holds no
//! token and reaches nothing but the agent socket.
//!
//! The protocol is `rmcp`'s; this module is the tools and the answers they give.

use cc_proto::agent::v1 as ag;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ProtocolVersion, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::hook::Address;

/// How long one call may take: an ask may wait for an approver (the gate's own
/// timeout ends it first, as a deny).
const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PullRequestArgs {
    /// The pull request's title.
    pub title: String,
    /// Its description (Markdown).
    #[serde(default)]
    pub body: String,
    /// The branch with the changes (push it first: `git push origin HEAD:<branch>`).
    pub head: String,
    /// The branch to merge into; the repository's default branch when left out.
    #[serde(default)]
    pub base: String,
    /// Open it as a draft.
    #[serde(default)]
    pub draft: bool,
    /// OWNER/NAME; left out: the run's only GitHub repository.
    #[serde(default)]
    pub repository: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TicketArgs {
    /// The title.
    pub title: String,
    /// Its description (Markdown).
    #[serde(default)]
    pub body: String,
    /// OWNER/NAME; left out: the run's only GitHub repository.
    #[serde(default)]
    pub repository: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CommentArgs {
    /// The number.
    pub number: u64,
    /// The comment (Markdown).
    pub body: String,
    /// OWNER/NAME; left out: the run's only GitHub repository.
    #[serde(default)]
    pub repository: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CloseArgs {
    /// The number.
    pub number: u64,
    /// A last comment, posted before it closes.
    #[serde(default)]
    pub comment: String,
    /// OWNER/NAME; left out: the run's only GitHub repository.
    #[serde(default)]
    pub repository: String,
}

/// The agent's view of a result: its text, and whether it is an error.
pub fn answer(result: &ag::ProductToolResult) -> CallToolResult {
    if result.ok {
        CallToolResult::success(vec![ContentBlock::text(result.message.clone())])
    } else {
        CallToolResult::error(vec![ContentBlock::text(result.message.clone())])
    }
}

#[derive(Clone)]
pub struct ProductTools {
    agent: Address,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl ProductTools {
    pub fn new(agent: Address) -> Self {
        Self { agent, tool_router: Self::tool_router() }
    }

    async fn call(&self, call: ag::product_tool_call::Call) -> CallToolResult {
        let asked = async {
            let mut gate = crate::hook::agent_client(&self.agent).await?;
            let request = ag::CallProductToolRequest { call: Some(ag::ProductToolCall { call: Some(call) }) };
            let response = gate
                .call_product_tool(request)
                .await
                .map_err(|s| format!("the run's gate did not answer: {}", s.message()))?;
            response.into_inner().result.ok_or_else(|| "no result".to_owned())
        };
        match tokio::time::timeout(CALL_DEADLINE, asked).await {
            Ok(Ok(result)) => answer(&result),
            Ok(Err(e)) => answer(&ag::ProductToolResult { ok: false, message: e, ..Default::default() }),
            Err(_) => answer(&ag::ProductToolResult {
                ok: false,
                message: "no answer within 30 minutes; nothing was written".into(),
                ..Default::default()
            }),
        }
    }

    #[tool(
        description = "Open a GitHub pull request from a branch you pushed. Control Center's rules decide; the request is made outside your sandbox."
    )]
    async fn create_pull_request(&self, Parameters(a): Parameters<PullRequestArgs>) -> CallToolResult {
        self.call(ag::product_tool_call::Call::CreatePullRequest(ag::CreatePullRequest {
            repository: a.repository,
            title: a.title,
            body: a.body,
            head: a.head,
            base: a.base,
            draft: a.draft,
        }))
        .await
    }

    #[tool(
        description = "Create a GitHub issue. Control Center's rules decide; the request is made outside your sandbox."
    )]
    async fn create_ticket(&self, Parameters(a): Parameters<TicketArgs>) -> CallToolResult {
        self.call(ag::product_tool_call::Call::CreateTicket(ag::CreateTicket {
            repository: a.repository,
            title: a.title,
            body: a.body,
        }))
        .await
    }

    #[tool(description = "Comment on a GitHub issue. Control Center's rules decide.")]
    async fn comment_ticket(&self, Parameters(a): Parameters<CommentArgs>) -> CallToolResult {
        self.call(ag::product_tool_call::Call::CommentTicket(ag::CommentTicket {
            repository: a.repository,
            number: a.number,
            body: a.body,
        }))
        .await
    }

    #[tool(description = "Close a GitHub issue, with an optional last comment. Control Center's rules decide.")]
    async fn close_ticket(&self, Parameters(a): Parameters<CloseArgs>) -> CallToolResult {
        self.call(ag::product_tool_call::Call::CloseTicket(ag::CloseTicket {
            repository: a.repository,
            number: a.number,
            comment: a.comment,
        }))
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for ProductTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("control-center", cc_proto::VERSION))
            .with_instructions(
                "Control Center's tools: pull requests and GitHub issues, decided by the person's rules and made \
                 outside your sandbox. No token is needed or available to you.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_errors_exactly_when_nothing_was_written() {
        let done = answer(&ag::ProductToolResult {
            ok: true,
            message: "created issue 3".into(),
            number: 3,
            url: String::new(),
        });
        assert_eq!(done.is_error, Some(false));
        let refused = answer(&ag::ProductToolResult {
            ok: false,
            message: "Control Center policy: no".into(),
            ..Default::default()
        });
        assert_eq!(refused.is_error, Some(true));
    }

    #[test]
    fn the_tools_are_the_four_the_gate_knows() {
        let tools = ProductTools::new("unix:/nonexistent".parse().unwrap());
        let mut names: Vec<String> = tools.tool_router.list_all().into_iter().map(|t| t.name.to_string()).collect();
        names.sort();
        assert_eq!(names, ["close_ticket", "comment_ticket", "create_pull_request", "create_ticket"]);
    }
}
