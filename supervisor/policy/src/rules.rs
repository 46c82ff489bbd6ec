//! Rules files: an effect class plus optional scopes, mapped to allow, ask or deny.
//!
//! ```toml
//! [[rule]]
//! effect = "push_remote"
//! branch = "main"          # glob over the short branch name; also ref = "refs/tags/*"
//! decision = "deny"
//! reason = "direct pushes to main are not allowed"
//!
//! [[rule]]
//! effect = "push_remote"
//! force = true             # only pushes that are not fast-forwards; delete = true: deletions
//! decision = "deny"
//! ```
//!
//! Every problem is an error at load that names the file and line: a rules file that
//! does not parse, an unknown key, class, decision or mode, a bad glob or domain.

use std::ops::Range;

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use toml::Spanned;

use crate::effect::{Decision, Effect, Mode};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {message}")]
pub struct RuleError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

/// A glob and the text it came from (shown by `ccctl policy show`).
#[derive(Debug, Clone)]
pub struct Pattern {
    pub text: String,
    matcher: GlobMatcher,
}

impl Pattern {
    fn new(text: &str) -> Result<Self, String> {
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("bad glob {text:?}: {}", e.kind()))?;
        Ok(Pattern { text: text.to_owned(), matcher: glob.compile_matcher() })
    }

    pub fn matches(&self, value: &str) -> bool {
        self.matcher.is_match(value)
    }
}

/// `example.com` exactly, `*.example.com` any name under it, `*` anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainPattern {
    pub text: String,
}

impl DomainPattern {
    fn new(text: &str) -> Result<Self, String> {
        let lower = text.to_ascii_lowercase();
        // `localhost:5432`: one port of a name (a host forward); never with a wildcard.
        let (lower, port) = match split_port(&lower) {
            (name, Some(port)) if !name.contains('*') && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                (name.to_owned(), Some(port.to_owned()))
            }
            (_, Some(_)) => {
                return Err(format!("bad domain {text:?}: a port follows a host name, as in localhost:5432"));
            }
            (name, None) => (name.to_owned(), None),
        };
        let name = lower.strip_prefix("*.").unwrap_or(&lower);
        let valid = lower == "*"
            || (!name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                }));
        if !valid {
            return Err(format!("bad domain {text:?}: write a host name, *.name for the names under it, or *"));
        }
        let text = match port {
            Some(port) => format!("{lower}:{port}"),
            None => lower,
        };
        Ok(DomainPattern { text })
    }

    /// A pattern with a port matches that name and port only; one without matches the
    /// name at any port (`localhost` allows every forward).
    pub fn matches(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        if split_port(&self.text).1.is_some() {
            return host == self.text;
        }
        let host = split_port(&host).0;
        let host = host.trim_end_matches('.');
        match self.text.strip_prefix("*.") {
            _ if self.text == "*" => true,
            Some(parent) => host.strip_suffix(parent).is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => host == self.text,
        }
    }
}

/// `name:port` split at its one colon; an IPv6 address (several) is all name.
fn split_port(text: &str) -> (&str, Option<&str>) {
    match text.split_once(':') {
        Some((name, port)) if !port.contains(':') && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (name, Some(port))
        }
        Some((_, port)) if !port.contains(':') => (text, Some("")),
        _ => (text, None),
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub effect: Effect,
    pub decision: Decision,
    pub reason: Option<String>,
    pub repo: Option<Pattern>,
    pub branch: Option<Pattern>,
    pub reference: Option<Pattern>,
    pub path: Option<Pattern>,
    pub domain: Option<DomainPattern>,
    pub mode: Option<Mode>,
    /// Push rules: only pushes that are (true) or are not (false) force pushes.
    pub force: Option<bool>,
    /// Push rules: only pushes that do (true) or do not (false) delete the ref.
    pub delete: Option<bool>,
    /// `file:line`, for people reading a decision.
    pub source: String,
    /// The line of the file the rule begins on.
    pub line: usize,
}

impl Rule {
    /// The scopes this rule names, as `key = "value"` pairs, for display.
    pub fn scopes(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let globs = [("repo", &self.repo), ("branch", &self.branch), ("ref", &self.reference), ("path", &self.path)];
        for (key, p) in globs {
            if let Some(p) = p {
                out.push((key, p.text.clone()));
            }
        }
        if let Some(d) = &self.domain {
            out.push(("domain", d.text.clone()));
        }
        if let Some(m) = self.mode {
            out.push(("mode", m.to_string()));
        }
        for (key, flag) in [("force", self.force), ("delete", self.delete)] {
            if let Some(flag) = flag {
                out.push((key, flag.to_string()));
            }
        }
        out
    }
}

