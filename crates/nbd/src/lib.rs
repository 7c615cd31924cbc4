//! `stripeguard serve`: the array as a block device over the Network Block Device protocol.
//!
//! [`proto`] is the wire format (FORMAT.md §4), [`server`] the accept loop, connections and
//! worker pool over any [`Export`], and [`client`] an NBD client that is a [`Disk`], so a member
//! of an array can be an export of another host's server. This crate sits below the engine: the
//! engine opens NBD members through [`client`] and binds its array to [`Export`]
//! (`stripeguard_engine::ArrayExport`).
//!
//! [`Disk`]: stripeguard_disk::Disk

#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod client;
pub mod proto;
pub mod server;

pub use client::{is_uri, NbdDisk};
pub use server::{Export, ExportError, Listener, Server, ServerConfig, Stats, Stream};
