//! The Kinesis sink: the generator's records into a stream through
//! PutRecords ([`zigzag_kinesis::Producer`]), paced to a rate, optionally
//! KPL-aggregated. Records are sent interleaved across the generator's
//! shards (record 1 of every shard, then record 2, …), as live traffic would
//! arrive; which Kinesis shard a record lands on is decided by its
//! partition key, not by the generator's shard.

use crate::traffic::{Drawn, Traffic};
use std::time::{Duration, Instant};
use zigzag_kinesis::kpl::{Aggregate, Aggregator};
use zigzag_kinesis::producer::ProduceError;
use zigzag_kinesis::Producer;
use zigzag_model::schema::value::display;
use zigzag_model::schema::FieldSpec;

/// What a record's Kinesis partition key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKey {
    /// A field's value (its index in the schema): e.g. with the referrer, a
    /// referrer's partials live on one shard, so a flush writes each of its
    /// aggregates once, not once per shard.
    Field(usize),
    /// A hash of the record's position: even spread, no locality.
    Random,
}

impl PartitionKey {
    /// `random` or the name of one of `fields`.
    pub fn parse(s: &str, fields: &[FieldSpec]) -> Option<Self> {
        match s {
            "random" => Some(PartitionKey::Random),
            name => fields.iter().position(|f| f.name == name).map(PartitionKey::Field),
        }
    }

    fn of(self, drawn: &Drawn, fields: &[FieldSpec], shard: u32, seq: u64) -> String {
        let hash = |bytes: &[u8]| format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes));
        match (self, drawn) {
            (PartitionKey::Field(i), Drawn::Valid(ev)) => {
                let text = display(&fields[i], &ev.values[i]);
                // Kinesis takes 1..=256 characters.
                match text.chars().count() {
                    1..=256 => text,
                    0 => hash(&[&shard.to_le_bytes()[..], &seq.to_le_bytes()].concat()),
                    _ => hash(text.as_bytes()),
                }
            }
            // Malformed records have no trustworthy fields.
            _ => hash(&[&shard.to_le_bytes()[..], &seq.to_le_bytes()].concat()),
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

/// The longest a paced record waits in an aggregate, and then in a batch,
/// before it is sent: the KPL's default RecordMaxBufferedTime.
pub const LINGER: Duration = Duration::from_millis(100);

/// Sends every record of `gen`, calling `progress(records_sent)` now and then.
pub async fn produce(
    gen: &dyn Traffic,
    producer: &mut Producer,
    opts: &SinkOptions,
    mut progress: impl FnMut(u64),
) -> Result<u64, ProduceError> {
    let cfg = gen.config();
    let longest = (0..cfg.shards).map(|s| gen.shard_len(s)).max().unwrap_or(0);
    let mut aggregator = opts.kpl_max_bytes.map(Aggregator::with_max_size);
    // When the aggregate being filled got its first record.
    let mut aggregate_since: Option<Instant> = None;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut buf = Vec::with_capacity(256);
    for seq in 1..=longest {
        for shard in 0..cfg.shards {
            if seq > gen.shard_len(shard) {
                continue;
            }
            let drawn = gen.draw(shard, seq, &mut buf);
            let key = opts.partition_key.of(&drawn, gen.fields(), shard, seq);
            match &mut aggregator {
                None => producer.send(key, buf.clone()).await?,
                Some(agg) => match agg.push(key, buf.clone()) {
                    Ok(Some(done)) => {
                        aggregate_since = Some(Instant::now());
                        send_aggregate(producer, done).await?
                    }
                    Ok(None) => {
                        aggregate_since.get_or_insert_with(Instant::now);
                    }
                    Err(too_large) => return Err(ProduceError::TooLarge(too_large.needed)),
                },
            }
            // Paced traffic is sent within LINGER of being drawn, as a real
            // producer's would be; unpaced batches fill faster than that.
            if opts.rate.is_some() {
                if let (Some(agg), Some(since)) = (&mut aggregator, aggregate_since) {
                    if since.elapsed() >= LINGER {
                        aggregate_since = None;
                        if let Some(done) = agg.flush() {
                            send_aggregate(producer, done).await?;
                        }
                    }
                }
                producer.flush_if_older(LINGER).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::DrawnEvent;
    use zigzag_model::schema::{default_fields, FieldValue};

    #[test]
    fn a_partition_key_is_a_fields_value_or_a_hash() {
        let fields = default_fields();
        assert_eq!(PartitionKey::parse("referrer", &fields), Some(PartitionKey::Field(2)));
        assert_eq!(PartitionKey::parse("random", &fields), Some(PartitionKey::Random));
        assert_eq!(PartitionKey::parse("nope", &fields), None);
        let with = |url: FieldValue<'static>| {
            let mut values = vec![FieldValue::Absent; fields.len()];
            values[5] = url;
            Drawn::Valid(DrawnEvent { ts_ms: 0, late: false, values })
        };
        let url = PartitionKey::parse("url", &fields).expect("a shipped field");
        assert_eq!(url.of(&with(FieldValue::Str("/p/1".into())), &fields, 0, 1), "/p/1");
        // Kinesis takes 1..=256 characters: longer values and absent ones
        // become hashes (of the value, of the record's position).
        let long = url.of(&with(FieldValue::Str("x".repeat(300).into())), &fields, 0, 1);
        assert_eq!(long.len(), 16);
        assert_eq!(long, url.of(&with(FieldValue::Str("x".repeat(300).into())), &fields, 3, 9), "by value");
        let absent = url.of(&with(FieldValue::Absent), &fields, 0, 1);
        assert_eq!(absent.len(), 16);
        assert_ne!(absent, url.of(&with(FieldValue::Absent), &fields, 0, 2), "by position");
        assert_eq!(url.of(&Drawn::Malformed("truncated"), &fields, 0, 1), absent, "malformed: by position");
    }
}
