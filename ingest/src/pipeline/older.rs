//! What a dead worker of an older layout version left: a flush in flight,
//! finished under that version's layout, and shards whose item sets are
//! apart, renumbered for this one.
//!
//! While a version is being adopted (`adoption.rs`), a worker of the older
//! one may die with a flush in flight; the live workers write the newer
//! version. Its intent records the layout it was begun under, and the
//! table keeps every version (`zigzag_model::versions`): the recovery reads
//! its ranges again and writes them with that layout's aggregator and
//! flusher (its item sets, numbered as that layout numbers them, and its
//! cuts), exactly as the dead worker would have. A layout that is none of
//! the table's versions is still refused (`PipelineError::LayoutChanged`).
//!
//! A set's number is its place in its layout's order, so a checkpoint
//! apart under another version numbers its sets otherwise. Before reading
//! such a shard, its checkpoint is renumbered by the sets' names
//! (projection and rollup; a set this layout adds takes the furthest
//! position: events before it are the fill's or, past the cut, were read
//! by an adopted worker) and written back in one conditional write.

use super::{Pipeline, PipelineError};
use crate::aggregate::Aggregator;
use crate::flush::Flusher;
use zigzag_lease::{Intent, Ready};
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
        let Some(stored) = self.versions().await? else { return Err(refused) };
        let Some(version) = stored.versions.iter().find(|v| v.layout.digest() == intent.layout) else {
            return Err(refused);
        };
        let config = version.layout.apply(&self.opts.config);
        let projections = Projections::new(&config)?;
        let decoder = crate::decode::Decoder::new(&config, self.opts.limits)?;
        let aggregator = Aggregator::new(&projections, decoder, config.measure_set()?);
        let flusher = Flusher::new(projections, &config, self.aggregates.clone())?.with_retry(self.opts.retry);
        // What its writer wrote from a cut on, as that version had it.
        let as_then = stored.as_of(version.number).ok_or(refused)?.adopted();
        flusher.adopt(&as_then);
        tracing::info!(
            lane,
            k = intent.k,
            version = version.number,
            "a dead worker's flush of an older layout version"
        );
        Ok(OlderWriter { digest: intent.layout.clone(), aggregator, flusher })
    }
}

impl Pipeline {
    /// `ready`, its checkpoint renumbered for this layout when its sets are
    /// apart under another version's (written back first); None when the
    /// lease moved meanwhile (the next pass says what it is now).
    pub(super) async fn renumbered(&self, ready: &Ready) -> Result<Option<Ready>, PipelineError> {
        let Some(theirs) = ready.layout.as_deref().filter(|d| *d != self.layout && !ready.checkpoint.is_uniform())
        else {
            return Ok(Some(ready.clone()));
        };
        let unknown = || PipelineError::SetsOfAnotherLayout { shard: ready.shard.clone() };
        let stored = self.versions().await?.ok_or_else(unknown)?;
        let version = stored.versions.iter().find(|v| v.layout.digest() == theirs).ok_or_else(unknown)?;
        let old = version.layout.apply(&self.opts.config).item_sets();
        let mine = self.flusher.item_sets();
        let from = |s: zigzag_lease::ItemSet| {
            let wanted = mine.get(s as usize)?;
            let at = old.iter().position(|o| o.projection == wanted.projection && o.rollup == wanted.rollup)?;
            u16::try_from(at).ok()
        };
        let to = ready.checkpoint.renumber(from, mine.len() as u16);
        tracing::info!(
            shard = %ready.shard,
            version = version.number,
            from = %ready.checkpoint,
            to = %to,
            "item sets apart under an older layout version: renumbered for this one"
        );
        if !self.coord.renumber(&ready.shard, ready.lease, (&ready.checkpoint, &to), &self.layout).await? {
            return Ok(None);
        }
        Ok(Some(Ready { checkpoint: to, layout: Some(self.layout.clone()), ..ready.clone() }))
    }
}
