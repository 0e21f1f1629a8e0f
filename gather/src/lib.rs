//! `gather`: reads what `ingest` wrote. For now: `zbench`, the schema
//! workbench; time-window reports arrive with the embedded pipeline.

pub mod zbench;
