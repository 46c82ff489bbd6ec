//! The product's own tools, asked for by a run's agent through its MCP server (cc-mcp,
//! inside the envelope) and its agent socket: open a pull request, create, comment on
//! and close an issue. The gate decides each (open_pull_request,
//! write_external_tracker, on the repository's gate name); the write is made here,
//! outside every envelope, with a credential the agent never sees: the run's read
//! token for a pull request (it may work with pull requests, never push), a token for
//! this one issues write, revoked once GitHub has answered, for the rest.
//!
//! Pure here: what GitHub is sent for each call ([`github_request`]). The calls are
//! below, in [`ToolCalls::call_product_tool`].

use std::collections::BTreeSet;

use cc_policy::{Action, Decision, Effect, Scope};
use cc_proto::agent::v1::{ProductToolCall, ProductToolResult, product_tool_call::Call};
use cc_proto::broker::v1 as bk;
use serde_json::{Value, json};

use super::git_gateway::GitHubRepo;
use super::tools::ToolCalls;
use super::{LiveRun, RunError};
use crate::gate::Request as GateRequest;
use crate::ids::RunId;

/// How long GitHub may take to answer one write.
const GITHUB_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
/// A title, a body or a comment longer than this is refused (GitHub's own limit is 65536).
const MAX_TEXT: usize = 65536;

/// One write to GitHub's REST API.
#[derive(Debug, PartialEq)]
pub struct GitHubRequest {
    pub method: &'static str,
    /// Below the API's base URL.
    pub path: String,
    pub body: Value,
    pub effect: Effect,
    /// The repository (`owner/name`) it writes.
    pub repository: String,
    /// What an approver is shown.
    pub summary: String,
    /// What the agent is told once it is done.
    pub done: &'static str,
}

fn checked(field: &str, text: &str, required: bool) -> Result<(), String> {
    if required && text.trim().is_empty() {
        return Err(format!("the {field} is empty"));
    }
    if text.len() > MAX_TEXT || text.contains('\0') {
        return Err(format!("the {field} is over {MAX_TEXT} bytes or holds a NUL"));
    }
    Ok(())
}

