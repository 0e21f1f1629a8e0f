//! What stops a pipeline, and which of it is worth retrying.

use crate::aggregate::IdentityCollision;
use crate::flush::FlushError;
use crate::source::SourceError;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;
use zigzag_core::retry::Retryable;
use zigzag_lease::LeaseError;
use zigzag_model::{ConfigError, Position};

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("source: {0}")]
    Source(#[from] SourceError),
    #[error("flush: {0}")]
    Flush(#[from] FlushError),
    #[error("lease table: {0}")]
    Lease(#[from] LeaseError),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("shard {shard}: the source ends at {reached:?} but a flush to recover covers up to {end}")]
    MissingRecords { shard: String, end: Box<Position>, reached: Option<Box<Position>> },
    #[error("dead-letter file {path}: {error}")]
    DeadLetter { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Collision(#[from] IdentityCollision),
    #[error(
        "lane {lane}: flush {flush} was begun under another configuration (rollups, dimensions, measures or \
         scatter changed); run once with the previous configuration to finish it, then change it"
    )]
    LayoutChanged { lane: u32, flush: u64 },
    #[error(
        "shard {shard}: its item sets are apart under a layout that is none of the table's versions (its numbers \
         cannot be read); run once with the configuration that wrote it to catch them up, then change it"
    )]
    SetsOfAnotherLayout { shard: String },
    #[error(transparent)]
    Layout(#[from] zigzag_model::layout::LayoutError),
    #[error(
        "the final flush did not complete: the store stayed unavailable for {waited:?}; the leases expire and \
         another worker recovers it"
    )]
    FinalFlush { waited: Duration },
}

impl Retryable for PipelineError {
    fn is_retryable(&self) -> bool {
        match self {
            PipelineError::Source(e) => e.is_retryable(),
            PipelineError::Flush(e) => e.is_retryable(),
            PipelineError::Lease(e) => e.is_retryable(),
            PipelineError::Layout(e) => e.is_retryable(),
            _ => false,
        }
    }
}
