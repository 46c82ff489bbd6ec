//! What the Debian package ships besides the binaries, made from the same definitions
//! the binaries use (clap for the man pages and completions, the install module for the
//! unit, docs/reference/config.md for the config file's page), and the checks that
//! keep `docs/` true to the code.
#![forbid(unsafe_code)]

pub mod config_reference;
pub mod guides;
pub mod man;
pub mod markdown;
pub mod shown;
pub mod stage;