/// The run's repository a call names: one of its GitHub repositories, or, when it
/// names none, its only one.
pub fn repository<'a>(named: &str, known: &'a [GitHubRepo]) -> Result<&'a GitHubRepo, String> {
    if named.is_empty() {
        return match known {
            [only] => Ok(only),
            [] => Err("this run has no GitHub repository (no checkout's origin is on GitHub, none is linked)".into()),
            _ => Err(format!(
                "name the repository: this run has {}",
                known.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
        };
    }
    let lower = named.to_ascii_lowercase();
    known.iter().find(|r| r.name == lower).ok_or_else(|| {
        format!("{named} is neither the origin of one of this run's checkouts nor linked to its workspace")
    })
}

/// What GitHub is sent for `call` on `repo`.
pub fn github_request(call: &Call, repo: &GitHubRepo) -> Result<GitHubRequest, String> {
    let name = repo.name.clone();
    let issue = |n: u64| if n == 0 { Err("the issue number is missing".to_owned()) } else { Ok(n) };
    Ok(match call {
        Call::CreatePullRequest(pr) => {
            checked("title", &pr.title, true)?;
            checked("body", &pr.body, false)?;
            if pr.head.is_empty() || pr.head.len() > 255 || pr.head.chars().any(|c| c.is_control() || c == ' ') {
                return Err("the head branch is missing or not a branch name".into());
            }
            let base = match (&pr.base, &repo.default_branch) {
                (b, _) if !b.is_empty() => b.clone(),
                (_, Some(default)) => default.clone(),
                _ => "main".into(),
            };
            GitHubRequest {
                method: "POST",
                path: format!("/repos/{name}/pulls"),
                body: json!({ "title": pr.title, "body": pr.body, "head": pr.head, "base": base, "draft": pr.draft }),
                effect: Effect::OpenPullRequest,
                summary: format!("open a pull request on {name}: {} ({} into {base})", pr.title, pr.head),
                repository: name,
                done: "opened pull request",
            }
        }
        Call::CreateTicket(t) => {
            checked("title", &t.title, true)?;
            checked("body", &t.body, false)?;
            GitHubRequest {
                method: "POST",
                path: format!("/repos/{name}/issues"),
                body: json!({ "title": t.title, "body": t.body }),
                effect: Effect::WriteExternalTracker,
                summary: format!("create an issue on {name}: {}", t.title),
                repository: name,
                done: "created issue",
            }
        }
        Call::CommentTicket(c) => {
            checked("comment", &c.body, true)?;
            let number = issue(c.number)?;
            GitHubRequest {
                method: "POST",
                path: format!("/repos/{name}/issues/{number}/comments"),
                body: json!({ "body": c.body }),
                effect: Effect::WriteExternalTracker,
                summary: format!("comment on {name}#{number}"),
                repository: name,
                done: "commented on issue",
            }
        }
        Call::CloseTicket(c) => {
            checked("comment", &c.comment, false)?;
            let number = issue(c.number)?;
            GitHubRequest {
                method: "PATCH",
                path: format!("/repos/{name}/issues/{number}"),
                body: json!({ "state": "closed" }),
                effect: Effect::WriteExternalTracker,
                summary: format!("close {name}#{number}"),
                repository: name,
                done: "closed issue",
            }
        }
    })
}

fn refused(message: impl Into<String>) -> ProductToolResult {
    ProductToolResult { ok: false, message: message.into(), ..Default::default() }
}

impl ToolCalls {
    pub async fn call_product_tool(
        &self,
        run_id: &RunId,
        call: ProductToolCall,
    ) -> Result<ProductToolResult, RunError> {
        let run = self.runs.require_live(run_id)?;
        let Some(call) = call.call else { return Ok(refused("the call names no tool")) };
        let repo = match repository(call_repository(&call), &run.github_repositories) {
            Ok(repo) => repo.clone(),
            Err(why) => return Ok(refused(why)),
        };
        let request = match github_request(&call, &repo) {
            Ok(r) => r,
            Err(why) => return Ok(refused(why)),
        };
        if let Err(why) = self.ask_product_gate(&run, &repo, &request).await {
            return Ok(refused(why));
        }
        // A closing comment is its own write, before the issue closes.
        if let Call::CloseTicket(c) = &call
            && !c.comment.is_empty()
        {
            let comment = GitHubRequest {
                method: "POST",
                path: format!("/repos/{}/issues/{}/comments", repo.name, c.number),
                body: json!({ "body": c.comment }),
                ..github_request(&call, &repo).map_err(RunError::Internal)?
            };
            let commented = self.write_github(&run, &comment).await;
            if !commented.ok {
                return Ok(commented);
            }
        }
        let result = self.write_github(&run, &request).await;
        self.runs.events().record(
            "product_tool",
            &format!("run:{}", run.record.id),
            json!({
                "tool": tool_name(&call), "repository": request.repository, "ok": result.ok,
                "number": result.number, "url": result.url, "message": result.message,
            }),
        );
        Ok(result)
    }

    /// The gate, with the call's one effect on its repository: `Err` with the reason
    /// the agent is shown for anything but an allow.
    async fn ask_product_gate(&self, run: &LiveRun, repo: &GitHubRepo, request: &GitHubRequest) -> Result<(), String> {
        let action = Action {
            effects: BTreeSet::from([request.effect]),
            scope: Scope {
                repo: Some(repo.gate_name.clone()),
                default_branch: repo.default_branch.clone(),
                ..Default::default()
            },
            mode: run.record.mode,
            tool: None,
            command_line: None,
            egress: run.record.network,
            pushes_through_gateway: false,
        };
        let asked = GateRequest {
            action: action.clone(),
            workspace: run.record.workspace.clone(),
            run_id: run.record.id.clone(),
            summary: request.summary.clone(),
        };
        let decided = self.runs.gate().decide(asked).await;
        match decided.decision {
            Decision::Allow => Ok(()),
            _ => Err(decided.for_agent(&action)),
        }
    }

    /// Makes one write with the credential its kind needs; never an error, since the
    /// agent is told what happened either way.
    async fn write_github(&self, run: &LiveRun, request: &GitHubRequest) -> ProductToolResult {
        let issues = request.effect == Effect::WriteExternalTracker;
        let token = match self.github_token(&run.record.id, &request.repository, issues).await {
            Ok(token) => token,
            Err(why) => return refused(format!("no credential for {}: {why}", request.repository)),
        };
        let url = format!("{}{}", self.runs.config().github_api_url.trim_end_matches('/'), request.path);
        let client = match reqwest::Client::builder().timeout(GITHUB_DEADLINE).build() {
            Ok(c) => c,
            Err(e) => return refused(format!("cannot make an HTTPS client: {e}")),
        };
        let method = reqwest::Method::from_bytes(request.method.as_bytes()).unwrap_or(reqwest::Method::POST);
        let sent = client
            .request(method, &url)
            .bearer_auth(&token.0)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .header("user-agent", "control-center")
            .json(&request.body)
            .send()
            .await;
        if let Some(lease) = token.1 {
            self.revoke_issues_token(&run.record.id, lease).await;
        }
        let response = match sent {
            Ok(r) => r,
            Err(e) => return refused(format!("GitHub could not be reached: {e}")),
        };
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or_default();
        if !status.is_success() {
            let said = answer["message"].as_str().unwrap_or("no message");
            return refused(format!("GitHub answered {status}: {said}"));
        }
        let number = answer["number"].as_u64().unwrap_or(0);
        let page = answer["html_url"].as_str().unwrap_or_default().to_owned();
        ProductToolResult {
            ok: true,
            message: format!("{} {} {page}", request.done, number).trim().to_owned(),
            number,
            url: page,
        }
    }

    /// The token and, for a one-write issues token, its lease (to revoke).
    async fn github_token(&self, run: &str, repository: &str, issues: bool) -> Result<(String, Option<i64>), String> {
        let mut broker = self.runs.channels().broker().await.map_err(|s| s.message().to_owned())?;
        let channels = self.runs.channels().clone();
        let helper = crate::helpers::HelperKind::Broker;
        if issues {
            let call = broker.issue_write_token(bk::IssueWriteTokenRequest {
                run_id: run.to_owned(),
                repository: repository.to_owned(),
                access: bk::WriteAccess::Issues as i32,
            });
            let r = channels.within(helper, "IssueWriteToken", call).await.map_err(|s| s.message().to_owned())?;
            let r = r.into_inner();
            Ok((r.token, Some(r.lease_id)))
        } else {
            let call = broker.get_read_token(bk::GetReadTokenRequest { run_id: run.to_owned() });
            let r = channels.within(helper, "GetReadToken", call).await.map_err(|s| s.message().to_owned())?;
            Ok((r.into_inner().token, None))
        }
    }

    async fn revoke_issues_token(&self, run: &str, lease_id: i64) {
        let revoke = async {
            let mut broker = self.runs.channels().broker().await?;
            let call = broker.revoke_write_token(bk::RevokeWriteTokenRequest { run_id: run.to_owned(), lease_id });
            self.runs.channels().within(crate::helpers::HelperKind::Broker, "RevokeWriteToken", call).await
        };
        if let Err(e) = revoke.await {
            tracing::warn!(run, lease = lease_id, error = %e.message(), "an issues token was not revoked now; the run's end revokes it");
        }
    }
}

fn call_repository(call: &Call) -> &str {
    match call {
        Call::CreatePullRequest(c) => &c.repository,
        Call::CreateTicket(c) => &c.repository,
        Call::CommentTicket(c) => &c.repository,
        Call::CloseTicket(c) => &c.repository,
    }
}

fn tool_name(call: &Call) -> &'static str {
    match call {
        Call::CreatePullRequest(_) => "create_pull_request",
        Call::CreateTicket(_) => "create_ticket",
        Call::CommentTicket(_) => "comment_ticket",
        Call::CloseTicket(_) => "close_ticket",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cc_proto::agent::v1 as ag;

    fn repo(name: &str) -> GitHubRepo {
        GitHubRepo { name: name.into(), gate_name: "demo".into(), default_branch: Some("trunk".into()) }
    }

    #[test]
    fn a_call_reaches_only_the_runs_own_repositories() {
        let known = [repo("octo/project")];
        assert_eq!(repository("", &known).unwrap().name, "octo/project");
        assert_eq!(repository("Octo/Project", &known).unwrap().name, "octo/project");
        assert!(repository("octo/other", &known).unwrap_err().contains("neither the origin"));
        assert!(repository("", &[]).unwrap_err().contains("no GitHub repository"));
        let two = [repo("octo/a"), repo("octo/b")];
        assert!(repository("", &two).unwrap_err().contains("name the repository"));
    }

    #[test]
    fn each_tool_is_one_write_with_its_effect() {
        let r = repo("octo/project");
        let pr = Call::CreatePullRequest(ag::CreatePullRequest {
            title: "t".into(),
            head: "feature".into(),
            ..Default::default()
        });
        let sent = github_request(&pr, &r).unwrap();
        assert_eq!(
            (sent.method, sent.path.as_str(), sent.effect),
            ("POST", "/repos/octo/project/pulls", Effect::OpenPullRequest)
        );
        assert_eq!(sent.body["base"], "trunk", "the default branch when none is named");
        let ticket =
            Call::CreateTicket(ag::CreateTicket { title: "bug".into(), body: "b".into(), ..Default::default() });
        let sent = github_request(&ticket, &r).unwrap();
        assert_eq!((sent.path.as_str(), sent.effect), ("/repos/octo/project/issues", Effect::WriteExternalTracker));
        let close = Call::CloseTicket(ag::CloseTicket { number: 7, ..Default::default() });
        let sent = github_request(&close, &r).unwrap();
        assert_eq!((sent.method, sent.path.as_str()), ("PATCH", "/repos/octo/project/issues/7"));
        assert_eq!(sent.body, json!({ "state": "closed" }));
        let comment = Call::CommentTicket(ag::CommentTicket { number: 7, body: "x".into(), ..Default::default() });
        assert_eq!(github_request(&comment, &r).unwrap().path, "/repos/octo/project/issues/7/comments");
    }

    #[test]
    fn bad_calls_are_refused_before_the_gate() {
        let r = repo("octo/project");
        for call in [
            Call::CreateTicket(ag::CreateTicket { title: " ".into(), ..Default::default() }),
            Call::CreateTicket(ag::CreateTicket { title: "x".repeat(MAX_TEXT + 1), ..Default::default() }),
            Call::CreatePullRequest(ag::CreatePullRequest {
                title: "t".into(),
                head: "a b".into(),
                ..Default::default()
            }),
            Call::CreatePullRequest(ag::CreatePullRequest { title: "t".into(), ..Default::default() }),
            Call::CommentTicket(ag::CommentTicket { number: 0, body: "x".into(), ..Default::default() }),
            Call::CloseTicket(ag::CloseTicket { number: 0, ..Default::default() }),
        ] {
            assert!(github_request(&call, &r).is_err(), "{call:?}");
        }
    }
}