/// The rules of one file, in order.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    effect: Spanned<String>,
    decision: Spanned<String>,
    reason: Option<String>,
    repo: Option<Spanned<String>>,
    branch: Option<Spanned<String>>,
    #[serde(rename = "ref")]
    reference: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    domain: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
    force: Option<bool>,
    delete: Option<bool>,
}

impl RuleSet {
    /// Parses a rules file; `source_name` names it in errors and in each rule's source.
    pub fn parse(text: &str, source_name: &str) -> Result<RuleSet, RuleError> {
        let fail = |span: Option<Range<usize>>, message: String| RuleError {
            source_name: source_name.to_owned(),
            line: span.map_or(1, |s| line_of(text, s.start)),
            message,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| fail(e.span(), one_line(e.message())))?;
        let mut rules = Vec::with_capacity(raw.rule.len());
        for spanned in raw.rule {
            let line = line_of(text, spanned.span().start);
            let r = spanned.into_inner();
            let field = |s: &Spanned<String>, f: fn(&str) -> Result<(), String>| {
                f(s.get_ref()).map_err(|m| fail(Some(s.span()), m))
            };
            let effect =
                r.effect.get_ref().parse::<Effect>().map_err(|e| fail(Some(r.effect.span()), e.to_string()))?;
            let decision =
                r.decision.get_ref().parse::<Decision>().map_err(|e| fail(Some(r.decision.span()), e.to_string()))?;
            let glob = |s: &Option<Spanned<String>>| -> Result<Option<Pattern>, RuleError> {
                s.as_ref().map(|s| Pattern::new(s.get_ref()).map_err(|m| fail(Some(s.span()), m))).transpose()
            };
            let domain = r
                .domain
                .as_ref()
                .map(|s| DomainPattern::new(s.get_ref()).map_err(|m| fail(Some(s.span()), m)))
                .transpose()?;
            let mode = r
                .mode
                .as_ref()
                .map(|s| s.get_ref().parse::<Mode>().map_err(|e| fail(Some(s.span()), e.to_string())))
                .transpose()?;
            if let Some(b) = &r.branch {
                field(b, |v| {
                    if v.starts_with("refs/") {
                        Err(format!("branch {v:?} is a full ref: write ref = {v:?}, or the short branch name"))
                    } else {
                        Ok(())
                    }
                })?;
            }
            if let (Some(_), Some(s)) = (&r.branch, &r.reference) {
                return Err(fail(Some(s.span()), "a rule names branch or ref, not both".into()));
            }
            let push_scopes = r.branch.is_some() || r.reference.is_some() || r.force.is_some() || r.delete.is_some();
            if push_scopes && effect != Effect::PushRemote {
                return Err(fail(
                    Some(r.effect.span()),
                    format!("branch, ref, force and delete scopes apply to push_remote, not {effect}"),
                ));
            }
            if r.domain.is_some() && effect != Effect::AccessNetwork {
                return Err(fail(
                    Some(r.effect.span()),
                    format!("the domain scope applies to access_network, not {effect}"),
                ));
            }
            rules.push(Rule {
                effect,
                decision,
                reason: r.reason,
                repo: glob(&r.repo)?,
                branch: glob(&r.branch)?,
                reference: glob(&r.reference)?,
                path: glob(&r.path)?,
                domain,
                mode,
                force: r.force,
                delete: r.delete,
                source: format!("{source_name}:{line}"),
                line,
            });
        }
        Ok(RuleSet { rules })
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes().iter().take(offset).filter(|b| **b == b'\n').count() + 1
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        RuleSet::parse(text, "rules.toml").unwrap_err().to_string()
    }

    #[test]
    fn a_valid_file_loads_with_sources() {
        let text = "# pushes\n[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"no\"\n\n[[rule]]\neffect = \"access_network\"\ndomain = \"*.example.com\"\ndecision = \"allow\"\n";
        let set = RuleSet::parse(text, "rules.toml").unwrap();
        assert_eq!(set.rules.len(), 2);
        assert_eq!(set.rules[0].source, "rules.toml:2");
        assert_eq!(set.rules[1].source, "rules.toml:8");
        assert_eq!(set.rules[0].scopes(), vec![("branch", "main".to_owned())]);
    }

