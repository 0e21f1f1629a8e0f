//! A dead worker's flush of an older layout version, finished under that
//! version's layout.
//!
//! While a version is being adopted (`adoption.rs`), a worker of the older
//! one may die with a flush in flight; the live workers write the newer
//! version. Its intent records the layout it was begun under, and the
//! table keeps every version (`zigzag_model::versions`): the recovery reads
//! its ranges again and writes them with that layout's aggregator and
//! flusher (its item sets, numbered as that layout numbers them, and its
//! cuts), exactly as the dead worker would have. A layout that is none of
//! the table's versions is still refused (`PipelineError::LayoutChanged`).

use super::{Pipeline, PipelineError};
use crate::aggregate::Aggregator;
use crate::flush::Flusher;
use zigzag_lease::Intent;
use zigzag_model::versions::{self, Adopted};
use zigzag_model::Projections;

/// What a re-read is aggregated and written with.
#[derive(Clone, Copy)]
pub(super) struct Writing<'a> {
    pub aggregator: &'a Aggregator,
    pub flusher: &'a Flusher,
}

/// An older version's aggregator and flusher.
pub(super) struct OlderWriter {
    /// Its layout's digest (as intents record it).
    pub digest: String,
    aggregator: Aggregator,
    flusher: Flusher,
}

impl OlderWriter {
    pub fn writing(&self) -> Writing<'_> {
        Writing { aggregator: &self.aggregator, flusher: &self.flusher }
    }
}

impl Pipeline {
    /// What this worker's own re-reads use.
    pub(super) fn writing(&self) -> Writing<'_> {
        Writing { aggregator: &self.aggregator, flusher: &self.flusher }
    }

    /// The writer of the table's version whose layout began `intent` (on
    /// `lane`); refused when it is none of them.
    pub(super) async fn older_writer(&self, lane: u32, intent: &Intent) -> Result<OlderWriter, PipelineError> {
        let refused = PipelineError::LayoutChanged { lane, flush: intent.k };
        let Some(stored) = versions::load(self.aggregates.as_ref()).await? else { return Err(refused) };
        let Some(version) = stored.versions.iter().find(|v| v.layout.digest() == intent.layout) else {
            return Err(refused);
        };
        let config = version.layout.apply(&self.opts.config);
        let projections = Projections::new(&config)?;
        let decoder = crate::decode::Decoder::new(&config, self.opts.limits)?;
        let aggregator = Aggregator::new(&projections, decoder, config.measure_set()?);
        let flusher = Flusher::new(projections, &config, self.aggregates.clone())?.with_retry(self.opts.retry);
        let as_then = stored.as_of(version.number).map(|s| s.written_from()).unwrap_or_default();
        flusher.adopt(&Adopted { number: version.number, written_from: as_then });
        tracing::info!(
            lane,
            k = intent.k,
            version = version.number,
            "a dead worker's flush of an older layout version"
        );
        Ok(OlderWriter { digest: intent.layout.clone(), aggregator, flusher })
    }
}
