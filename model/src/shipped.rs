//! The shipped layout: what `ingest` and `loadgen --sink ingest` write
//! without `--config` (the configuration file's grammar and defaults are
//! `config.rs`).

/// The shipped layout: what `ingest` and `loadgen --sink ingest` write
/// without `--config`. It answers the README's reports (totals, a time
/// series at 5 minutes, top referrers by CTR in a country, ratios by
/// campaign over a week) from three projections instead of the full cross
/// product of the dimensions (BENCHMARKS.md, "Write cost"):
///
/// - `total` (no dimension): minute, hour and day, every flush (10 s), in
///   one scatter prefix (the rule in `projection.rs`: a handful of items
///   written by every worker every 10 s is far under a partition's
///   1,000 writes/s, and a report reads one partition, not 16);
/// - `cc` (campaign x country): minute every flush, hour and day every
///   5 minutes;
/// - `referrer_country`: hour and day every 5 minutes.
///
/// Minute items are at most 10 s stale, hour and day items 5 minutes. The
/// base (every dimension) is not written: a report grouping or filtering by
/// referrer and campaign together is refused (no projection answers it
/// exactly), and a configuration file that keeps it says `rollups = [...]`.
pub const SHIPPED_TOML: &str = r#"
rollups = []
[[projection]]
name = "total"
rollups = ["minute", "hour", "day"]
[projection.scatter]
prefixes = 1
[[projection]]
name = "cc"
dimensions = ["campaign", "country"]
rollups = ["minute", "hour", "day"]
[[projection]]
name = "referrer_country"
dimensions = ["referrer", "country"]
rollups = ["hour", "day"]
[flush]
interval_ms = 10000
every_ms = { "cc.hour" = 300000, "cc.day" = 300000, "referrer_country" = 300000 }
"#;
