//! The gate's decision for one action: the mode's tool registry, the command policy for
//! a command line, and the effect-class rules, the most restrictive of all of them.

use std::collections::BTreeSet;

use crate::command::{self, CommandVerdict, PartScope};
use crate::effect::{Decision, Effect, Mode};
use crate::rules::{Rule, RuleSet};
use crate::tools;

/// What the action touches. A scope a rule names but the action cannot know (a push
/// with no refspec) is the worst case: it matches every ask and deny rule naming it and
/// no allow rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub repo: Option<String>,
    /// Short branch names (`main`) or full refs (`refs/tags/v1`).
    pub refs: Vec<String>,
    pub refs_unknown: bool,
    pub paths: Vec<String>,
    pub domains: Vec<String>,
    /// The repository's default branch; `main` and `master` when unknown.
    pub default_branch: Option<String>,
    /// A push that is not a fast-forward (or whose history cannot be seen).
    pub force: bool,
    /// A push that deletes its ref.
    pub delete: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Action {
    pub effects: BTreeSet<Effect>,
    pub scope: Scope,
    pub mode: Mode,
    /// The tool asking, when a tool asks (it must be in the mode's registry).
    pub tool: Option<String>,
    /// A shell command line, judged by the command policy.
    pub command_line: Option<String>,
    /// Whether the run has an egress proxy (tools that need one exist only then).
    pub egress: bool,
    /// A push can leave only through the git gateway, which asks about each ref it
    /// really pushes: a command line's pushes are not judged from its words (they would
    /// be judged twice, the first time by a guess at the refs).
    pub pushes_through_gateway: bool,
}

impl Action {
    /// The harness's bash call of `line` in `mode`, as `ccctl policy check` judges it.
    pub fn bash(line: &str, mode: Mode) -> Action {
        Action {
            effects: [Effect::RunCommand].into(),
            tool: Some("bash".into()),
            command_line: Some(line.into()),
            mode,
            ..Action::default()
        }
    }
}

/// One effect class and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectVerdict {
    pub effect: Effect,
    pub decision: Decision,
    /// `rules.toml:3` or `default`.
    pub source: String,
    pub reason: String,
    /// The deciding rule's own reason, as its author wrote it (what an agent may be told).
    pub written: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub decision: Decision,
    pub reason: String,
    /// What decided: a rule's `file:line`, `default`, `command policy`, `mode`.
    pub source: String,
    pub effects: Vec<EffectVerdict>,
    pub command: Option<CommandVerdict>,
}

/// Evaluates an action against the rule sets (global first, then the workspace's; all
/// count alike).
pub fn evaluate(action: &Action, rule_sets: &[&RuleSet]) -> Evaluation {
    if let Some(name) = &action.tool
        && let Err(reason) = tools::lookup(name, action.mode, action.egress)
    {
        return Evaluation {
            decision: Decision::Deny,
            reason,
            source: "mode".into(),
            effects: Vec::new(),
            command: None,
        };
    }
    let rules: Vec<&Rule> = rule_sets.iter().flat_map(|s| s.rules.iter()).collect();
    let mut effects: Vec<EffectVerdict> =
        action.effects.iter().map(|e| judge_effect(*e, &action.scope, action.mode, &rules)).collect();
    let mut command = action.command_line.as_deref().map(|line| command::check(line, action.mode));
    let mut worst = (Decision::Allow, String::from("allowed"), String::from("default"));
    // The rule that decided a command part in the mode's place, to name for an allow.
    let mut ruled_by: Option<String> = None;
    if let Some(verdict) = &mut command {
        for p in &mut verdict.parts {
            let scope = part_scope(&action.scope, &p.part.scope);
            let judged: Vec<EffectVerdict> = p
                .part
                .effects
                .iter()
                .filter(|e| !(**e == Effect::PushRemote && action.pushes_through_gateway))
                .map(|e| judge_effect(*e, &scope, action.mode, &rules))
                .collect();
            let source = match ruled(p, &judged) {
                Some(rule) => {
                    p.decision = rule.decision;
                    p.reason = rule.reason.clone();
                    ruled_by.get_or_insert_with(|| rule.source.clone());
                    rule.source.clone()
                }
                None => "command policy".into(),
            };
            let decision = if action.pushes_through_gateway && left_to_the_gateway(&p.part, action.mode) {
                Decision::Allow
            } else {
                p.decision
            };
            if decision > worst.0 {
                worst = (decision, p.reason.clone(), source);
            }
            effects.extend(judged);
        }
        if let Some(most) = verdict.parts.iter().max_by_key(|p| p.decision) {
            verdict.decision = most.decision;
            verdict.reason = most.reason.clone();
        }
    }
    for v in &effects {
        if v.decision > worst.0 {
            worst = (v.decision, v.reason.clone(), v.source.clone());
        }
    }
    if worst.0 == Decision::Allow {
        // An allow names the rule that gave it, if one did.
        let by_rule = effects.iter().find(|v| v.source != "default");
        if let Some(source) = ruled_by.or_else(|| by_rule.map(|v| v.source.clone())) {
            worst.2 = source;
        }
        worst.1 = match &command {
            Some(c) if !c.parts.is_empty() => c.reason.clone(),
            _ => by_rule.or(effects.first()).map_or_else(|| "nothing to decide".into(), |v| v.reason.clone()),
        };
    }
    dedup(&mut effects);
    Evaluation { decision: worst.0, reason: worst.1, source: worst.2, effects, command }
}

