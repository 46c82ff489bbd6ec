use super::*;
use crate::evaluate::Action;

fn push(refs: &[&str], force: bool) -> Action {
    Action {
        effects: [Effect::PushRemote].into(),
        scope: Scope {
            repo: Some("webapp".into()),
            refs: refs.iter().map(|r| (*r).to_owned()).collect(),
            force,
            ..Scope::default()
        },
        ..Action::default()
    }
}

fn bash(line: &str, mode: Mode) -> Action {
    Action::bash(line, mode)
}

fn decide(action: &Action, sets: &[&RuleSet]) -> Decision {
    evaluate(action, sets).decision
}

/// The grant for `action`, loaded as the gate loads it.
fn granted(action: &Action, sets: &[&RuleSet]) -> RuleSet {
    let text = grant(action, sets, "approved by alice").expect("grantable");
    RuleSet::parse(&text, "approved.toml").expect("a grant loads")
}

#[test]
fn a_push_approval_covers_that_push_and_not_a_wider_one() {
    let asked = push(&["main"], false);
    assert_eq!(decide(&asked, &[]), Decision::Ask);
    let grant = granted(&asked, &[]);
    assert_eq!(grant.rules.len(), 1);
    assert_eq!(decide(&asked, &[&grant]), Decision::Allow);
    assert_eq!(grant.rules[0].reason.as_deref(), Some("approved by alice"));
    // Not a force push, not a deletion, not another ref with it, not another repository.
    assert_eq!(decide(&push(&["main"], true), &[&grant]), Decision::Ask);
    let mut delete = push(&["main"], false);
    delete.scope.delete = true;
    assert_eq!(decide(&delete, &[&grant]), Decision::Ask);
    assert_eq!(decide(&push(&["main", "refs/tags/v1"], false), &[&grant]), Decision::Ask);
    let mut elsewhere = push(&["main"], false);
    elsewhere.scope.repo = Some("billing".into());
    assert_eq!(decide(&elsewhere, &[&grant]), Decision::Ask);
    // Pushes that are not named are never granted.
    let mut unnamed = push(&[], false);
    unnamed.scope.refs_unknown = true;
    assert_eq!(grant_err(&unnamed, &[]), NotGrantable::NothingToPin(Effect::PushRemote));
}

#[test]
fn several_refs_are_granted_together_only() {
    let asked = push(&["main", "refs/tags/v1"], false);
    let grant = granted(&asked, &[]);
    assert_eq!(decide(&asked, &[&grant]), Decision::Allow);
    assert_eq!(decide(&push(&["main"], false), &[&grant]), Decision::Allow);
    assert_eq!(decide(&push(&["main", "refs/tags/v2"], false), &[&grant]), Decision::Ask);
}

fn grant_err(action: &Action, sets: &[&RuleSet]) -> NotGrantable {
    grant(action, sets, "r").expect_err("not grantable")
}

#[test]
fn a_command_lines_host_is_granted_and_no_other() {
    let asked = bash("curl -s https://api.example.org/v1/items", Mode::Chat);
    assert_eq!(decide(&asked, &[]), Decision::Ask);
    let grant = granted(&asked, &[]);
    assert_eq!(decide(&asked, &[&grant]), Decision::Allow);
    assert_eq!(decide(&bash("curl -s https://api.example.org/other", Mode::Chat), &[&grant]), Decision::Allow);
    assert_eq!(decide(&bash("curl -s https://evil.example.org/", Mode::Chat), &[&grant]), Decision::Ask);
}

#[test]
fn what_cannot_be_pinned_or_is_not_the_approvers_to_widen_is_refused() {
    for mode in [Mode::Plan, Mode::Review, Mode::Orchestrate] {
        let action = bash("curl -s https://api.example.org/", mode);
        assert_eq!(grant_err(&action, &[]), NotGrantable::ReadOnlyMode(mode));
    }
    assert_eq!(
        grant_err(&bash("npm install left-pad", Mode::Chat), &[]),
        NotGrantable::NothingToPin(Effect::InstallPackage)
    );
    let glob = push(&["main", "feature/*"], false);
    assert!(matches!(grant_err(&glob, &[]), NotGrantable::NotLiteral { what: "ref", .. }));
    let braces = push(&["main", "{a,x}"], false);
    assert!(matches!(grant_err(&braces, &[]), NotGrantable::NotLiteral { .. }));
    let rules =
        RuleSet::parse("[[rule]]\neffect = \"push_remote\"\nbranch = \"release\"\ndecision = \"ask\"\n", "rules.toml")
            .unwrap();
    assert_eq!(grant_err(&push(&["release"], false), &[&rules]), NotGrantable::RuleAsks("rules.toml:1".into()));
    // A network client whose host is not on its command line.
    let apply = bash("kubectl apply -f k8s/", Mode::Chat);
    assert_eq!(grant_err(&apply, &[]), NotGrantable::NothingToPin(Effect::AccessNetwork));
}

#[test]
fn the_approved_file_keeps_blocks_that_revoke_alone() {
    let first = grant(&push(&["main"], false), &[], "approved by alice").unwrap();
    let second = grant(&bash("curl https://api.example.org/", Mode::Chat), &[], "approved by bob").unwrap();
    let text = append("", &next_id(""), "by alice, question q1: git push origin main", &first);
    assert!(text.starts_with(PREAMBLE));
    let text =
        append(&text, &next_id(&text), "by bob\n[[rule]]\neffect = \"push_remote\"\ndecision = \"allow\"", &second);
    let found = blocks(&text);
    assert_eq!(found.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(), ["a1", "a2"]);
    assert!(found[1].granted.starts_with("by bob [[rule]]"), "the header stays one line: {}", found[1].granted);
    let set = RuleSet::parse(&text, "approved.toml").unwrap();
    assert_eq!(set.rules.len(), 2, "a hostile header adds no rule");
    assert_eq!(found[0].rules(&set).len(), 1);
    assert_eq!(found[1].rules(&set)[0].effect, Effect::AccessNetwork);
    let without = revoke(&text, "a1").unwrap();
    let set = RuleSet::parse(&without, "approved.toml").unwrap();
    assert_eq!(set.rules.len(), 1);
    assert_eq!(set.rules[0].effect, Effect::AccessNetwork);
    assert_eq!(blocks(&without).len(), 1);
    assert_eq!(next_id(&without), "a3", "ids are not reused while a later block is kept");
    assert_eq!(revoke(&without, "a1"), None);
}

#[test]
fn scopes_read_back() {
    for s in [ApprovalScope::Once, ApprovalScope::Run, ApprovalScope::Always] {
        assert_eq!(s.as_str().parse::<ApprovalScope>(), Ok(s));
    }
    assert!("forever".parse::<ApprovalScope>().is_err());
}
