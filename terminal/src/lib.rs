//! A command on a pseudo-terminal that outlives its clients, as a tmux session does:
//!
//! * [`session`]: the scrollback a new attach replays, the clients attached now, flow
//!   control; the same whatever hosts the command;
//! * [`host`]: the host backend's pseudo-terminal, a login shell on the host,
//!   unsandboxed.
//!
//! A crate of its own, apart from the daemon that keeps the list of terminals: a
//! session moves bytes a person's (or an agent's) command printed, and holds no run,
//! no gate and no database, so it is tested without them (and is what a per-terminal
//! process would host, as containerd's shim hosts a task).

pub mod host;
pub mod session;
