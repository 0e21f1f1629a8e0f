//! The Kinesis sink: the generator's records into a stream through
//! PutRecords ([`zigzag_kinesis::Producer`]), paced to a rate, optionally
//! KPL-aggregated. Records are sent interleaved across the generator's
//! shards (record 1 of every shard, then record 2, …), as live traffic would
//! arrive; which Kinesis shard a record lands on is decided by its
//! partition key, not by the generator's shard.

use crate::{Generated, Generator};
use std::time::{Duration, Instant};
use zigzag_kinesis::kpl::{Aggregate, Aggregator};
use zigzag_kinesis::producer::ProduceError;
use zigzag_kinesis::Producer;

/// What a record's Kinesis partition key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKey {
    /// The referrer: a referrer's partials then live on one shard, so a
    /// flush writes each of its aggregates once, not once per shard.
    Referrer,
    /// The campaign.
    Campaign,
    /// A hash of the record's position: even spread, no locality.
    Random,
}

impl PartitionKey {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "referrer" => Some(PartitionKey::Referrer),
            "campaign" => Some(PartitionKey::Campaign),
            "random" => Some(PartitionKey::Random),
            _ => None,
        }
    }

    fn of(self, generated: &Generated, shard: u32, seq: u64) -> String {
        match (self, generated) {
            (PartitionKey::Referrer, Generated::Valid(ev)) => crate::generator::referrer_name(ev.referrer),
            (PartitionKey::Campaign, Generated::Valid(ev)) => crate::generator::campaign_name(ev.campaign),
            // Malformed records have no trustworthy fields.
            _ => {
                format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&[&shard.to_le_bytes()[..], &seq.to_le_bytes()].concat()))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct SinkOptions {
    pub partition_key: PartitionKey,
    /// Records per second (user records, with KPL); as fast as possible without.
    pub rate: Option<f64>,
    /// Pack records into KPL aggregates of at most this many bytes.
    pub kpl_max_bytes: Option<usize>,
}

/// Sends every record of `gen`, calling `progress(records_sent)` now and then.
pub async fn produce(
    gen: &Generator,
    producer: &mut Producer,
    opts: &SinkOptions,
    mut progress: impl FnMut(u64),
) -> Result<u64, ProduceError> {
    let cfg = gen.config();
    let longest = (0..cfg.shards).map(|s| gen.shard_len(s)).max().unwrap_or(0);
    let mut aggregator = opts.kpl_max_bytes.map(Aggregator::with_max_size);
    let started = Instant::now();
    let mut sent = 0u64;
    let mut buf = Vec::with_capacity(256);
    for seq in 1..=longest {
        for shard in 0..cfg.shards {
            if seq > gen.shard_len(shard) {
                continue;
            }
            let generated = gen.record(shard, seq, &mut buf);
            let key = opts.partition_key.of(&generated, shard, seq);
            match &mut aggregator {
                None => producer.send(key, buf.clone()).await?,
                Some(agg) => match agg.push(key, buf.clone()) {
                    Ok(Some(done)) => send_aggregate(producer, done).await?,
                    Ok(None) => {}
                    Err(too_large) => return Err(ProduceError::TooLarge(too_large.needed)),
                },
            }
            sent += 1;
            if sent.is_multiple_of(1000) {
                progress(sent);
            }
            if let Some(rate) = opts.rate {
                // Sleep off any lead over the target rate.
                let due = Duration::from_secs_f64(sent as f64 / rate);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    if ahead > Duration::from_millis(5) {
                        tokio::time::sleep(ahead).await;
                    }
                }
            }
        }
    }
    if let Some(done) = aggregator.as_mut().and_then(Aggregator::flush) {
        send_aggregate(producer, done).await?;
    }
    producer.flush().await?;
    progress(sent);
    Ok(sent)
}

async fn send_aggregate(producer: &mut Producer, agg: Aggregate) -> Result<(), ProduceError> {
    producer.send(agg.partition_key, agg.data).await
}
