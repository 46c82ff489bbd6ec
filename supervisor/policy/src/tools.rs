//! The tool registry per mode: in read-only modes the tools that declare a mutation
//! class are not there at all.

use crate::effect::{Effect, Mode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub name: &'static str,
    pub effects: &'static [Effect],
    pub summary: &'static str,
    /// Registered only when the run has an egress proxy to go through.
    pub needs_egress: bool,
}

impl Tool {
    /// Declares a class that changes files, history or remote state.
    pub fn mutates(&self) -> bool {
        self.effects.iter().any(|e| is_mutation_class(*e))
    }
}

/// Effect classes that change something; `run_command` and `access_network` are judged
/// per call instead (the command policy, the network rule).
pub fn is_mutation_class(effect: Effect) -> bool {
    !matches!(effect, Effect::RunCommand | Effect::AccessNetwork)
}

/// Whether the tool `name` writes or deletes files (a write an agent asks about is
/// judged by where it lands: [`crate::roots`]).
pub fn writes(name: &str) -> bool {
    TOOLS
        .iter()
        .find(|t| t.name == name)
        .is_some_and(|t| t.effects.iter().any(|e| matches!(e, Effect::WriteFile | Effect::DeleteFile)))
}

pub const TOOLS: &[Tool] = &[
    Tool { name: "read", effects: &[], summary: "read a file (offset, limit, binary detection)", needs_egress: false },
    Tool { name: "search", effects: &[], summary: "regex over file contents, gitignore-aware", needs_egress: false },
    Tool { name: "find", effects: &[], summary: "glob over paths", needs_egress: false },
    Tool { name: "search_files", effects: &[], summary: "fuzzy file-name search", needs_egress: false },
    Tool { name: "write", effects: &[Effect::WriteFile], summary: "write a whole file", needs_egress: false },
    Tool {
        name: "edit",
        effects: &[Effect::WriteFile],
        summary: "replace one exact string in a file",
        needs_egress: false,
    },
    Tool {
        name: "apply_patch",
        effects: &[Effect::WriteFile, Effect::DeleteFile],
        summary: "apply a unified diff, all or nothing",
        needs_egress: false,
    },
    Tool {
        name: "bash",
        effects: &[Effect::RunCommand],
        summary: "run a command line in the envelope",
        needs_egress: false,
    },
    Tool { name: "web_fetch", effects: &[Effect::AccessNetwork], summary: "fetch a URL", needs_egress: true },
    Tool { name: "web_search", effects: &[Effect::AccessNetwork], summary: "search the web", needs_egress: true },
];

/// The tools a run in `mode` has; `egress` says whether the run has a proxy.
pub fn registry(mode: Mode, egress: bool) -> Vec<&'static Tool> {
    TOOLS.iter().filter(|t| !(mode.is_read_only() && t.mutates()) && (egress || !t.needs_egress)).collect()
}

/// The tool, or why the run does not have it.
pub fn lookup(name: &str, mode: Mode, egress: bool) -> Result<&'static Tool, String> {
    let Some(tool) = TOOLS.iter().find(|t| t.name == name) else {
        return Err(format!("unknown tool {name:?}"));
    };
    if mode.is_read_only() && tool.mutates() {
        return Err(format!("tool not available in {mode} mode"));
    }
    if tool.needs_egress && !egress {
        return Err(format!("tool {name} is not available: it needs the run's egress proxy"));
    }
    Ok(tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_modes_have_no_mutation_tools() {
        for mode in Mode::ALL {
            let names: Vec<&str> = registry(mode, false).iter().map(|t| t.name).collect();
            let has_mutators = names.contains(&"write") && names.contains(&"edit") && names.contains(&"apply_patch");
            assert_eq!(has_mutators, mode == Mode::Chat, "{mode}: {names:?}");
            assert!(names.contains(&"read") && names.contains(&"bash"));
            assert!(!names.contains(&"web_fetch"));
        }
        assert_eq!(lookup("write", Mode::Plan, false).unwrap_err(), "tool not available in plan mode");
        assert!(lookup("write", Mode::Chat, false).is_ok());
        assert!(lookup("web_fetch", Mode::Chat, false).unwrap_err().contains("egress"));
        assert!(lookup("web_fetch", Mode::Review, true).is_ok());
    }
}
