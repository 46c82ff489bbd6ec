//! From the gate's decision on each ref to what goes upstream and what the client is
//! told. An atomic push is all or nothing; otherwise the allowed refs go upstream and
//! the refused ones are answered here, in the order the client sent them.

use super::report::{RefStatus, Report};
use super::request::{RefUpdate, RequestHead};

/// Every refusal starts with this, so a person reading git's output knows who refused.
pub const REASON_PREFIX: &str = "Control Center policy: ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Refuse(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Indexes into the head's commands, in order: these go upstream.
    pub forward: Vec<usize>,
    /// Indexes and the reason each is refused.
    pub refused: Vec<(usize, String)>,
}

impl Plan {
    pub fn new(head: &RequestHead, verdicts: &[Verdict]) -> Plan {
        let mut forward = Vec::new();
        let mut refused = Vec::new();
        for (i, verdict) in verdicts.iter().enumerate().take(head.commands.len()) {
            match verdict {
                Verdict::Allow => forward.push(i),
                Verdict::Refuse(reason) => refused.push((i, format!("{REASON_PREFIX}{reason}"))),
            }
        }
        // A command the gate said nothing about is refused, never forwarded.
        for i in verdicts.len()..head.commands.len() {
            refused.push((i, format!("{REASON_PREFIX}no decision was made for this ref")));
        }
        if head.has_capability("atomic") && !refused.is_empty() && !forward.is_empty() {
            let first = &head.commands[refused[0].0].name;
            let reason = format!("{REASON_PREFIX}atomic push refused because {first} was refused");
            refused.extend(forward.drain(..).map(|i| (i, reason.clone())));
            refused.sort_by_key(|(i, _)| *i);
        }
        Plan { forward, refused }
    }

    pub fn forwarded<'a>(&self, head: &'a RequestHead) -> Vec<&'a RefUpdate> {
        self.forward.iter().map(|i| &head.commands[*i]).collect()
    }

    /// The client's answer: upstream's statuses for what was forwarded (None when
    /// nothing was), ours for what was refused, in the client's order. A ref upstream
    /// did not mention is reported as rejected, not as done.
    pub fn answer(&self, head: &RequestHead, upstream: Option<&Report>) -> Report {
        let unpack = upstream.map_or(Ok(()), |u| u.unpack.clone());
        let mut refs = Vec::with_capacity(head.commands.len());
        for (i, command) in head.commands.iter().enumerate() {
            if let Some((_, reason)) = self.refused.iter().find(|(r, _)| *r == i) {
                refs.push(RefStatus::rejected(&command.name, reason));
                continue;
            }
            let from_upstream = upstream.and_then(|u| u.refs.iter().find(|s| s.name() == command.name));
            refs.push(match from_upstream {
                Some(status) => status.clone(),
                None => RefStatus::rejected(&command.name, "upstream did not report on this ref"),
            });
        }
        Report { unpack, refs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn head(names: &[&str], caps: &[&str]) -> RequestHead {
        RequestHead {
            commands: names.iter().map(|n| RefUpdate { old: A.into(), new: B.into(), name: (*n).into() }).collect(),
            capabilities: caps.iter().map(|c| (*c).into()).collect(),
            ..RequestHead::default()
        }
    }

    #[test]
    fn a_mixed_push_forwards_what_is_allowed() {
        let h = head(&["refs/heads/main", "refs/heads/feature"], &["report-status"]);
        let plan = Plan::new(&h, &[Verdict::Refuse("pushes to main are denied".into()), Verdict::Allow]);
        assert_eq!(plan.forward, [1]);
        assert_eq!(plan.forwarded(&h)[0].name, "refs/heads/feature");
        let upstream =
            Report { unpack: Ok(()), refs: vec![RefStatus::Ok { name: "refs/heads/feature".into(), options: vec![] }] };
        let answer = plan.answer(&h, Some(&upstream));
        assert_eq!(
            answer.refs,
            [
                RefStatus::rejected("refs/heads/main", "Control Center policy: pushes to main are denied"),
                RefStatus::Ok { name: "refs/heads/feature".into(), options: vec![] },
            ]
        );
    }

    #[test]
    fn an_atomic_push_with_one_refusal_forwards_nothing() {
        let h = head(&["refs/heads/main", "refs/heads/feature"], &["report-status", "atomic"]);
        let plan = Plan::new(&h, &[Verdict::Refuse("no".into()), Verdict::Allow]);
        assert!(plan.forward.is_empty());
        let answer = plan.answer(&h, None);
        assert!(answer.refs.iter().all(|r| matches!(r, RefStatus::Rejected { .. })));
        assert!(
            matches!(&answer.refs[1], RefStatus::Rejected { reason, .. } if reason.contains("atomic push refused because refs/heads/main"))
        );
    }

    #[test]
    fn refs_without_a_verdict_or_an_upstream_status_are_never_reported_done() {
        let h = head(&["refs/heads/a", "refs/heads/b"], &[]);
        let plan = Plan::new(&h, &[Verdict::Allow]);
        assert_eq!(plan.forward, [0]);
        let answer = plan.answer(&h, Some(&Report { unpack: Ok(()), refs: vec![] }));
        assert!(answer.refs.iter().all(|r| matches!(r, RefStatus::Rejected { .. })), "{answer:?}");
    }
}
