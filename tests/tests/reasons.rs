//! Every refusal a client must tell apart carries a `google.rpc.ErrorInfo` with domain
//! `cc.dev` and a stable reason (docs/reference/api.md, "Error reasons"). Each is triggered here the
//! way a client would meet it, and read back from the status details, never from the
//! message. (LINK_IN_ROOT is met in `envelopes/links.rs`, REFLINK_UNSUPPORTED on the
//! tests' own ext4 in `worktrees.rs`.)

use std::collections::HashMap;

use cc_proto::reasons::{self, reason_of};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_tests::fs::make_checkout;
use cc_tests::runs::fixture;
use cc_tests::{Options, Supervisor};
use tokio_stream::StreamExt;
use tonic::Code;

/// The reason and metadata of a refusal, checking its code.
fn refusal<T: std::fmt::Debug>(result: Result<T, tonic::Status>, code: Code) -> (String, HashMap<String, String>) {
    let status = result.expect_err("a refusal");
    assert_eq!(status.code(), code, "{status:?}");
    reason_of(&status).unwrap_or_else(|| panic!("no ErrorInfo reason in {status:?}"))
}

/// A tool call's refusal: at the call, or as the stream's first item.
async fn call_refusal(client: &mut cc_client::Client, run_id: &str, tool: Tool) -> tonic::Status {
    let request = pb::CallToolRequest { run_id: run_id.to_owned(), tool: Some(tool) };
    match client.runs.call_tool(request).await {
        Err(status) => status,
        Ok(stream) => match stream.into_inner().next().await {
            Some(Err(status)) => status,
            other => panic!("expected a refusal, got {other:?}"),
        },
    }
}

