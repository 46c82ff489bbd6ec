//! Starting bubblewrap for a launch, or ahead of one ([`crate::warm`]).
//!
//! bubblewrap reads its options from descriptor 3 (`--args 3`), never from its
//! command line: they hold the environment's values, which /proc/<pid>/cmdline would
//! show to every local user. It closes that descriptor once read, so the command never
//! sees it.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;

use command_fds::{CommandFdExt, FdMapping};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};

use crate::bwrap::{BwrapCommand, FIRST_BOUND_FD};

use cc_host::OPTIONS_FD;

/// Arguments as bubblewrap's `--args` and our init's `--command-stdin` read them: each
/// followed by a NUL.
pub fn nul_separated(args: &[OsString]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = Vec::with_capacity(args.iter().map(|a| a.len() + 1).sum());
    for a in args {
        bytes.extend_from_slice(a.as_bytes());
        bytes.push(0);
    }
    bytes
}

/// Writes `args`, NUL-separated, to `pipe` and closes it, in a task of its own: more
/// than a pipe holds is written while the other end reads.
pub fn write_arguments(mut pipe: impl AsyncWrite + Unpin + Send + 'static, args: &[OsString]) {
    let bytes = nul_separated(args);
    tokio::spawn(async move {
        let _ = pipe.write_all(&bytes).await;
    });
}

/// bubblewrap's arguments when its options come on [`OPTIONS_FD`]: `--args 3 -- INIT
/// [INIT OPTIONS] -- COMMAND`.
pub fn options_on_descriptor<'a>(init: &'a [OsString], command: &'a [OsString]) -> impl Iterator<Item = Vec<u8>> + 'a {
    use std::os::unix::ffi::OsStrExt;
    let head = ["--args", "3", "--"].into_iter().map(|a| a.as_bytes().to_vec());
    let init = init.iter().map(|a| a.as_bytes().to_vec());
    let command = command.iter().map(|a| a.as_bytes().to_vec());
    head.chain(init).chain(std::iter::once(b"--".to_vec())).chain(command)
}

/// When the envelope's init learns its command.
pub enum Command<'a> {
    /// On its command line, as `-- COMMAND…`.
    Now(&'a [OsString]),
    /// Later, on its stdin ([`crate::init`]'s `--command-stdin`): the envelope is set
    /// up now and waits.
    Later,
    /// On its command line, with its stdin a pipe the caller feeds (the command
    /// inherits it from our init): [`Started::command_pipe`].
    Interactive(&'a [OsString]),
    /// On its command line, with a terminal for its stdio, which our init makes its
    /// controlling terminal (`--terminal`).
    Terminal(&'a [OsString], TerminalSlave),
}

pub struct Started {
    pub child: Child,
    /// bubblewrap's process group (it is its leader), which a kill of the run signals.
    pub group: u32,
    /// Where a [`Command::Later`] envelope's command is to be written, or a
    /// [`Command::Interactive`] command's input.
    pub command_pipe: Option<ChildStdin>,
}

/// A pseudo-terminal's slave, as the stdio of a launch: the command reads and writes
/// the terminal, our init makes it the envelope's controlling terminal.
pub struct TerminalSlave(pub OwnedFd);

impl TerminalSlave {
    fn stdio(&self) -> std::io::Result<(Stdio, Stdio, Stdio)> {
        let one = || self.0.try_clone().map(Stdio::from);
        Ok((one()?, one()?, one()?))
    }
}

/// Starts `program` (bubblewrap) with `envelope`'s options and init, as `user` when
/// sandboxd is root, with `bound` (the descriptors of `envelope.bound`, in order) as
/// descriptors [`FIRST_BOUND_FD`] onwards. Must be called on one of the runtime's own threads, not a
/// blocking one: bubblewrap's `--die-with-parent` follows the thread that forked it,
/// and the blocking pool ends idle threads.
pub fn bubblewrap(
    program: &Path,
    envelope: &BwrapCommand,
    bound: Vec<OwnedFd>,
    command: Command<'_>,
    user: Option<cc_host::ServiceUser>,
    cgroup: &[std::path::PathBuf],
) -> std::io::Result<Started> {
    if bound.len() != envelope.bound.len() {
        return Err(std::io::Error::other("a descriptor for every path bound by descriptor is needed"));
    }
    let (options_read, options_write) = std::io::pipe()?;
    let mut c = tokio::process::Command::new(program);
    c.args(["--args", "3", "--"]).args(&envelope.init);
    let piped = matches!(command, Command::Later | Command::Interactive(_));
    let mut terminal = None;
    match command {
        Command::Now(argv) | Command::Interactive(argv) => c.arg("--").args(argv),
        Command::Later => c.arg("--command-stdin"),
        Command::Terminal(argv, slave) => {
            terminal = Some(slave);
            c.arg("--terminal").arg("--").args(argv)
        }
    };
    // Into the run's cgroup before bubblewrap execs: all it starts is counted there.
    // Joined before the descriptors below are mapped (pre-exec steps run in the order
    // they are added): mapping an envelope with many binds onto 3, 4, … may land on the
    // cgroup files' own descriptor numbers, and the join would then write elsewhere.
    cc_host::cgroup::join::join_on_exec(c.as_std_mut(), cc_host::cgroup::open_procs(cgroup)?);
    let mut mappings = vec![FdMapping { parent_fd: OwnedFd::from(options_read), child_fd: OPTIONS_FD }];
    mappings
        .extend(bound.into_iter().zip(FIRST_BOUND_FD..).map(|(parent_fd, child_fd)| FdMapping { parent_fd, child_fd }));
    c.fd_mappings(mappings).map_err(|e| std::io::Error::other(e.to_string()))?;
    // bubblewrap sets the environment and the directory inside (--setenv, --chdir).
    c.env_clear();
    // As root, every launch runs as the run's unprivileged user (bubblewrap then
    // relies on unprivileged user namespaces, as it does for a user's supervisor).
    if let Some(cc_host::ServiceUser { uid, gid }) = user {
        c.uid(uid).gid(gid);
    }
    match &terminal {
        Some(slave) => {
            let (stdin, stdout, stderr) = slave.stdio()?;
            c.stdin(stdin).stdout(stdout).stderr(stderr);
        }
        None => {
            let stdin = if piped { Stdio::piped() } else { Stdio::null() };
            c.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    c.process_group(0).kill_on_drop(true);
    let mut child = c.spawn()?;
    // Only the envelope holds the slave now: when it ends, the master reads EOF.
    drop(terminal);
    // Our copies of the read end and of the bound descriptors go with the command:
    // bubblewrap sees EOF once we have written everything.
    drop(c);
    let options = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(options_write))?;
    write_arguments(options, &envelope.options);
    let group = child.id().unwrap_or(0);
    let command_pipe = child.stdin.take();
    Ok(Started { child, group, command_pipe })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_nul_separated() {
        let args = vec![OsString::from("--setenv"), OsString::from("K"), OsString::from("v a l")];
        assert_eq!(nul_separated(&args), b"--setenv\0K\0v a l\0");
    }
}
