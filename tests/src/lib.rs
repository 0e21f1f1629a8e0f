//! Test support for the integration tests in `tests/`.
//!
//! - [`fault_proxy`]: a proxy in front of the AWS emulators that injects real-shaped throttling
//!   and failure responses, since the emulators themselves never throttle.

pub mod fault_proxy;