fn bash(command: &str) -> Tool {
    Tool::Bash(pb::BashArgs { command: command.into(), timeout_seconds: 0 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_runs_and_their_tools_carry_their_reason() {
    let f = fixture(None);
    let run = f.start_run("chat");
    let mut client = f.sup.client().await;

    // The gate's denial, with the effect and what decided in its metadata.
    let status = call_refusal(&mut client, &run, bash("sudo id")).await;
    assert_eq!(status.code(), Code::PermissionDenied);
    let (reason, metadata) = reason_of(&status).expect("a reason");
    assert_eq!(reason, reasons::GATE_DENIED);
    assert_eq!(metadata["effect"], "run_command", "{metadata:?}");
    assert_eq!(metadata["source"], "command policy", "{metadata:?}");
    assert!(status.message().starts_with("denied: "), "the message stays for people: {status:?}");

    // An ask with nobody to answer it.
    let status = call_refusal(&mut client, &run, bash("npm install left-pad")).await;
    assert_eq!(
        (status.code(), reason_of(&status).map(|r| r.0)),
        (Code::PermissionDenied, Some(reasons::NO_APPROVER.into()))
    );

    // The runner's confinement.
    let read = Tool::Read(cc_proto::tools::v1::ReadArgs { path: b"/etc/passwd".to_vec(), offset: 0, limit: 0 });
    let status = call_refusal(&mut client, &run, read).await;
    assert_eq!(
        (status.code(), reason_of(&status).map(|r| r.0)),
        (Code::PermissionDenied, Some(reasons::CONFINEMENT_REFUSED.into()))
    );

    // No such run; a run that is over.
    let (reason, metadata) =
        refusal(client.runs.get_run(pb::GetRunRequest { run_id: "r-nope".into() }).await, Code::NotFound);
    assert_eq!((reason.as_str(), metadata["run_id"].as_str()), (reasons::RUN_NOT_FOUND, "r-nope"));
    client.runs.stop_run(pb::StopRunRequest { run_id: run.clone() }).await.expect("stop");
    let status = call_refusal(&mut client, &run, bash("true")).await;
    let (reason, metadata) = reason_of(&status).expect("a reason");
    assert_eq!(
        (status.code(), reason.as_str(), metadata["state"].as_str()),
        (Code::FailedPrecondition, reasons::RUN_ENDED, "stopped")
    );

    // A conversation that does not exist.
    let start = |conversation_id: &str, network| pb::StartRunRequest {
        conversation_id: conversation_id.into(),
        network,
        ..Default::default()
    };
    let (reason, _) = refusal(client.runs.start_run(start("c-nope", false)).await, Code::NotFound);
    assert_eq!(reason, reasons::CONVERSATION_NOT_FOUND);
    // An adapter this supervisor does not know (a newer client's) is refused in one line.
    let unknown = pb::StartRunRequest { adapter: 99, ..start("c-nope", false) };
    let status = client.runs.start_run(unknown).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("unknown adapter 99: the adapters are harness"), "{}", status.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_the_registry_and_the_helpers_carry_their_reason() {
    let f = fixture(None);
    let mut client = f.sup.client().await;

    let workspace = |id: &str| pb::CreateWorkspaceRequest { workspace_id: id.into() };
    let (reason, metadata) =
        refusal(client.workspaces.create_workspace(workspace("default")).await, Code::AlreadyExists);
    assert_eq!((reason.as_str(), metadata["name"].as_str()), (reasons::NAME_TAKEN, "default"));

    let bytes = |p: &std::path::Path| p.as_os_str().as_encoded_bytes().to_vec();
    let (checkout, other) = (bytes(&f.checkout), bytes(&make_checkout(&f.tmp.path().join("other"))));
    let register = |workspace_id: &str, name: &str| pb::CreateRepositoryRequest {
        workspace_id: workspace_id.into(),
        path: checkout.clone(),
        name: name.into(),
    };
    let another = pb::CreateRepositoryRequest { workspace_id: String::new(), path: other, name: "demo".into() };
    let (reason, metadata) = refusal(client.repositories.create_repository(another).await, Code::AlreadyExists);
    assert_eq!((reason.as_str(), metadata["name"].as_str()), (reasons::NAME_TAKEN, "demo"));
    let (reason, metadata) =
        refusal(client.repositories.create_repository(register("", "again")).await, Code::AlreadyExists);
    assert_eq!((reason.as_str(), metadata["name"].as_str()), (reasons::ALREADY_REGISTERED, "demo"));
    let (reason, metadata) =
        refusal(client.repositories.create_repository(register("nope", "x")).await, Code::NotFound);
    assert_eq!((reason.as_str(), metadata["workspace_id"].as_str()), (reasons::WORKSPACE_NOT_FOUND, "nope"));

    let delete = pb::DeleteRepositoryRequest { workspace_id: String::new(), name: "nope".into() };
    let (reason, metadata) = refusal(client.repositories.delete_repository(delete).await, Code::NotFound);
    assert_eq!((reason.as_str(), metadata["name"].as_str()), (reasons::REPOSITORY_NOT_FOUND, "nope"));
    let delete = pb::DeleteConversationRequest { conversation_id: "c-nope".into() };
    let (reason, metadata) = refusal(client.conversations.delete_conversation(delete).await, Code::NotFound);
    assert_eq!((reason.as_str(), metadata["conversation_id"].as_str()), (reasons::CONVERSATION_NOT_FOUND, "c-nope"));

    // A workspace's network allowlist: its entries are canonical, listed once.
    let add = |entry: &str| pb::AddEgressEntryRequest { workspace_id: String::new(), entry: entry.into() };
    let added = client.workspaces.add_egress_entry(add("Docs.Example.Test.:443")).await.unwrap().into_inner();
    assert_eq!(added.workspace.unwrap().egress_allowlist, ["docs.example.test:443"]);
    let (reason, metadata) =
        refusal(client.workspaces.add_egress_entry(add("docs.example.test:443")).await, Code::AlreadyExists);
    assert_eq!((reason.as_str(), metadata["entry"].as_str()), (reasons::ALREADY_LISTED, "docs.example.test:443"));
    let remove = |entry: &str| pb::RemoveEgressEntryRequest { workspace_id: String::new(), entry: entry.into() };
    let (reason, _) = refusal(client.workspaces.remove_egress_entry(remove("docs.example.test")).await, Code::NotFound);
    assert_eq!(reason, reasons::NOT_LISTED);
    assert_eq!(client.workspaces.add_egress_entry(add("*.com")).await.unwrap_err().code(), Code::InvalidArgument);
    client.workspaces.remove_egress_entry(remove("docs.example.test:443")).await.unwrap();

    let link = |workspace_id: &str, repo: &str| pb::LinkGitHubRepositoryRequest {
        workspace_id: workspace_id.into(),
        github_repository: repo.into(),
    };
    let linked = client.workspaces.link_git_hub_repository(link("", "Octo/Project")).await.unwrap().into_inner();
    assert_eq!(linked.workspace.unwrap().linked_github_repositories, ["octo/project"]);
    let listed = client.workspaces.list_workspaces(pb::ListWorkspacesRequest {}).await.unwrap().into_inner();
    assert_eq!(listed.workspaces[0].linked_github_repositories, ["octo/project"]);
    let (reason, metadata) =
        refusal(client.workspaces.link_git_hub_repository(link("default", "octo/PROJECT")).await, Code::AlreadyExists);
    assert_eq!((reason.as_str(), metadata["github_repository"].as_str()), (reasons::ALREADY_LINKED, "octo/project"));
    let (reason, _) = refusal(client.workspaces.link_git_hub_repository(link("nope", "o/r")).await, Code::NotFound);
    assert_eq!(reason, reasons::WORKSPACE_NOT_FOUND);
    let bad = client.workspaces.link_git_hub_repository(link("", "https://github.com/o/r")).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("must be OWNER/NAME"), "{}", bad.message());
    let unlink =
        |repo: &str| pb::UnlinkGitHubRepositoryRequest { workspace_id: String::new(), github_repository: repo.into() };
    let unlinked = client.workspaces.unlink_git_hub_repository(unlink("octo/project")).await.unwrap().into_inner();
    assert!(unlinked.workspace.unwrap().linked_github_repositories.is_empty());
    let (reason, metadata) =
        refusal(client.workspaces.unlink_git_hub_repository(unlink("octo/project")).await, Code::NotFound);
    assert_eq!((reason.as_str(), metadata["github_repository"].as_str()), (reasons::LINK_NOT_FOUND, "octo/project"));

    let restart = pb::RestartHelperRequest { name: "broker2".into() };
    let (reason, metadata) = refusal(client.system.restart_helper(restart).await, Code::InvalidArgument);
    assert_eq!((reason.as_str(), metadata["name"].as_str()), (reasons::HELPER_NOT_FOUND, "broker2"));
}

/// A call that needs sandboxd while sandboxd cannot start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_needs_a_helper_that_is_down_says_which() {
    // A budget of one: it is failed, not restarting, by the time the call gives up.
    let config = "[restart]\nbudget = 1\n[helpers.sandboxd]\nprogram = \"/bin/false\"\n".to_owned();
    let sup = Supervisor::start(Options { config: Some(config), ..Default::default() });
    let mut client = sup.client().await;
    let (reason, metadata) = refusal(client.sandbox.get_probe(pb::GetProbeRequest {}).await, Code::Unavailable);
    assert_eq!((reason.as_str(), metadata["helper"].as_str()), (reasons::HELPER_UNAVAILABLE, "sandboxd"));
}

#[test]
fn every_reason_is_upper_snake_and_listed_in_the_api_reference() {
    let reference = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference/api.md")).unwrap();
    for reason in reasons::ALL {
        assert!(reason.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{reason}");
        assert!(reference.contains(&format!("`{reason}`")), "{reason} is not in docs/reference/api.md's list");
    }
}
