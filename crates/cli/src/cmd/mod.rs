//! The array commands, one file each: its arguments and a `run` that parses, calls the library
//! crates and prints. What they decide (verdicts, exit statuses, orchestration) is in
//! `stripeguard-ops` and `stripeguard-campaign`.

pub mod campaign;
pub mod clear;
mod crash;
pub mod create;
pub mod demo;
pub mod docs;
pub mod events;
pub mod examine;
pub mod grow;
pub mod inject;
pub mod list;
mod live;
pub mod metrics;
pub mod monitor;
pub mod replace;
pub mod rw;
pub mod scan;
pub mod scrub;
pub mod shared;
mod simulate;
pub mod spares;
pub mod status;
pub mod stop;
pub mod wipe;