/// The classifier names an action; a person's rule about it decides (issue 37). A part
/// whose ask is only the mode's default ([`command::ModeDecision::rules_decide`]) takes
/// the decision of the rules that match every effect it was named with beyond the
/// run's copy: the most restrictive of them, which may be an allow. Without such a rule
/// for each, the mode's ask stands.
fn ruled<'a>(part: &command::PartVerdict, judged: &'a [EffectVerdict]) -> Option<&'a EffectVerdict> {
    let mut remote = judged.iter().filter(|v| !v.effect.stays_in_the_copy()).peekable();
    let every_effect_ruled = remote.peek().is_some() && remote.all(|v| v.source != "default");
    if !part.rules_decide || !every_effect_ruled {
        return None;
    }
    judged.iter().max_by_key(|v| v.decision)
}

/// A `git push` and nothing worse, in a mode that may mutate: the gateway asks the
/// gate about each ref it really pushes, so the words are not asked about first.
fn left_to_the_gateway(part: &command::Part, mode: Mode) -> bool {
    use crate::effect::CommandClass as C;
    !mode.is_read_only()
        && part.effects.contains(&Effect::PushRemote)
        && part.effective_classes().iter().all(|c| matches!(c, C::ReadOnly | C::Mutation | C::RemoteMutation))
}