    #[test]
    fn every_load_error_names_its_line() {
        assert_eq!(err("[[rule]]\neffect = \"push\"\ndecision = \"deny\"\n").split(':').nth(1), Some("2"));
        assert!(err("[[rule]]\neffect = \"push\"\ndecision = \"deny\"\n").contains("unknown effect class \"push\""));
        let e = err("[[rule]]\neffect = \"push_remote\"\ndecision = \"maybe\"\n");
        assert!(e.starts_with("rules.toml:3:") && e.contains("unknown decision"), "{e}");
        let e = err("[[rule]]\neffect = \"push_remote\"\ndecision = \"deny\"\nbrnach = \"main\"\n");
        assert!(e.starts_with("rules.toml:4:") && e.contains("brnach"), "{e}");
        let e = err("[[rule]]\neffect = \"write_file\"\n\npath = \"src/[\"\ndecision = \"deny\"\n");
        assert!(e.starts_with("rules.toml:4:") && e.contains("bad glob"), "{e}");
        let e = err("[[rule]]\neffect = \"access_network\"\ndomain = \"exa mple.com\"\ndecision = \"deny\"\n");
        assert!(e.starts_with("rules.toml:3:") && e.contains("bad domain"), "{e}");
        let e = err("[[rule]]\neffect = \"write_file\"\ndecision = \"deny\"\nmode = \"yolo\"\n");
        assert!(e.starts_with("rules.toml:4:") && e.contains("unknown mode"), "{e}");
        let e = err("[[rule]]\neffect = \"write_file\"\n");
        assert!(e.starts_with("rules.toml:1:") && e.contains("decision"), "{e}");
        let e = err("[[rule]]\neffect = \"write_file\"\ndecision = \"deny\"\nbranch = \"main\"\n");
        assert!(e.contains("push_remote"), "{e}");
        let e = err("[[rule]]\neffect = \"push_remote\"\ndecision = \"deny\"\nbranch = \"refs/heads/main\"\n");
        assert!(e.starts_with("rules.toml:4:") && e.contains("full ref"), "{e}");
        let e = err("this is not toml\n");
        assert!(e.starts_with("rules.toml:1:"), "{e}");
        let e = err("[[rules]]\neffect = \"write_file\"\n");
        assert!(e.contains("rules"), "{e}");
        assert!(!err("[[rule]]\n\n\neffect = 3\ndecision = \"deny\"\n").contains('\n'));
    }

    #[test]
    fn domains_match_exactly_or_below() {
        let d = DomainPattern::new("*.Example.com").unwrap();
        assert!(d.matches("api.example.com") && d.matches("a.b.example.com") && d.matches("API.example.com."));
        assert!(!d.matches("example.com") && !d.matches("badexample.com"));
        let exact = DomainPattern::new("example.com").unwrap();
        assert!(exact.matches("example.com") && !exact.matches("a.example.com"));
        assert!(DomainPattern::new("*").unwrap().matches("anything"));
        for bad in [
            "",
            "*.",
            "a..b",
            "ex*ample.com",
            "*.*.com",
            "http://x",
            "localhost:",
            "localhost:0",
            "*.x.com:443",
            "x:99999",
        ] {
            assert!(DomainPattern::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_port_narrows_a_domain_to_one_forward() {
        let one = DomainPattern::new("LocalHost:5432").unwrap();
        assert!(one.matches("localhost:5432"));
        assert!(!one.matches("localhost:5433") && !one.matches("localhost") && !one.matches("localhost:54320"));
        let any = DomainPattern::new("localhost").unwrap();
        assert!(any.matches("localhost") && any.matches("localhost:5432"));
        assert!(!any.matches("localhost.evil.test:5432"));
        // An IPv6 address is all name, never a name and a port.
        let v6 = DomainPattern::new("example.com").unwrap();
        assert!(!v6.matches("2001:db8::1"));
        assert!(DomainPattern::new("*").unwrap().matches("localhost:22"));
    }

    #[test]
    fn globs_keep_slashes_literal() {
        let p = Pattern::new("feature/*").unwrap();
        assert!(p.matches("feature/x") && !p.matches("feature/x/y") && !p.matches("main"));
        assert!(Pattern::new("src/**").unwrap().matches("src/a/b.rs"));
    }
}
