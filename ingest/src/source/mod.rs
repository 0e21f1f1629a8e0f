//! Sources: the contract (in `zigzag-model`, shared with source crates such
//! as `zigzag-kinesis`) and the file source that lives here.

mod jsonl;

pub use jsonl::JsonlSource;
pub use zigzag_model::source::*;
