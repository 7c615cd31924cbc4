//! Benchmarks for `stripeguard bench`. Each measurement is repeated and the best run kept (the
//! machines are shared and noisy); every speed claim is a ratio to a reference measured in the
//! same run, never an absolute threshold.

#![warn(clippy::unwrap_used)]

pub mod array;
pub mod codec;
pub mod io;
pub mod sim;
pub mod timing;

pub use codec::{run as run_codec, CodecOptions, CodecReport, Measurement};
