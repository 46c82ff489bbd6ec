//! The enforcement matrix (DESIGN.md §9): which of the product's layers reach each
//! adapter on this host. Pure: the only fact of the host it takes is whether envelopes
//! exist here (the live probe). Every cell names the test that tries its claim, and
//! `tests/tests/adapters.rs` checks that each named test exists; no cell may claim
//! more than the code does.

use cc_proto::common::v1::Adapter;

/// The layers, in the order every adapter's cells follow.
pub const LAYERS: &[&str] = &[
    "worktree_isolation",
    "path_checked_file_tools",
    "gated_shell_commands",
    "os_envelope",
    "sanitized_environment",
    "network_allowlist_by_the_os",
    "pushes_gated",
    "tracker_writes_gated",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    Yes,
    Partial,
    No,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub layer: &'static str,
    pub coverage: Coverage,
    pub detail: &'static str,
    /// `tests/tests/FILE.rs::NAME`.
    pub proof: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub adapter: Adapter,
    pub description: &'static str,
    pub cells: Vec<Cell>,
}

fn cell(layer: &'static str, coverage: Coverage, detail: &'static str, proof: &'static str) -> Cell {
    Cell { layer, coverage, detail, proof }
}

/// The matrix for a host where envelopes exist (`native`) or not.
pub fn matrix(native: bool) -> Vec<Column> {
    use Coverage::*;
    let envelope = |yes: &'static str, proof: &'static str| {
        if native {
            cell("os_envelope", Yes, yes, proof)
        } else {
            cell("os_envelope", No, "no sandbox backend on this host (see ccctl sandbox probe)", proof)
        }
    };
    let network = |proof: &'static str| {
        if native {
            cell(
                "network_allowlist_by_the_os",
                Yes,
                "an empty network namespace: the run's proxies, bridged in, are the only way out",
                proof,
            )
        } else {
            cell(
                "network_allowlist_by_the_os",
                Partial,
                "without an envelope only programs that honour the proxy variables go through the allowlist",
                "tests/tests/egress.rs::without_an_envelope_the_proxies_need_the_runs_credential",
            )
        }
    };
    let harness = Column {
        adapter: Adapter::Harness,
        description: "the runner's own tools, called one by one (ccctl tool)",
        cells: vec![
            cell(
                "worktree_isolation",
                Yes,
                "every tool works in the conversation's copy",
                "tests/tests/worktrees.rs::work_in_a_copy_never_reaches_the_checkout_or_a_sibling",
            ),
            cell(
                "path_checked_file_tools",
                Yes,
                "read, write, edit, apply_patch, search, find: confined to the run's roots, links never followed",
                "tests/tests/confinement.rs::links_planted_in_the_worktree_never_lead_out",
            ),
            cell(
                "gated_shell_commands",
                Yes,
                "every bash command line is classified and judged before it runs",
                "tests/tests/runs.rs::bash_streams_output_and_status_and_a_denial_runs_nothing",
            ),
            envelope(
                "bash and the runner each in a bubblewrap envelope",
                "tests/tests/envelopes.rs::writes_outside_the_roots_fail_and_the_host_is_unchanged",
            ),
            cell(
                "sanitized_environment",
                Yes,
                "an allowlisted environment; secrets and injection variables never pass",
                "tests/tests/envelopes.rs::the_environment_is_sanitized_whatever_is_passed",
            ),
            network("tests/tests/egress.rs::an_allowed_name_works_on_every_proxy_path_and_the_rest_is_refused"),
            cell(
                "pushes_gated",
                Yes,
                "every pushed ref is decided by the gateway, which holds the only write credential",
                "tests/tests/git_gateway.rs::every_pushed_ref_is_decided_by_the_gate_and_only_allowed_refs_land",
            ),
            cell(
                "tracker_writes_gated",
                Yes,
                "no tracker tool and no token in the envelope",
                "tests/tests/credentials.rs::no_credential_is_reachable_inside_the_runs_envelope",
            ),
        ],
    };
    let claude_code = Column {
        adapter: Adapter::ClaudeCode,
        description: "the claude CLI in the run's overlay envelope, its PreToolUse hook asking the gate",
        cells: vec![
            cell(
                "worktree_isolation",
                Yes,
                "it works in the conversation's copy; the registered checkout is not in its envelope",
                "tests/tests/claude_code.rs::file_writes_are_judged_by_path_rules_and_bounded_by_the_envelope",
            ),
            cell(
                "path_checked_file_tools",
                Partial,
                "Write, Edit, MultiEdit and NotebookEdit are judged through the hook: denied outside the run's \
                 roots or into the registered checkout, then by path rules; its reads are not seen, and its tools \
                 run in the CLI, so the envelope bounds what the names lead to",
                "tests/tests/claude_code.rs::file_writes_are_judged_by_path_rules_and_bounded_by_the_envelope",
            ),
            cell(
                "gated_shell_commands",
                Partial,
                "every Bash call goes to the hook before it runs, and the hook fails closed; but a process the \
                 agent already started may kill the hook's shell, and Claude Code then runs the call unasked (the \
                 envelope still bounds it)",
                "tests/tests/claude_code.rs::bash_calls_are_decided_by_the_gate_before_they_run_and_the_agent_cannot_switch_the_hook_off",
            ),
            envelope(
                "the CLI and everything it starts in a bubblewrap envelope",
                "tests/tests/claude_code.rs::file_writes_are_judged_by_path_rules_and_bounded_by_the_envelope",
            ),
            cell(
                "sanitized_environment",
                Yes,
                "the envelope's environment; the model key comes through cc-hook, never an environment variable",
                "tests/tests/claude_code.rs::bash_calls_are_decided_by_the_gate_before_they_run_and_the_agent_cannot_switch_the_hook_off",
            ),
            network(
                "tests/tests/claude_code.rs::bash_calls_are_decided_by_the_gate_before_they_run_and_the_agent_cannot_switch_the_hook_off",
            ),
            cell(
                "pushes_gated",
                Yes,
                "the hook judges a push's command line, and the gateway every ref it really pushes",
                "tests/tests/claude_code.rs::bash_calls_are_decided_by_the_gate_before_they_run_and_the_agent_cannot_switch_the_hook_off",
            ),
            cell(
                "tracker_writes_gated",
                Yes,
                "the product's MCP tools ask the gate; the write is made outside with a token it never sees",
                "tests/tests/claude_code.rs::the_products_mcp_tools_write_outside_the_envelope_with_a_token_the_agent_never_sees",
            ),
        ],
    };
    let nosandbox_proof = "tests/tests/claude_code.rs::without_an_envelope_the_hook_still_refuses_a_write_outside_the_roots_and_every_event_says_so";
    let nosandbox = Column {
        adapter: Adapter::ClaudeCodeNosandbox,
        description: "the claude CLI on the host, unconfined, with the host's environment",
        cells: vec![
            cell(
                "worktree_isolation",
                No,
                "it starts in the copy; its Write and Edit are refused outside the run's roots, but its Bash may \
                 write anywhere its user may",
                nosandbox_proof,
            ),
            cell(
                "path_checked_file_tools",
                Partial,
                "its writes are judged through the hook, by where they land and by path rules; nothing bounds \
                 what a name leads to",
                nosandbox_proof,
            ),
            cell(
                "gated_shell_commands",
                Partial,
                "its Bash calls go to the hook; nothing stops it from rewriting its own settings, hooks \
                 included, for its next prompt",
                nosandbox_proof,
            ),
            cell("os_envelope", No, "none, on purpose", nosandbox_proof),
            cell("sanitized_environment", No, "the host's environment, as it is", nosandbox_proof),
            cell("network_allowlist_by_the_os", No, "the host's network", nosandbox_proof),
            cell(
                "pushes_gated",
                Partial,
                "only a push named on a Bash command line; its git holds the person's credentials",
                nosandbox_proof,
            ),
            cell(
                "tracker_writes_gated",
                Partial,
                "the product's MCP tools ask the gate; any token the host's environment holds is its own",
                nosandbox_proof,
            ),
        ],
    };
    let acp_files = "tests/tests/acp.rs::an_acp_agents_file_requests_are_confined_and_judged_and_its_own_writes_bounded_by_the_envelope";
    let acp_terminals = "tests/tests/acp.rs::terminals_are_gated_capped_and_killable_and_permissions_go_to_the_gate";
    let acp = Column {
        adapter: Adapter::Acp,
        description: "an Agent Client Protocol agent over stdio in the run's overlay envelope; the product is its client",
        cells: vec![
            cell(
                "worktree_isolation",
                Yes,
                "it works in the conversation's copy; the registered checkout is not in its envelope",
                acp_files,
            ),
            cell(
                "path_checked_file_tools",
                Partial,
                "fs/read_text_file and fs/write_text_file go through the gate and the runner's confinement; a \
                 permission to write is denied outside the run's roots or into the registered checkout; what the \
                 agent's own process reads and writes is bounded only by the envelope",
                acp_files,
            ),
            cell(
                "gated_shell_commands",
                Partial,
                "terminal/create runs through the gate and the harness's bash envelope, with outputByteLimit; a \
                 process the agent starts itself is not asked (the envelope bounds it)",
                acp_terminals,
            ),
            envelope("the agent and everything it starts in a bubblewrap envelope", acp_files),
            cell(
                "sanitized_environment",
                Yes,
                "the envelope's environment: nothing of the supervisor's passes",
                acp_files,
            ),
            network(acp_files),
            cell(
                "pushes_gated",
                Yes,
                "its envelope's git, and its terminals', reach only the gateway, which decides every pushed ref \
                 and holds the only write credential",
                "tests/tests/git_gateway.rs::every_pushed_ref_is_decided_by_the_gate_and_only_allowed_refs_land",
            ),
            cell(
                "tracker_writes_gated",
                Yes,
                "no token in the envelope; the product's MCP tools (cc-mcp, offered in session/new) ask the gate",
                acp_files,
            ),
        ],
    };
    vec![harness, claude_code, nosandbox, acp]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_adapter_has_a_cell_per_layer_in_order_with_a_proof() {
        for native in [true, false] {
            for column in matrix(native) {
                let layers: Vec<&str> = column.cells.iter().map(|c| c.layer).collect();
                assert_eq!(layers, LAYERS, "{}", column.adapter.name());
                for c in &column.cells {
                    assert!(c.proof.starts_with("tests/tests/") && c.proof.contains(".rs::"), "{c:?}");
                }
            }
        }
    }

    #[test]
    fn every_adapter_has_its_column_in_order() {
        let columns: Vec<Adapter> = matrix(true).iter().map(|c| c.adapter).collect();
        assert_eq!(columns, Adapter::ALL);
    }

    #[test]
    fn without_a_backend_no_envelope_is_claimed() {
        for column in matrix(false) {
            let envelope = column.cells.iter().find(|c| c.layer == "os_envelope").unwrap();
            assert_eq!(envelope.coverage, Coverage::No, "{}", column.adapter.name());
            let network = column.cells.iter().find(|c| c.layer == "network_allowlist_by_the_os").unwrap();
            assert_ne!(network.coverage, Coverage::Yes, "{}", column.adapter.name());
        }
    }
}
