//! Writing aggregated records: the load generator's side, so that tests and load runs can exercise
//! the de-aggregating path with KPL-shaped traffic.

use super::*;
use std::collections::HashMap;
use std::fmt;

/// Encodes user records (partition key, data) as one aggregated record, partition keys deduplicated
/// into the table in order of first appearance. No size limit: [`Aggregator`] is for that.
///
/// With no records at all the result is magic + MD5 of nothing, which [`deaggregate`] (like the KCL)
/// reads as a plain record — so do not send it; [`Aggregator::flush`] never produces it.
pub fn aggregate<K: AsRef<str>, D: AsRef<[u8]>>(records: &[(K, D)]) -> Vec<u8> {
    let mut indexes: HashMap<&str, u64> = HashMap::new();
    let mut message = AggregatedRecord::default();
    for (key, data) in records {
        let key = key.as_ref();
        let next = indexes.len() as u64;
        let index = *indexes.entry(key).or_insert_with(|| {
            message.partition_key_table.push(key.to_owned());
            next
        });
        message.records.push(user_record(index, data.as_ref().to_vec()));
    }
    seal(&message)
}

fn user_record(partition_key_index: u64, data: Vec<u8>) -> Record {
    Record {
        partition_key_index: Some(partition_key_index),
        explicit_hash_key_index: None,
        data: Some(data),
        tags: vec![],
    }
}

/// Frames the protobuf: magic, protobuf, digest.
fn seal(message: &AggregatedRecord) -> Vec<u8> {
    // `encode_to_vec` cannot fail, unlike encoding behind the magic in place; the copy is cheap next to
    // sending the bytes.
    let body = message.encode_to_vec();
    let mut out = Vec::with_capacity(FRAMING_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&body);
    out.extend_from_slice(&Md5::digest(&body));
    out
}

/// Bytes a length-delimited field (tag, length, payload) takes in the protobuf. Every tag in the
/// schema is below 16, so it takes one byte.
fn delimited_len(payload: usize) -> usize {
    1 + prost::length_delimiter_len(payload) + payload
}

/// Bytes a `Record` as [`user_record`] builds it takes, without its own field tag and length.
fn record_len(partition_key_index: usize, data_len: usize) -> usize {
    1 + prost::length_delimiter_len(partition_key_index) + delimited_len(data_len)
}

/// One finished aggregated record, ready for PutRecord(s).
#[derive(Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The first user record's partition key, to put the aggregate under (as the KPL does): the
    /// aggregate then lands on the shard its first user record would have.
    pub partition_key: String,
    /// Magic, protobuf, digest.
    pub data: Vec<u8>,
    /// How many user records it holds (at least one).
    pub user_records: usize,
}

impl fmt::Debug for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aggregate")
            .field("partition_key", &self.partition_key)
            .field("data_len", &self.data.len())
            .field("user_records", &self.user_records)
            .finish()
    }
}

/// A user record that would not fit under the limit even in an aggregate of its own. It is handed
/// back so the caller can send it another way or drop it knowingly.
#[derive(Clone, PartialEq, Eq, Error)]
#[error("a user record of {data_len} bytes needs a {needed}-byte aggregate on its own; the limit is {max_size}", data_len = .data.len())]
pub struct RecordTooLarge {
    pub partition_key: String,
    pub data: Vec<u8>,
    /// Size of an aggregate holding only this record.
    pub needed: usize,
    pub max_size: usize,
}

impl fmt::Debug for RecordTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordTooLarge")
            .field("partition_key", &self.partition_key)
            .field("data_len", &self.data.len())
            .field("needed", &self.needed)
            .field("max_size", &self.max_size)
            .finish()
    }
}

/// Packs user records into aggregates no larger than a limit, flushing one exactly when the next user
/// record would push it over. Sizes are counted exactly, byte for byte, as the record is added (the
/// tests hold this against the real encoding), so aggregates can be filled to the limit instead of to a
/// guessed fraction of it.
#[derive(Debug, Clone)]
pub struct Aggregator {
    max_size: usize,
    /// Partition key → its index in the table; the table itself is built on flush, so each key is
    /// stored once.
    keys: HashMap<String, usize>,
    records: Vec<Record>,
    /// Exact size of the aggregate `flush` would return now (with at least one record).
    size: usize,
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator::new()
    }
}

impl Aggregator {
    /// Kinesis's 1 MiB record limit counts the partition key too; an aggregate goes under its first
    /// user record's key, of up to 256 characters, so leave room for the longest in UTF-8.
    pub const DEFAULT_MAX_SIZE: usize = KINESIS_MAX_RECORD_SIZE - MAX_PARTITION_KEY_BYTES;

    /// An aggregator filling up to [`Self::DEFAULT_MAX_SIZE`].
    pub fn new() -> Self {
        Aggregator::with_max_size(Self::DEFAULT_MAX_SIZE)
    }

    /// An aggregator whose aggregates (magic, protobuf and digest) are at most `max_size` bytes.
    pub fn with_max_size(max_size: usize) -> Self {
        Aggregator { max_size, keys: HashMap::new(), records: Vec::new(), size: FRAMING_LEN }
    }

    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// User records waiting in the current aggregate.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Size in bytes of the aggregate [`Self::flush`] would return now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes the current aggregate would grow by with this user record.
    fn growth(&self, partition_key: &str, data_len: usize) -> usize {
        match self.keys.get(partition_key) {
            Some(&index) => delimited_len(record_len(index, data_len)),
            None => delimited_len(partition_key.len()) + delimited_len(record_len(self.keys.len(), data_len)),
        }
    }

    /// Whether the user record fits in the current aggregate without exceeding the limit.
    pub fn would_fit(&self, partition_key: &str, data_len: usize) -> bool {
        self.size + self.growth(partition_key, data_len) <= self.max_size
    }

    /// Adds a user record. When it does not fit, the aggregate so far is finished and returned, and the
    /// record starts the next one. A record too large for even an aggregate of its own is handed back
    /// in the error, and the aggregator is left as it was.
    pub fn push(&mut self, partition_key: String, data: Vec<u8>) -> Result<Option<Aggregate>, RecordTooLarge> {
        let flushed = if self.would_fit(&partition_key, data.len()) {
            None
        } else {
            let needed = FRAMING_LEN + delimited_len(partition_key.len()) + delimited_len(record_len(0, data.len()));
            if needed > self.max_size {
                return Err(RecordTooLarge { partition_key, data, needed, max_size: self.max_size });
            }
            self.flush()
        };
        self.size += self.growth(&partition_key, data.len());
        let next = self.keys.len();
        let index = *self.keys.entry(partition_key).or_insert(next);
        self.records.push(user_record(index as u64, data));
        Ok(flushed)
    }

    /// Finishes the current aggregate, if it holds any user record, and starts an empty one.
    pub fn flush(&mut self) -> Option<Aggregate> {
        if self.records.is_empty() {
            return None;
        }
        let mut table: Vec<(usize, String)> = self.keys.drain().map(|(key, index)| (index, key)).collect();
        table.sort_unstable_by_key(|&(index, _)| index);
        let message = AggregatedRecord {
            partition_key_table: table.into_iter().map(|(_, key)| key).collect(),
            explicit_hash_key_table: vec![],
            records: std::mem::take(&mut self.records),
        };
        let data = seal(&message);
        debug_assert_eq!(data.len(), self.size, "size accounting drifted from the encoding");
        self.size = FRAMING_LEN;
        Some(Aggregate {
            partition_key: message.partition_key_table.into_iter().next().unwrap_or_default(),
            data,
            user_records: message.records.len(),
        })
    }
}
