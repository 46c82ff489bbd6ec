//! The Linux envelope: a bubblewrap argv computed from a run policy (DESIGN.md §5).
//! Pure: the host's facts come in as a [`SystemView`] and a list of protected paths,
//! so that every envelope is tested without launching it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cc_host::probe::ENVELOPE_ISOLATION_FLAGS;

use crate::policy::RunPolicy;
use crate::system::{SystemEntry, SystemView};

/// Where our init is bound inside every envelope.
pub const INIT_INSIDE: &str = "/run/cc/init";
/// Where the runner kind shows the cc-runner binary.
pub const RUNNER_INSIDE: &str = "/run/cc/runner";
/// Where the overlay kind shows cc-hook, the agent's PreToolUse hook (installed next
/// to cc-runner), for the agent's settings to name.
pub const HOOK_INSIDE: &str = "/run/cc/hook";
/// And cc-mcp, the product's MCP server, for the agent's MCP config.
pub const MCP_INSIDE: &str = "/run/cc/mcp";
/// Where the run's bridge sockets are bound, `<port>.sock` each.
pub const BRIDGES_INSIDE: &str = "/run/cc/bridges";
/// The descriptor of the first path bound by descriptor (`--bind-fd`); the rest follow
/// in order. 3 carries bubblewrap's options.
pub use cc_host::FIRST_BOUND_FD;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Claude Code and ACP: agent work RW, agent config RO, repos RW, attachments RO.
    Overlay,
    /// The harness bash: only the run's working directory RW.
    HarnessBash,
    /// The runner: the run's working dir, repos and agent work RW (the roots its
    /// tools confine to), attachments RO, and its socket's directory.
    Runner,
}

/// What one launch needs besides the policy.
pub struct Envelope<'a> {
    pub policy: &'a RunPolicy,
    pub kind: Kind,
    pub system: &'a SystemView,
    /// Existing code-execution vectors inside writable roots (`.git/hooks`, `.git/config`,
    /// rc files): bound read-only after everything else.
    pub protected: &'a [PathBuf],
    /// The host path of the cc-init binary.
    pub init: &'a Path,
    /// The host path of the cc-runner binary (the runner kind runs it, and only it).
    pub runner: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub argv: &'a [OsString],
    /// The data directory, so that only the run's roots inside it are visible (not
    /// state.db, the sockets, other runs): hidden behind an empty read-only tmpfs when
    /// a system directory bound into the envelope holds it.
    pub data_dir: Option<&'a Path>,
}

/// The roots a kind makes writable, and those it shows read-only.
pub fn roots(policy: &RunPolicy, kind: Kind) -> (Vec<PathBuf>, Vec<PathBuf>) {
    match kind {
        Kind::HarnessBash => (vec![policy.work_dir.clone()], vec![]),
        Kind::Runner => {
            let mut writable: Vec<PathBuf> = vec![policy.work_dir.clone()];
            for root in [&policy.repos, &policy.agent_work, &policy.runner_socket_dir].into_iter().flatten() {
                // A root inside another is already visible through it.
                if !writable.iter().any(|w| root.starts_with(w)) {
                    writable.retain(|w| !w.starts_with(root));
                    writable.push(root.clone());
                }
            }
            (writable, policy.attachments.clone().into_iter().collect())
        }
        Kind::Overlay => {
            let writable: Vec<PathBuf> =
                [policy.agent_work.clone(), policy.repos.clone()].into_iter().flatten().collect();
            let readonly: Vec<PathBuf> =
                [policy.agent_config.clone(), policy.attachments.clone()].into_iter().flatten().collect();
            (writable, readonly)
        }
    }
}

/// HOME inside the envelope. The harness bash gets the envelope's own /tmp: its
/// working directory is the person's repository copy, not a place for dotfiles.
pub fn home(policy: &RunPolicy, kind: Kind) -> PathBuf {
    match kind {
        Kind::HarnessBash | Kind::Runner => PathBuf::from("/tmp"),
        Kind::Overlay => policy.home().to_owned(),
    }
}

/// bubblewrap's command line in its parts: bubblewrap's own options (read from a
/// descriptor, never shown in /proc), our init with its options, and the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapCommand {
    pub options: Vec<OsString>,
    pub init: Vec<OsString>,
    pub command: Vec<OsString>,
    /// The paths inside the run's roots that the options bind by descriptor
    /// (`--bind-fd N PATH`, `--ro-bind-fd N PATH`): the one at index i is to be opened,
    /// without following any link, as descriptor [`FIRST_BOUND_FD`] + i. Each is bound
    /// at its own path.
    pub bound: Vec<PathBuf>,
}

