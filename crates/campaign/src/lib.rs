//! Campaigns over the engine, using only its public interface: the seeded simulation ([`sim`]:
//! concurrent clients, silent faults, departures, power cuts at any I/O and restarts in one
//! replayable loop), of which the fault campaign ([`fault`]: seeded reads and writes with
//! silent faults and failed members) and the crash campaign ([`crash`]: power cuts on simulated
//! disks, reassembly with resync, a model of what was flushed) are configurations, and
//! `stripeguard demo` ([`demo`]). Each returns a report; what must hold is
//! [`CampaignCase::passed`] and [`CrashReport::verdict`] (the CLI prints them; the tests assert
//! their own, stricter rules where they want them).
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod crash;
pub mod demo;
pub mod fault;
pub mod sim;

pub use crash::{crash_cases, run_crash_campaign, CrashConfig, CrashReport};
pub use demo::{run_demo, DemoRow, DEMO_DATA, DEMO_PARITY};
pub use fault::{
    campaign_cases, run_campaign, CampaignCase, CampaignConfig, CampaignReport, Pattern,
};
