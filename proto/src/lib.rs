//! The protocol of every Control Center process and the IPC plumbing they share.
//!
//! * generated gRPC code, one module per `.proto` package (`cc.<service>.v1`);
//! * [`adapter`]: the adapters' names;
//! * [`socket`]: Unix sockets in private directories;
//! * [`auth`]: who may call: peer uid from `SO_PEERCRED`, plus a per-peer secret on helper sockets;
//! * [`bootstrap`]: the message a helper reads on stdin at spawn;
//! * [`client`]: a channel over a Unix socket that presents a peer secret;
//! * [`hardening`]: `PR_SET_DUMPABLE`, capabilities, `no_new_privs`;
//! * [`helper`]: the start-up sequence every helper process runs;
//! * [`paths`]: the data directory's layout, which the daemon and its client share;
//! * [`reasons`]: the `google.rpc.ErrorInfo` reasons of refusals a client tells apart;
//! * [`time`]: `google.protobuf.Timestamp` to and from milliseconds;
//! * `reflection` (feature `reflection`, the supervisor's only): gRPC server reflection
//!   that lists exactly the services a socket serves.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod agent_event;
pub mod auth;
pub mod bootstrap;
pub mod client;
pub mod hardening;
pub mod helper;
pub mod logging;
pub mod paths;
pub mod reasons;
#[cfg(feature = "reflection")]
pub mod reflection;
pub mod secret;
pub mod socket;
pub mod time;

pub use prost_types::Timestamp;

/// Generated code for `cc.common.v1`.
pub mod common {
    pub mod v1 {
        tonic::include_proto!("cc.common.v1");
    }
}
/// Generated code for `cc.tools.v1`, the file tools' arguments and results.
pub mod tools {
    pub mod v1 {
        tonic::include_proto!("cc.tools.v1");
    }
}
/// Generated code for `cc.supervisor.v1`, the client API.
pub mod supervisor {
    // Generated: an approval event's question is big and its other variants small.
    #[allow(clippy::large_enum_variant)]
    pub mod v1 {
        tonic::include_proto!("cc.supervisor.v1");
    }
}
/// Generated code for `cc.sandboxd.v1`.
pub mod sandboxd {
    pub mod v1 {
        tonic::include_proto!("cc.sandboxd.v1");
    }
}
/// Generated code for `cc.broker.v1`.
pub mod broker {
    pub mod v1 {
        tonic::include_proto!("cc.broker.v1");
    }
}
/// Generated code for `cc.gateway.v1`.
pub mod gateway {
    pub mod v1 {
        tonic::include_proto!("cc.gateway.v1");
    }
}
/// Generated code for `cc.agent.v1`, what the agent's helpers inside its envelope ask.
pub mod agent {
    pub mod v1 {
        tonic::include_proto!("cc.agent.v1");
    }
}
/// Generated code for `cc.runner.v1`.
pub mod runner {
    pub mod v1 {
        tonic::include_proto!("cc.runner.v1");
    }
}

/// Generated code for `cc.vmagent.v1`, the microVM guest agent's.
pub mod vmagent {
    pub mod v1 {
        tonic::include_proto!("cc.vmagent.v1");
    }
}

/// Every `cc.*` descriptor, encoded, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cc_descriptor.bin"));

/// The version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