impl BwrapCommand {
    /// As one argv: `OPTIONS -- INIT [INIT OPTIONS] -- COMMAND`. Only the parts tell
    /// where the options end: a value among them may itself be `--`.
    pub fn argv(self) -> Vec<OsString> {
        let mut all = self.options;
        all.push("--".into());
        all.extend(self.init);
        all.push("--".into());
        all.extend(self.command);
        all
    }
}

impl Envelope<'_> {
    /// The argv as `ccctl sandbox explain` prints it, ready to paste: every bind by
    /// path, since the descriptors of a launch exist only in it.
    pub fn bwrap_args(&self) -> Vec<OsString> {
        self.bwrap_command_by_path().argv()
    }

    /// What a launch runs: every path inside the run's roots bound by descriptor.
    pub fn bwrap_command(&self) -> BwrapCommand {
        self.build(true)
    }

    /// The same envelope with every bind by path, as an explanation shows it.
    pub fn bwrap_command_by_path(&self) -> BwrapCommand {
        self.build(false)
    }

    fn build(&self, by_descriptor: bool) -> BwrapCommand {
        let mut a = Args { by_descriptor, ..Args::default() };
        // The options the probe's test launch proved.
        a.flags(ENVELOPE_ISOLATION_FLAGS);
        a.flag("--clearenv");
        for (name, value) in self.env {
            a.flag("--setenv").arg(name).arg(value);
        }
        // A read-only view of the system, its secrets masked.
        for entry in &self.system.entries {
            match entry {
                SystemEntry::Dir(dir) => a.bind("--ro-bind", dir, dir),
                SystemEntry::Symlink { link, target } => {
                    a.flag("--symlink").arg(target).arg(link);
                }
            }
        }
        for file in &self.system.secret_files {
            a.bind("--ro-bind", Path::new("/dev/null"), file);
        }
        for dir in &self.system.secret_dirs {
            a.flag("--tmpfs").arg(dir).flag("--remount-ro").arg(dir);
        }
        a.flag("--proc").arg("/proc").flag("--dev").arg("/dev");
        // Each tmpfs is memory: sized, so that a full /tmp is a full disk to the
        // command rather than the host's memory (cgroup or not).
        for dir in ["/tmp", "/run"] {
            if self.policy.limits.tmp_size_bytes > 0 {
                a.flag("--size").arg(self.policy.limits.tmp_size_bytes.to_string());
            }
            a.flag("--tmpfs").arg(dir);
        }

        // The kind's roots, then, last, everything inside them that must stay read-only.
        let (writable, readonly) = roots(self.policy, self.kind);
        // A git-worktree conversation's shared git directory: read-only, but for what
        // git in a worktree writes.
        let shared_ro: Vec<PathBuf> = self.policy.shared_git.iter().map(|g| g.common_dir.clone()).collect();
        let shared_rw: Vec<PathBuf> = self.policy.shared_git.iter().flat_map(|g| g.writable.clone()).collect();
        // bubblewrap creates the directories leading to each bind. Under the fresh
        // /tmp they would be writable scratch that looks like the host's paths: each
        // such tree gets a tmpfs of its own, made read-only once the binds are in.
        let mut skeletons = tmp_skeletons(writable.iter().chain(&readonly).chain(&shared_ro));
        // Every root is inside the data directory (the policy checks it), so only a
        // bound system directory could show the rest of it. Anywhere else only the
        // directories leading to the roots exist, on the read-only root or in a
        // skeleton: a tmpfs of its own would be one more mount for every launch.
        let shown_by_system = |data: &&Path| {
            self.system.entries.iter().any(|e| matches!(e, SystemEntry::Dir(dir) if data.starts_with(dir)))
        };
        skeletons.extend(self.data_dir.filter(shown_by_system).map(Path::to_owned));
        for top in &skeletons {
            a.flag("--tmpfs").arg(top);
        }
        // The roots and everything inside them are the agent's to write (or, read-only
        // ones, inside the data directory): bound by descriptor, so that what is mounted
        // is what was opened, with no link followed.
        for root in &writable {
            a.bind_inside_roots(true, root);
        }
        for root in &readonly {
            a.bind_inside_roots(false, root);
        }
        for common in &shared_ro {
            a.bind_inside_roots(false, common);
        }
        for dir in &shared_rw {
            a.bind_inside_roots(true, dir);
        }
        let writable: Vec<PathBuf> = writable.into_iter().chain(shared_rw).collect();
        let inside_writable = |p: &Path| writable.iter().any(|root| p.starts_with(root));
        let mut last: Vec<&PathBuf> = self.protected.iter().chain(&self.policy.write_deny).collect();
        last.sort();
        last.dedup();
        // Every directory between a writable root and a protected path becomes a mount
        // point of its own: a mount point cannot be renamed or removed, so `mv .git
        // .old; mkdir .git` cannot get round the protection.
        let mut pinned = std::collections::BTreeSet::new();
        for path in &last {
            if let Some(root) = writable.iter().find(|root| path.starts_with(root)) {
                let mut dir = path.parent();
                while let Some(d) = dir {
                    if d == root.as_path() || !d.starts_with(root) {
                        break;
                    }
                    pinned.insert(d.to_owned());
                    dir = d.parent();
                }
            }
        }
        for dir in &pinned {
            a.bind_inside_roots(true, dir);
        }
        for path in last {
            // A path outside every writable root is not visible at all, which is
            // stronger than read-only; binding it would make it appear.
            if inside_writable(path) {
                a.bind_inside_roots(false, path);
            }
        }
        a.bind("--ro-bind", self.init, Path::new(INIT_INSIDE));
        if self.kind == Kind::Runner {
            a.bind("--ro-bind", self.runner, Path::new(RUNNER_INSIDE));
        }
        if self.kind == Kind::Overlay {
            a.bind("--ro-bind", &self.runner.with_file_name("cc-hook"), Path::new(HOOK_INSIDE));
            a.bind("--ro-bind", &self.runner.with_file_name("cc-mcp"), Path::new(MCP_INSIDE));
        }
        // The run's sockets, for our init to bridge; the workload cannot open AF_UNIX
        // sockets (seccomp), so it reaches them only as 127.0.0.1:<port>. Each socket's
        // directory is bound, so that a socket its helper makes again after a restart
        // is the one the envelope reaches.
        for (port, socket) in &self.policy.bridges {
            if let Some(dir) = socket.parent() {
                a.bind("--ro-bind", dir, &Path::new(BRIDGES_INSIDE).join(port.to_string()));
            }
        }
        // Nothing outside the roots, /tmp and /dev is writable: not the paths leading to
        // the roots, and not the root filesystem itself.
        for top in &skeletons {
            a.flag("--remount-ro").arg(top);
        }
        a.flag("--remount-ro").arg("/");
        a.flag("--chdir").arg(&self.policy.work_dir);
        let mut init = Args::default();
        init.arg(INIT_INSIDE);
        if self.policy.limits.open_files_max > 0 {
            init.flag("--nofile").arg(self.policy.limits.open_files_max.to_string());
        }

        if self.kind == Kind::Runner {
            // The runner serves its own socket, and nothing else: it needs AF_UNIX,
            // no bridges, and runs no command of the caller's.
            init.flag("--allow-unix");
            init.checks(&a.checks);
            return BwrapCommand {
                options: a.options,
                init: init.options,
                command: vec![RUNNER_INSIDE.into()],
                bound: a.bound,
            };
        }
        for (port, socket) in &self.policy.bridges {
            let name = socket.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            init.flag("--bridge").arg(format!("{port}={BRIDGES_INSIDE}/{port}/{name}"));
        }
        init.checks(&a.checks);
        BwrapCommand { options: a.options, init: init.options, command: self.argv.to_vec(), bound: a.bound }
    }
}

