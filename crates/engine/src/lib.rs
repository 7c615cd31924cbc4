//! The stripeguard array engine: an array over member disks that never returns silently wrong
//! data (within the fault model of docs/DESIGN.md: at most one silently wrong unit per stripe plus at
//! most `m - 1` erasures; beyond it, a read fails with an error naming the stripe).
//!
//! The engine executes the planner's per-stripe plans ([`stripeguard_plan`]): it reads the units
//! the plan names, checks them as the scheme says ([`stripeguard_integrity::diagnose`] on the
//! partial view), and on any failed check reads the whole stripe, diagnoses it with every
//! surviving unit voting, rebuilds the wrong units from redundancy, checks the rebuilt bytes,
//! writes them back and records an [`Event`]. Only checked bytes are returned or used to compute
//! parity (no parity pollution).
//!
//! Concurrency: requests to different stripes run in parallel; requests to one stripe are ordered
//! by a stripe lock (a fixed table of mutexes indexed by stripe); the planner's state sits behind
//! its own short-lived lock.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

mod appendix;
mod array;
mod assembly;
mod checkpoint;
mod ckcache;
mod ckchunk;
mod consistency;
mod env;
mod error;
mod events;
mod evlog;
mod forced;
mod grow;
mod heartbeat;
mod intent;
mod io;
mod jdev;
mod jdev_array;
mod journal;
mod journaling;
mod layout;
mod members;
mod metacheck;
mod num;
mod online;
mod owner;
mod rebuild;
mod repair;
mod reshape;
mod resync;
mod scrub;
mod spares;
mod stripe_state;
pub mod sync;
mod trust;
mod unitio;
mod units;
mod untrusted;
mod view;
mod zero;

pub use array::{
    create_accepts, member_unit_map, read_superblock_of, Array, ArrayConfig, AssembleOptions,
    Devices, APPENDIX_CACHE_ENTRIES,
};
pub use ckcache::CK_CACHE_TABLES;
pub use env::{Env, EnvRef, Host, LiveHolders, RealEnv, Sabotage, SimEnv};
pub use error::EngineError;
pub use events::{
    event_place, unit_label, Counters, Event, EventAction, EventKind, EventListener, EventRole,
};
pub use evlog::{read_log_of, LogRead, LoggedEvent};
pub use grow::Grown;
pub use heartbeat::{HEARTBEAT_MS, MAX_HEARTBEAT_MS};
pub use jdev::{read_journal_device_label, MAX_DEVICE_SLOTS, NEW_DEVICE_SLOTS};
pub use members::MemberHealth;
pub use metacheck::MetadataFinding;
pub use num::usize_of;
pub use online::HeldArray;
pub use owner::clock_utc;
pub use rebuild::{RebuildCanceller, ReplaceForce, ReplaceSummary};
pub use reshape::{continue_reshape, reshape_online, ReshapeTo, Reshaped, RESHAPE_BATCH};
pub use scrub::{scrub, Checkpoint, ScrubOptions, ScrubSummary};
pub use spares::{clear_spare_label, read_spare_label};
pub use stripeguard_format::Owner;
