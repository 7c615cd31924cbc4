//! `stripeguard serve`: the array as a block device over the Network Block Device protocol.
//!
//! [`server`] is the accept loop, connections and worker pool over any [`Export`]; [`export`]
//! binds the engine's array to it ([`ArrayExport`]); [`tls`] is its TLS (X.509 with client
//! certificates). The wire format and the client (an NBD
//! export as a member of an array) are `stripeguard_nbd`, below the engine; this crate sits above
//! it, so the engine never links a listening socket.

#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod export;
pub mod server;
pub mod tls;

pub use export::ArrayExport;
pub use server::{
    Export, ExportError, Latency, Listener, Server, ServerConfig, Stats, Stream, LATENCY_BOUNDS_US,
    LATENCY_COMMANDS,
};
pub use tls::TlsConfig;