/// The first directory below /tmp of every root under /tmp.
fn tmp_skeletons<'a>(roots: impl Iterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let mut tops: Vec<PathBuf> = roots
        .filter_map(|root| {
            let below = root.strip_prefix("/tmp").ok()?;
            let first = below.components().next()?;
            Some(Path::new("/tmp").join(first))
        })
        .collect();
    tops.sort();
    tops.dedup();
    tops
}

#[derive(Default)]
struct Args {
    options: Vec<OsString>,
    by_descriptor: bool,
    bound: Vec<PathBuf>,
    /// Every path bound inside the roots, and whether read-only: our init checks each
    /// as the envelope shows it (`--check-ro`, `--check-rw`).
    checks: Vec<(PathBuf, bool)>,
}

impl Args {
    fn flag(&mut self, flag: &str) -> &mut Self {
        self.options.push(flag.into());
        self
    }
    fn flags(&mut self, flags: &[&str]) {
        self.options.extend(flags.iter().map(OsString::from));
    }
    fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.options.push(arg.into());
        self
    }
    fn bind(&mut self, how: &str, from: &Path, to: &Path) {
        self.flag(how).arg(from).arg(to);
    }
    /// Our init's `--check-ro`/`--check-rw` for every path bound inside the roots; a
    /// path bound twice (a root that is also a pinned directory) as the last bind left it.
    fn checks(&mut self, bound: &[(PathBuf, bool)]) {
        let mut last: BTreeMap<&PathBuf, bool> = BTreeMap::new();
        for (path, read_only) in bound {
            last.insert(path, *read_only);
        }
        for (path, read_only) in last {
            self.flag(if read_only { "--check-ro" } else { "--check-rw" }).arg(path);
        }
    }

    /// A path inside the run's roots, bound at itself: by descriptor for a launch, by
    /// path for an explanation.
    fn bind_inside_roots(&mut self, writable: bool, path: &Path) {
        self.checks.push((path.to_owned(), !writable));
        if self.by_descriptor {
            let fd = FIRST_BOUND_FD + self.bound.len() as i32;
            self.flag(if writable { "--bind-fd" } else { "--ro-bind-fd" }).arg(fd.to_string()).arg(path);
            self.bound.push(path.to_owned());
        } else {
            self.bind(if writable { "--bind" } else { "--ro-bind" }, path, path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RunPolicy {
        RunPolicy {
            run_id: "r1".into(),
            agent_work: Some("/d/conversations/c1/agents/a/work".into()),
            agent_config: Some("/d/conversations/c1/agents/a/config".into()),
            repos: Some("/d/conversations/c1/repos".into()),
            attachments: None,
            work_dir: "/d/conversations/c1/repos/demo".into(),
            write_deny: vec!["/home/me/src/demo".into(), "/d/conversations/c1/repos/demo/.git/config".into()],
            env: BTreeMap::new(),
            bridges: BTreeMap::new(),
            runner_socket_dir: Some("/d/conversations/c1/sock".into()),
            shared_git: vec![],
            identities: vec![],
            limits: Default::default(),
        }
    }

    fn view() -> SystemView {
        SystemView {
            entries: vec![
                SystemEntry::Dir("/usr".into()),
                SystemEntry::Symlink { link: "/bin".into(), target: "usr/bin".into() },
                SystemEntry::Dir("/etc".into()),
            ],
            secret_files: vec!["/etc/shadow".into()],
            secret_dirs: vec!["/etc/ssh".into()],
        }
    }

    fn args(kind: Kind, protected: &[PathBuf]) -> Vec<String> {
        let p = policy();
        let v = view();
        let env = BTreeMap::from([("HOME".to_owned(), "/w".to_owned())]);
        let argv = vec![OsString::from("sh"), OsString::from("-c"), OsString::from("echo hi")];
        let e = Envelope {
            policy: &p,
            kind,
            system: &v,
            protected,
            init: Path::new("/opt/cc/cc-sandboxd"),
            runner: Path::new("/opt/cc/cc-runner"),
            data_dir: Some(Path::new("/d")),
            env: &env,
            argv: &argv,
        };
        e.bwrap_args().into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    /// The argv without our init's checks of what is bound (tested on their own).
    fn without_checks(args: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--check-ro" || a == "--check-rw" {
                it.next();
            } else {
                out.push(a.clone());
            }
        }
        out
    }

    /// Every path bound inside the roots is checked by our init, read-only ones as
    /// read-only, once each.
    #[test]
    fn our_init_checks_every_path_bound_inside_the_roots() {
        let hooks = PathBuf::from("/d/conversations/c1/repos/demo/.git/hooks");
        let a = args(Kind::Overlay, std::slice::from_ref(&hooks));
        let init = &a[a.iter().rposition(|x| x == INIT_INSIDE).unwrap()..];
        for (flag, path) in [
            ("--check-rw", "/d/conversations/c1/repos"),
            ("--check-rw", "/d/conversations/c1/repos/demo/.git"),
            ("--check-ro", "/d/conversations/c1/repos/demo/.git/hooks"),
            ("--check-ro", "/d/conversations/c1/repos/demo/.git/config"),
            ("--check-ro", "/d/conversations/c1/agents/a/config"),
        ] {
            assert_eq!(init.windows(2).filter(|w| w[1] == path).count(), 1, "{path}: {init:?}");
            assert!(position(init, &[flag, path]).is_some(), "{flag} {path}: {init:?}");
        }
        assert!(!init.iter().any(|x| x.starts_with("/usr") || x == "/home/me/src/demo"), "{init:?}");
    }

    fn position(args: &[String], window: &[&str]) -> Option<usize> {
        args.windows(window.len()).position(|w| w.iter().zip(window).all(|(a, b)| a == b))
    }

    #[test]
    fn the_runner_kind_binds_its_roots_and_socket_and_runs_only_the_runner() {
        let a = args(Kind::Runner, &[]);
        for root in ["/d/conversations/c1/repos", "/d/conversations/c1/agents/a/work", "/d/conversations/c1/sock"] {
            assert!(position(&a, &["--bind", root, root]).is_some(), "{root}: {a:?}");
        }
        // The working dir is inside repos/, visible through it (it is bound again only as
        // a pinned directory above the protected .git/config, after the roots).
        let (writable, _) = roots(&policy(), Kind::Runner);
        assert!(!writable.iter().any(|w| w.ends_with("repos/demo")), "{writable:?}");
        assert!(!a.iter().any(|x| x.contains("agents/a/config")), "the agent's config is not the runner's");
        assert!(position(&a, &["--ro-bind", "/opt/cc/cc-runner", RUNNER_INSIDE]).is_some());
        let a = without_checks(&a);
        assert!(a.ends_with(&[INIT_INSIDE.into(), "--allow-unix".into(), "--".into(), RUNNER_INSIDE.into()]), "{a:?}");
        assert!(!a.iter().any(|x| x == "echo hi"), "no command of the caller's");
        for flag in ["--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent", "--clearenv"] {
            assert!(a.iter().any(|x| x == flag), "{flag}");
        }
        // Other kinds never bind the runner or its socket, nor allow AF_UNIX.
        let b = args(Kind::HarnessBash, &[]);
        assert!(!b.iter().any(|x| x.contains("/sock") || x == "--allow-unix" || x == RUNNER_INSIDE), "{b:?}");
    }

    /// A launch binds everything inside the roots by descriptor, numbered from
    /// FIRST_BOUND_FD in the order of `bound`, and nothing inside them by path; the
    /// explanation shows the same binds by path.
    #[test]
    fn a_launch_binds_what_is_inside_the_roots_by_descriptor() {
        let (p, v, env) = (policy(), view(), BTreeMap::new());
        let hooks = PathBuf::from("/d/conversations/c1/repos/demo/.git/hooks");
        let argv = vec![OsString::from("true")];
        let e = Envelope {
            policy: &p,
            kind: Kind::Overlay,
            system: &v,
            protected: std::slice::from_ref(&hooks),
            init: Path::new("/i"),
            runner: Path::new("/r"),
            data_dir: Some(Path::new("/d")),
            env: &env,
            argv: &argv,
        };
        let command = e.bwrap_command();
        let a: Vec<String> = command.options.iter().map(|x| x.to_str().unwrap().to_owned()).collect();
        assert!(!a.iter().any(|x| x == "--bind"), "{a:?}");
        assert!(!a.windows(2).any(|w| w[0] == "--ro-bind" && w[1].starts_with("/d/")), "{a:?}");
        for (i, path) in command.bound.iter().enumerate() {
            let fd = (FIRST_BOUND_FD + i as i32).to_string();
            let at = a.iter().position(|x| *x == fd).unwrap_or_else(|| panic!("{fd} missing: {a:?}"));
            assert!(a[at - 1] == "--bind-fd" || a[at - 1] == "--ro-bind-fd");
            assert_eq!(a[at + 1], path.to_str().unwrap());
        }
        assert!(
            position(
                &a,
                &[
                    "--ro-bind-fd",
                    &(FIRST_BOUND_FD + command.bound.iter().position(|b| *b == hooks).unwrap() as i32).to_string(),
                    hooks.to_str().unwrap()
                ]
            )
            .is_some()
        );
        assert!(command.bound.iter().all(|b| b.starts_with("/d/conversations/c1")), "{:?}", command.bound);
        let explained: Vec<String> = e.bwrap_args().into_iter().map(|x| x.into_string().unwrap()).collect();
        assert!(position(&explained, &["--ro-bind", hooks.to_str().unwrap(), hooks.to_str().unwrap()]).is_some());
        assert!(!explained.iter().any(|x| x.ends_with("-fd")));
    }

    #[test]
    fn isolation_flags_come_first() {
        let a = args(Kind::HarnessBash, &[]);
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
            "--as-pid-1",
            "--clearenv",
        ] {
            assert!(a.contains(&flag.to_owned()), "{flag}");
        }
        assert!(position(&a, &["--cap-drop", "ALL"]).is_some());
        assert!(!a.iter().any(|x| x == "--share-net" || x == "--unshare-user-try"));
    }

    #[test]
    fn harness_bash_binds_only_the_working_directory() {
        let a = args(Kind::HarnessBash, &[]);
        let writable: Vec<_> =
            a.iter().enumerate().filter(|(_, x)| *x == "--bind").map(|(i, _)| a[i + 1].clone()).collect();
        // The root, and directories inside it pinned as mount points (never wider).
        assert_eq!(writable[0], "/d/conversations/c1/repos/demo");
        assert!(writable.iter().all(|w| w.starts_with("/d/conversations/c1/repos/demo")), "{writable:?}");
        assert!(!a.iter().any(|x| x.contains("/agents/a/config")));
    }

    #[test]
    fn overlay_binds_its_four_roots_with_the_right_modes() {
        let a = args(Kind::Overlay, &[]);
        assert!(
            position(&a, &["--bind", "/d/conversations/c1/agents/a/work", "/d/conversations/c1/agents/a/work"])
                .is_some()
        );
        assert!(position(&a, &["--bind", "/d/conversations/c1/repos", "/d/conversations/c1/repos"]).is_some());
        assert!(
            position(&a, &["--ro-bind", "/d/conversations/c1/agents/a/config", "/d/conversations/c1/agents/a/config"])
                .is_some()
        );
        // The agent's hook, from beside cc-runner; no other kind shows it.
        assert!(position(&a, &["--ro-bind", "/opt/cc/cc-hook", HOOK_INSIDE]).is_some());
        assert!(position(&a, &["--ro-bind", "/opt/cc/cc-mcp", MCP_INSIDE]).is_some());
        assert!(!args(Kind::HarnessBash, &[]).iter().any(|x| x == HOOK_INSIDE));
    }

    #[test]
    fn write_deny_and_protected_paths_come_last_and_only_inside_writable_roots() {
        let hooks = PathBuf::from("/d/conversations/c1/repos/demo/.git/hooks");
        let a = args(Kind::Overlay, std::slice::from_ref(&hooks));
        let last_writable = a.iter().rposition(|x| x == "--bind").unwrap();
        let hooks_at = position(&a, &["--ro-bind", hooks.to_str().unwrap(), hooks.to_str().unwrap()]).unwrap();
        let config_at = position(
            &a,
            &["--ro-bind", "/d/conversations/c1/repos/demo/.git/config", "/d/conversations/c1/repos/demo/.git/config"],
        )
        .unwrap();
        assert!(hooks_at > last_writable && config_at > last_writable);
        // The registered checkout is outside every root: not bound, so not visible at all.
        assert!(!a.iter().any(|x| x == "/home/me/src/demo"));
    }

    #[test]
    fn directories_leading_to_protected_paths_are_pinned() {
        let hooks = PathBuf::from("/d/conversations/c1/repos/demo/.git/hooks");
        let a = args(Kind::Overlay, std::slice::from_ref(&hooks));
        for dir in ["/d/conversations/c1/repos/demo", "/d/conversations/c1/repos/demo/.git"] {
            assert!(position(&a, &["--bind", dir, dir]).is_some(), "{dir} not pinned: {a:?}");
        }
        // /d is not under a bound system directory: nothing shows the rest of it, and it
        // costs no mount of its own.
        assert!(position(&a, &["--tmpfs", "/d"]).is_none(), "{a:?}");
        assert!(a.contains(&"--disable-userns".to_owned()));
    }

    #[test]
    fn a_data_dir_under_a_system_directory_is_masked_before_the_roots() {
        let mut p = policy();
        let move_root = |r: &mut PathBuf| *r = Path::new("/opt/cc").join(r.strip_prefix("/d").unwrap());
        move_root(&mut p.work_dir);
        for root in [&mut p.agent_work, &mut p.repos, &mut p.agent_config, &mut p.runner_socket_dir] {
            root.as_mut().map(move_root);
        }
        let mut v = view();
        v.entries.push(SystemEntry::Dir("/opt".into()));
        let (env, argv) = (BTreeMap::new(), vec![OsString::from("true")]);
        let a: Vec<String> = Envelope {
            policy: &p,
            kind: Kind::Overlay,
            system: &v,
            protected: &[],
            init: Path::new("/i"),
            runner: Path::new("/r"),
            data_dir: Some(Path::new("/opt/cc")),
            env: &env,
            argv: &argv,
        }
        .bwrap_args()
        .into_iter()
        .map(|x| x.into_string().unwrap())
        .collect();
        let mask = position(&a, &["--tmpfs", "/opt/cc"]).unwrap();
        let first_root = a.iter().position(|x| x == "--bind").unwrap();
        assert!(position(&a, &["--ro-bind", "/opt", "/opt"]).unwrap() < mask && mask < first_root);
        assert!(position(&a, &["--remount-ro", "/opt/cc"]).unwrap() > first_root);
    }

    #[test]
    fn system_view_is_read_only_and_secrets_are_masked() {
        let a = args(Kind::HarnessBash, &[]);
        assert!(position(&a, &["--ro-bind", "/usr", "/usr"]).is_some());
        assert!(position(&a, &["--symlink", "usr/bin", "/bin"]).is_some());
        assert!(position(&a, &["--ro-bind", "/dev/null", "/etc/shadow"]).is_some());
        assert!(position(&a, &["--tmpfs", "/etc/ssh", "--remount-ro", "/etc/ssh"]).is_some());
        assert!(!a.iter().any(|x| x.starts_with("/home") || x == "/root"));
    }

    /// `true` in a harness_bash envelope of `p`, with no protected paths or data dir.
    fn bare_args(p: &RunPolicy) -> Vec<String> {
        let (v, env, argv) = (view(), BTreeMap::new(), vec![OsString::from("true")]);
        let e = Envelope {
            policy: p,
            kind: Kind::HarnessBash,
            system: &v,
            protected: &[],
            init: Path::new("/i"),
            runner: Path::new("/r"),
            data_dir: None,
            env: &env,
            argv: &argv,
        };
        e.bwrap_args().into_iter().map(|x| x.into_string().unwrap()).collect()
    }

    #[test]
    fn paths_leading_to_roots_under_tmp_are_read_only() {
        let mut p = policy();
        p.work_dir = "/tmp/t1/data/repos/demo".into();
        let a = bare_args(&p);
        let tmpfs = position(&a, &["--tmpfs", "/tmp/t1"]).unwrap();
        let bind = position(&a, &["--bind", "/tmp/t1/data/repos/demo", "/tmp/t1/data/repos/demo"]).unwrap();
        let remount = position(&a, &["--remount-ro", "/tmp/t1"]).unwrap();
        assert!(tmpfs < bind && bind < remount);
        assert!(position(&a, &["--remount-ro", "/"]).unwrap() > bind);
    }

    #[test]
    fn bridges_are_bound_and_handed_to_init() {
        let mut p = policy();
        p.bridges.insert(41001, "/d/gateway/runs/r1/git.sock".into());
        let a = without_checks(&bare_args(&p));
        assert!(position(&a, &["--ro-bind", "/d/gateway/runs/r1", "/run/cc/bridges/41001"]).is_some());
        let tail = &a[a.iter().rposition(|x| x == INIT_INSIDE).unwrap()..];
        assert_eq!(tail, [INIT_INSIDE, "--bridge", "41001=/run/cc/bridges/41001/git.sock", "--", "true"]);
    }

    #[test]
    fn the_command_runs_under_our_init() {
        let a = without_checks(&args(Kind::HarnessBash, &[]));
        let tail = &a[a.iter().position(|x| x == "--").unwrap()..];
        assert_eq!(tail, ["--", INIT_INSIDE, "--", "sh", "-c", "echo hi"]);
        assert!(position(&a, &["--ro-bind", "/opt/cc/cc-sandboxd", INIT_INSIDE]).is_some());
        assert!(position(&a, &["--chdir", "/d/conversations/c1/repos/demo"]).is_some());
    }
}
