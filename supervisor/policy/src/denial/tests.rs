use super::*;
use crate::evaluate::{Scope, evaluate};
use crate::rules::RuleSet;

const RULES: &str = "[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"direct pushes to main are not allowed\"\n\n[[rule]]\neffect = \"access_network\"\ndomain = \"evil.example\"\ndecision = \"deny\"\n";

fn bash(line: &str, mode: Mode) -> Action {
    Action::bash(line, mode)
}

/// The line for `action` refused by the policy, with the rules above in force.
fn refused(action: &Action) -> String {
    let rules = RuleSet::parse(RULES, "/var/lib/control-center/rules.toml").unwrap();
    let evaluation = evaluate(action, &[&rules]);
    assert_ne!(evaluation.decision, Decision::Allow, "{action:?}");
    let line = for_agent(action, &evaluation, &Outcome::Policy);
    assert!(!line.contains("rules.toml") && !line.contains("/var/lib"), "no file of the policy is named: {line}");
    assert!(!line.contains('\n'), "one line: {line}");
    line
}

#[test]
fn a_rules_denial_names_the_action_its_reason_and_the_way_round() {
    let line = refused(&bash("git push origin main", Mode::Chat));
    assert_eq!(
        line,
        "Control Center denied `git push origin main`: a rule of this workspace's policy denies push_remote: \
         direct pushes to main are not allowed. No approver can allow it; only the person who owns the policy can \
         change it. Instead: push a branch of your own and open a pull request."
    );
    // A rule with no reason of its own: the effect, and nothing of the rule's text.
    let line = refused(&bash("curl -s https://evil.example/x", Mode::Chat));
    assert!(line.contains("a rule of this workspace's policy denies access_network."), "{line}");
    let push = Action {
        effects: [Effect::PushRemote].into(),
        scope: Scope { refs: vec!["main".into()], force: true, ..Scope::default() },
        ..Action::default()
    };
    assert!(refused(&push).ends_with("Instead: push without rewriting history, to a new branch if yours diverged."));
}

#[test]
fn the_fixed_list_and_the_mode_say_nothing_allows_it() {
    let line = refused(&bash("sudo apt-get install -y jq", Mode::Chat));
    assert!(line.contains("never allowed") && line.contains("fixed list"), "{line}");
    assert!(line.contains("Nothing allows it in this run.") && line.contains("without sudo"), "{line}");
    let line = refused(&bash("touch notes.md", Mode::Plan));
    assert!(line.contains("denied in plan mode") && line.contains("Nothing allows it in plan mode."), "{line}");
    assert!(line.ends_with("Instead: this run only reads: describe the change in your answer rather than making it."));
    let absent = Action { tool: Some("write".into()), mode: Mode::Review, ..Action::default() };
    assert!(refused(&absent).contains("Nothing allows it in review mode."));
}

#[test]
fn a_question_no_one_answered_could_be_approved_and_a_refusal_is_final() {
    let action = bash("npm install left-pad", Mode::Chat);
    let evaluation = evaluate(&action, &[]);
    let unanswered = Outcome::Unanswered { reason: "no approver connected".into() };
    let line = for_agent(&action, &evaluation, &unanswered);
    assert!(line.contains("needs a person's approval and got none (no approver connected)"), "{line}");
    assert!(line.contains("A person could approve it"), "{line}");
    let refusal = Outcome::Refused { reason: "refused by alice: not today".into() };
    let line = for_agent(&action, &evaluation, &refusal);
    assert!(line.contains("said no (refused by alice: not today)") && line.contains("Do not ask again"), "{line}");
    let write = Action {
        tool: Some("write".into()),
        scope: Scope { paths: vec!["/etc/passwd".into()], ..Scope::default() },
        ..Action::default()
    };
    let line = misplaced(&write, "/etc/passwd is outside the run's roots: write under its working directory");
    assert_eq!(
        line,
        "Control Center denied write /etc/passwd: /etc/passwd is outside the run's roots: write under its working \
         directory. Nothing allows it in this run."
    );
}
