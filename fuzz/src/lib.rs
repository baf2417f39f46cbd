//! The checks behind Verge's fuzz targets (docs/fuzzing.md). Each module takes the raw bytes
//! libFuzzer made, feeds them to the real parsing code of the crate that owns it, and asserts
//! the properties that code promises; a panic (a failed assertion, an overflow, an index out
//! of bounds) is what the fuzzer reports as a crash.
//!
//! # Layout
//! - [`message`]: protobuf frames and messages → the typed envelope, routing at cloudhub.
//! - [`path`]: resource paths, route names, node names, resourceVersions, routing rules.
//! - [`inventory`]: a node's inventory → what edgecontroller believes it holds → resync plan.
//! - [`config`]: the YAML configurations of edgecore, cloudhub and edgecontroller.
//! - [`pki`]: node CSRs, certificates, bootstrap tokens and their Secrets, CA hashes.
//! - [`device`]: Device and DeviceModel JSON → the device checks → the DMI `Device`.
//! - [`edgeapp`]: an EdgeApplication's spec → fleetcontroller's objects per target.
//! - [`operations`]: an operations job's spec → fleetcontroller's field checks.
//! - [`mqtt`]: MQTT topics and payloads of edge apps → the eventbus's decoders.
//! - [`relay`]: a mapper's HTTP/2 bytes on the DMI socket → the relay's framing and HPACK.
//! - [`spdy`]: a streaming client's SPDY/3.1 bytes → edgecore's frame codec and zlib headers.
//! - [`websocket`]: a streaming client's WebSocket bytes → the framing with edgecore's limits
//!   → the channel decoding.
//!
//! - `seeds` and `tests` (test builds): the seed inputs, and checks that each reaches the
//!   code it was made for.
//!
//! `fuzz_targets/<name>.rs` are one-line libFuzzer entry points calling `<module>::check`.

pub mod config;
pub mod device;
pub mod edgeapp;
pub mod inventory;
pub mod message;
pub mod mqtt;
pub mod operations;
pub mod path;
pub mod pki;
pub mod relay;
pub mod spdy;
pub mod websocket;

#[cfg(test)]
mod seeds;
#[cfg(test)]
mod tests;

// The unit tests are built with the instrumentation flags too (by `cargo xtask fuzz`, reusing
// the fuzz build), so they link libFuzzer for its coverage callbacks (`__sanitizer_cov_*`);
// libFuzzer's entry point calls a target, so they define one that does nothing.
#[cfg(test)]
libfuzzer_sys::fuzz_target!(|_data: &[u8]| {});
