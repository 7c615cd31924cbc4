//! The Network Block Device protocol below the engine: [`proto`] is the wire format (FORMAT.md
//! §4) and [`client`] an NBD client that is a [`Disk`], so a member of an array can be an export
//! of another host's server; [`tls`] is TLS for both ends. The server (`stripeguard serve`) is `stripeguard_serve`, above the
//! engine.
//!
//! [`Disk`]: stripeguard_disk::Disk

#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod client;
pub mod proto;
pub mod tls;

pub use client::{is_uri, parse_uri, Address, NbdDisk};
