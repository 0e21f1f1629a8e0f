//! Test support for the integration tests in `tests/`.
//!
//! - [`fault_proxy`]: a proxy in front of the AWS emulators that injects real-shaped throttling
//!   and failure responses, since the emulators themselves never throttle.
//! - [`order`]: a source wrapper that records every child shard opened
//!   before its parents were finished.

pub mod fault_proxy;
pub mod order;

/// A name no other test run uses (streams and tables outlive a test in a
/// shared emulator): `name-<pid>-<nanos>`.
pub fn unique_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}
