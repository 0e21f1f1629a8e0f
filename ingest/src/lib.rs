//! The ingestion pipeline: source → decode → aggregate → flush → store.
//! Built stage by stage; today: decode.

pub mod decode;