fn dedup(effects: &mut Vec<EffectVerdict>) {
    let mut seen = Vec::new();
    effects.retain(|v| {
        let key = (v.effect, v.decision, v.source.clone());
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
}

pub(crate) fn part_scope(action: &Scope, part: &PartScope) -> Scope {
    Scope {
        repo: action.repo.clone(),
        refs: part.refs.clone(),
        refs_unknown: part.refs_unknown,
        paths: part.paths.clone(),
        domains: part.domains.clone(),
        default_branch: action.default_branch.clone(),
        // A command line's push is judged again, ref by ref with what it really does,
        // by the gateway; the command policy does not guess force or deletion.
        force: false,
        delete: false,
    }
}

/// The decision for one effect class: every matching rule counts and the most
/// restrictive wins; with none, the built-in default.
pub fn judge_effect(effect: Effect, scope: &Scope, mode: Mode, rules: &[&Rule]) -> EffectVerdict {
    let matching = rules.iter().filter(|r| r.effect == effect && rule_matches(r, scope, mode));
    match matching.max_by_key(|r| r.decision) {
        Some(rule) => EffectVerdict {
            effect,
            decision: rule.decision,
            source: rule.source.clone(),
            reason: rule
                .reason
                .clone()
                .unwrap_or_else(|| format!("{effect}: {} by rule {}", rule.decision, rule.source)),
            written: rule.reason.clone(),
        },
        None => {
            let (decision, reason) = default_for(effect, scope);
            EffectVerdict { effect, decision, source: "default".into(), reason, written: None }
        }
    }
}

/// The shipped default of an effect class whatever the scope: its most restrictive
/// decision, and the rule in words (`ccctl policy show`).
pub fn default_summary(effect: Effect) -> (Decision, String) {
    match effect {
        Effect::PushRemote => (
            Decision::Ask,
            "ask for the default branch, an unnamed one, a force push or a deletion; allow for other branches".into(),
        ),
        other => default_for(other, &Scope::default()),
    }
}

/// The shipped defaults (documented in the README).
pub fn default_for(effect: Effect, scope: &Scope) -> (Decision, String) {
    match effect {
        Effect::WriteFile | Effect::DeleteFile | Effect::RunCommand | Effect::CreateCommit => {
            (Decision::Allow, format!("{effect}: allowed by default"))
        }
        Effect::PushRemote => {
            let default = |r: &str| match &scope.default_branch {
                Some(d) => r == d,
                None => r == "main" || r == "master",
            };
            if scope.refs_unknown || scope.refs.is_empty() {
                (Decision::Ask, "push_remote: a push whose branch is not named asks by default".into())
            } else if scope.delete {
                (Decision::Ask, "push_remote: deleting a remote ref asks by default".into())
            } else if scope.force {
                (Decision::Ask, "push_remote: a force push asks by default".into())
            } else if let Some(r) = scope.refs.iter().find(|r| default(r)) {
                (Decision::Ask, format!("push_remote: a push to the default branch {r} asks by default"))
            } else {
                (Decision::Allow, "push_remote: pushes to other branches are allowed by default".into())
            }
        }
        Effect::OpenPullRequest
        | Effect::PublishReviewOrMerge
        | Effect::WriteExternalTracker
        | Effect::InstallPackage
        | Effect::PublishPackage
        | Effect::AccessNetwork => (Decision::Ask, format!("{effect}: asks by default")),
    }
}

/// Whether `rule` applies to an action with `scope` in `mode`. Values a scope has
/// several of (refs, paths, domains): an allow rule must cover all of them, an ask or
/// deny rule applies when it covers any.
fn rule_matches(rule: &Rule, scope: &Scope, mode: Mode) -> bool {
    if rule.mode.is_some_and(|m| m != mode) {
        return false;
    }
    if rule.force.is_some_and(|f| f != scope.force) || rule.delete.is_some_and(|d| d != scope.delete) {
        return false;
    }
    let permissive = rule.decision == Decision::Allow;
    let check = |values: &[String], unknown: bool, pred: &dyn Fn(&str) -> bool| -> bool {
        if unknown || values.is_empty() {
            return !permissive;
        }
        if permissive { values.iter().all(|v| pred(v)) } else { values.iter().any(|v| pred(v)) }
    };
    if let Some(p) = &rule.repo {
        let repo: Vec<String> = scope.repo.iter().cloned().collect();
        if !check(&repo, false, &|v| p.matches(v)) {
            return false;
        }
    }
    if let Some(p) = &rule.branch {
        let branches: Vec<String> = scope.refs.iter().filter(|r| !r.starts_with("refs/")).cloned().collect();
        let only_other_refs = !scope.refs.is_empty() && branches.is_empty() && !scope.refs_unknown;
        if only_other_refs || !check(&branches, scope.refs_unknown, &|v| p.matches(v)) {
            return false;
        }
    }
    if let Some(p) = &rule.reference {
        let full: Vec<String> = scope
            .refs
            .iter()
            .map(|r| if r.starts_with("refs/") { r.clone() } else { format!("refs/heads/{r}") })
            .collect();
        if !check(&full, scope.refs_unknown, &|v| p.matches(v)) {
            return false;
        }
    }
    if let Some(p) = &rule.path
        && !check(&scope.paths, false, &|v| p.matches(v.trim_start_matches("./")))
    {
        return false;
    }
    if let Some(d) = &rule.domain
        && !check(&scope.domains, false, &|v| d.matches(v))
    {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> RuleSet {
        RuleSet::parse(text, "rules.toml").unwrap()
    }

    fn bash(line: &str, mode: Mode) -> Action {
        Action::bash(line, mode)
    }

    #[test]
    fn the_effects_that_stay_in_the_copy_are_the_ones_allowed_by_default() {
        for effect in Effect::ALL {
            let allowed = default_for(effect, &Scope::default()).0 == Decision::Allow;
            assert_eq!(effect.stays_in_the_copy(), allowed, "{effect}");
        }
    }

    fn push(refs: &[&str]) -> Action {
        Action {
            effects: [Effect::PushRemote].into(),
            scope: Scope { refs: refs.iter().map(|r| r.to_string()).collect(), ..Scope::default() },
            ..Action::default()
        }
    }

    const MAIN_DENY: &str = "[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"direct pushes to main are not allowed\"\n";

    #[test]
    fn defaults_ask_for_the_default_branch_and_allow_the_rest() {
        assert_eq!(evaluate(&push(&["main"]), &[]).decision, Decision::Ask);
        assert_eq!(evaluate(&push(&["master"]), &[]).decision, Decision::Ask);
        assert_eq!(evaluate(&push(&["feature/x"]), &[]).decision, Decision::Allow);
        let mut unknown = push(&[]);
        unknown.scope.refs_unknown = true;
        assert_eq!(evaluate(&unknown, &[]).decision, Decision::Ask);
        let mut trunk = push(&["main"]);
        trunk.scope.default_branch = Some("trunk".into());
        assert_eq!(evaluate(&trunk, &[]).decision, Decision::Allow);
        trunk.scope.refs = vec!["trunk".into()];
        assert_eq!(evaluate(&trunk, &[]).decision, Decision::Ask);
        let e = evaluate(&Action { effects: [Effect::InstallPackage].into(), ..Action::default() }, &[]);
        assert_eq!((e.decision, e.source.as_str()), (Decision::Ask, "default"));
    }

    #[test]
    fn the_most_restrictive_matching_rule_wins_and_names_itself() {
        let global = rules(&format!(
            "[[rule]]\neffect = \"push_remote\"\ndecision = \"allow\"\n\n{MAIN_DENY}\n[[rule]]\neffect = \"push_remote\"\nbranch = \"ma*\"\ndecision = \"ask\"\n"
        ));
        let e = evaluate(&push(&["main"]), &[&global]);
        assert_eq!(
            (e.decision, e.reason.as_str(), e.source.as_str()),
            (Decision::Deny, "direct pushes to main are not allowed", "rules.toml:5")
        );
        assert_eq!(evaluate(&push(&["mast"]), &[&global]).decision, Decision::Ask);
        // A matching allow rule replaces the default: other pushes need no question.
        assert_eq!(evaluate(&push(&["feature"]), &[&global]).decision, Decision::Allow);
    }

    #[test]
    fn workspace_rules_count_alongside_the_global_ones() {
        let global = rules("[[rule]]\neffect = \"push_remote\"\ndecision = \"allow\"\n");
        let workspace = RuleSet::parse(MAIN_DENY, "workspace.toml").unwrap();
        let e = evaluate(&push(&["main"]), &[&global, &workspace]);
        assert_eq!((e.decision, e.source.as_str()), (Decision::Deny, "workspace.toml:1"));
        // A workspace cannot loosen a global deny: both count, deny wins.
        let loose =
            RuleSet::parse("[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"allow\"\n", "w.toml")
                .unwrap();
        let strict = rules(MAIN_DENY);
        assert_eq!(evaluate(&push(&["main"]), &[&strict, &loose]).decision, Decision::Deny);
    }

    #[test]
    fn an_unknown_scope_is_the_worst_case() {
        let set = rules(&format!(
            "{MAIN_DENY}\n[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"allow\"\n"
        ));
        let mut unknown = push(&[]);
        unknown.scope.refs_unknown = true;
        assert_eq!(evaluate(&unknown, &[&set]).decision, Decision::Deny);
        // An allow rule must cover every ref pushed; a deny rule any one of them.
        let only_allow = rules("[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"allow\"\n");
        assert_eq!(evaluate(&push(&["feature/a", "main"]), &[&only_allow]).decision, Decision::Ask);
        assert_eq!(evaluate(&push(&["feature/a", "feature/b"]), &[&only_allow]).decision, Decision::Allow);
        assert_eq!(evaluate(&push(&["feature/a", "main"]), &[&set]).decision, Decision::Deny);
    }

    #[test]
    fn ref_rules_see_full_names_and_branch_rules_only_branches() {
        let tags = rules("[[rule]]\neffect = \"push_remote\"\nref = \"refs/tags/*\"\ndecision = \"deny\"\n");
        assert_eq!(evaluate(&push(&["refs/tags/v1"]), &[&tags]).decision, Decision::Deny);
        assert_eq!(evaluate(&push(&["feature"]), &[&tags]).decision, Decision::Allow);
        let heads = rules("[[rule]]\neffect = \"push_remote\"\nref = \"refs/heads/release/*\"\ndecision = \"deny\"\n");
        assert_eq!(evaluate(&push(&["release/1"]), &[&heads]).decision, Decision::Deny);
        let branch = rules("[[rule]]\neffect = \"push_remote\"\nbranch = \"*\"\ndecision = \"deny\"\n");
        assert_eq!(evaluate(&push(&["refs/tags/v1"]), &[&branch]).decision, Decision::Allow);
    }

    #[test]
    fn force_and_delete_ask_by_default_and_rules_name_them() {
        let none = RuleSet::default();
        let mut forced = push(&["feature"]);
        forced.scope.force = true;
        let mut deleted = push(&["feature"]);
        deleted.scope.delete = true;
        assert_eq!(evaluate(&push(&["feature"]), &[&none]).decision, Decision::Allow);
        let asked = evaluate(&forced, &[&none]);
        assert_eq!(
            (asked.decision, asked.reason.as_str()),
            (Decision::Ask, "push_remote: a force push asks by default")
        );
        assert!(evaluate(&deleted, &[&none]).reason.contains("deleting"));
        let set = rules(concat!(
            "[[rule]]\neffect = \"push_remote\"\nforce = true\ndecision = \"deny\"\n\n",
            "[[rule]]\neffect = \"push_remote\"\nbranch = \"scratch/*\"\ndelete = true\ndecision = \"allow\"\n",
        ));
        assert_eq!(evaluate(&forced, &[&set]).decision, Decision::Deny);
        assert_eq!(evaluate(&push(&["feature"]), &[&set]).decision, Decision::Allow);
        assert_eq!(evaluate(&deleted, &[&set]).decision, Decision::Ask);
        let mut scratch = push(&["scratch/x"]);
        scratch.scope.delete = true;
        assert_eq!(evaluate(&scratch, &[&set]).decision, Decision::Allow);
        let not_forced_only = rules("[[rule]]\neffect = \"push_remote\"\nforce = false\ndecision = \"deny\"\n");
        assert_eq!(evaluate(&forced, &[&not_forced_only]).decision, Decision::Ask);
        assert_eq!(evaluate(&push(&["feature"]), &[&not_forced_only]).decision, Decision::Deny);
        let wrong = RuleSet::parse("[[rule]]\neffect = \"write_file\"\nforce = true\ndecision = \"deny\"\n", "r.toml");
        assert!(wrong.unwrap_err().to_string().contains("apply to push_remote"));
    }

    #[test]
    fn mode_repo_path_and_domain_scopes() {
        let set = rules(concat!(
            "[[rule]]\neffect = \"write_file\"\npath = \"secrets/**\"\ndecision = \"deny\"\n\n",
            "[[rule]]\neffect = \"create_commit\"\nmode = \"orchestrate\"\ndecision = \"deny\"\n\n",
            "[[rule]]\neffect = \"access_network\"\ndomain = \"*.internal.example\"\ndecision = \"allow\"\n\n",
            "[[rule]]\neffect = \"create_commit\"\nrepo = \"infra-*\"\ndecision = \"ask\"\n",
        ));
        let write = |path: &str| Action {
            effects: [Effect::WriteFile].into(),
            scope: Scope { paths: vec![path.into()], ..Scope::default() },
            ..Action::default()
        };
        assert_eq!(evaluate(&write("secrets/a/b"), &[&set]).decision, Decision::Deny);
        assert_eq!(evaluate(&write("./secrets/a"), &[&set]).decision, Decision::Deny);
        assert_eq!(evaluate(&write("src/a"), &[&set]).decision, Decision::Allow);
        let commit = |mode, repo: &str| Action {
            effects: [Effect::CreateCommit].into(),
            mode,
            scope: Scope { repo: Some(repo.into()), ..Scope::default() },
            ..Action::default()
        };
        assert_eq!(evaluate(&commit(Mode::Orchestrate, "app"), &[&set]).decision, Decision::Deny);
        assert_eq!(evaluate(&commit(Mode::Chat, "app"), &[&set]).decision, Decision::Allow);
        assert_eq!(evaluate(&commit(Mode::Chat, "infra-prod"), &[&set]).decision, Decision::Ask);
        let fetch = |host: &str| Action {
            effects: [Effect::AccessNetwork].into(),
            scope: Scope { domains: vec![host.into()], ..Scope::default() },
            ..Action::default()
        };
        assert_eq!(evaluate(&fetch("api.internal.example"), &[&set]).decision, Decision::Allow);
        assert_eq!(evaluate(&fetch("example.org"), &[&set]).decision, Decision::Ask);
    }

    #[test]
    fn command_lines_meet_the_rules_with_their_own_scopes() {
        let set = rules(MAIN_DENY);
        let e = evaluate(&bash("git commit -m x && git push origin main", Mode::Chat), &[&set]);
        assert_eq!((e.decision, e.reason.as_str()), (Decision::Deny, "direct pushes to main are not allowed"));
        assert_eq!(evaluate(&bash("git push origin feature", Mode::Chat), &[&set]).decision, Decision::Ask);
        // Behind the git gateway the push is judged there, ref by ref; read-only modes
        // still refuse the command for what it is.
        let gated = |line: &str, mode| Action { pushes_through_gateway: true, ..bash(line, mode) };
        assert_eq!(evaluate(&gated("git push origin main", Mode::Chat), &[&set]).decision, Decision::Allow);
        assert_eq!(evaluate(&gated("git push origin main", Mode::Plan), &[&set]).decision, Decision::Deny);
        let net = rules("[[rule]]\neffect = \"access_network\"\ndomain = \"localhost\"\ndecision = \"allow\"\n");
        assert_eq!(evaluate(&bash("curl http://localhost:8080/x", Mode::Plan), &[&net]).decision, Decision::Allow);
        assert_eq!(
            evaluate(&bash("curl http://localhost/ https://example.org/", Mode::Chat), &[&net]).decision,
            Decision::Ask
        );
    }

    /// Issue 37, item 1: the classifier recognises a push and asks the push rule; the
    /// mode's ask is only that rule's default.
    #[test]
    fn a_persons_rule_decides_what_the_classifier_named_and_the_mode_only_asks_by_default() {
        let feature = rules("[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"allow\"\n");
        let e = evaluate(&bash("git push origin HEAD:feature/x", Mode::Chat), &[&feature]);
        assert_eq!((e.decision, e.source.as_str()), (Decision::Allow, "rules.toml:1"), "{e:?}");
        // What `policy check` prints is the reason for the decision, the command's part too.
        let part = &e.command.as_ref().unwrap().parts[0];
        assert_eq!(part.decision, Decision::Allow);
        assert_eq!(part.reason, "push_remote: allow by rule rules.toml:1");
        assert_eq!(e.command.as_ref().unwrap().decision, Decision::Allow);
        // Wrapped as agents write it, the same.
        for line in [
            "bash -c 'git push -u origin feature/x'",
            "FOO=1 git push origin feature/y",
            "cd sub && git push origin feature/z",
        ] {
            assert_eq!(evaluate(&bash(line, Mode::Chat), &[&feature]).decision, Decision::Allow, "{line}");
        }
        // Without a rule, or past what it names, the mode's ask stands.
        assert_eq!(evaluate(&bash("git push origin HEAD:feature/x", Mode::Chat), &[]).decision, Decision::Ask);
        assert_eq!(evaluate(&bash("git push origin main", Mode::Chat), &[&feature]).decision, Decision::Ask);
        assert_eq!(evaluate(&bash("git push origin feature/a main", Mode::Chat), &[&feature]).decision, Decision::Ask);
        assert_eq!(evaluate(&bash("git push", Mode::Chat), &[&feature]).decision, Decision::Ask);
        // A rule may be stricter than the mode's ask.
        let no = rules("[[rule]]\neffect = \"push_remote\"\nbranch = \"feature/*\"\ndecision = \"deny\"\n");
        assert_eq!(evaluate(&bash("git push origin feature/x", Mode::Chat), &[&no]).decision, Decision::Deny);
        // Read-only modes deny a mutation whatever a rule says; the fixed list stays fixed.
        for mode in [Mode::Plan, Mode::Review, Mode::Orchestrate] {
            let e = evaluate(&bash("git push origin feature/x", mode), &[&feature]);
            assert_eq!(e.decision, Decision::Deny, "{mode}");
        }
        assert_eq!(evaluate(&bash("sudo git push origin feature/x", Mode::Chat), &[&feature]).decision, Decision::Deny);
        // Another part of the line is judged for itself.
        let e = evaluate(&bash("git push origin feature/x && npm publish", Mode::Chat), &[&feature]);
        assert_eq!(e.decision, Decision::Ask, "{e:?}");
    }

    #[test]
    fn tools_outside_the_mode_are_denied_with_the_mode_named() {
        let write = Action {
            effects: [Effect::WriteFile].into(),
            tool: Some("write".into()),
            mode: Mode::Plan,
            ..Action::default()
        };
        let e = evaluate(&write, &[]);
        assert_eq!((e.decision, e.reason.as_str()), (Decision::Deny, "tool not available in plan mode"));
    }
}
