//! Zigzag core: everything the pipeline shares that does not touch AWS.
//!
//! - [`zorder`]: Z-addresses, BIGMIN/LITMAX, range decomposition.
//! - [`schema`]: index schemas (TOML) and order-preserving encodings.
//! - [`table`]: the sorted-table abstraction with DynamoDB Query semantics,
//!   an in-memory implementation and the conformance suite every store runs.
//! - [`query`]: Z-query strategies (naive, precise, page-jump, adaptive, elastic).
//! - [`retry`]: bounded exponential backoff with full jitter.
//! - [`duration`]: the one duration grammar of every flag and setting.
//!
//! See ARCHITECTURE.md at the repository root for the map.

pub mod duration;
pub mod query;
pub mod retry;
pub mod schema;
pub mod table;
pub mod zorder;
