//! KPL (Kinesis Producer Library) aggregation: many user records packed into one Kinesis record, so that
//! small events are not capped by a shard's limit of 1,000 records/s written (only by its 1 MiB/s).
//!
//! The data of an aggregated Kinesis record is
//!
//! ```text
//! F3 89 9A C2 | AggregatedRecord protobuf | MD5 of the protobuf bytes (16 bytes)
//! ```
//!
//! Reading ([`deaggregate`]): whether a record counts as aggregated at all is decided exactly as the KCL
//! decides it — the magic, at least one protobuf byte, and a matching digest — because anything else is
//! ordinary data that happens to start with the magic, and must reach the consumer untouched. Once a
//! record is aggregated, we part ways with the KCL on purpose:
//!
//! | case                                       | KCL 1.x / 2.x                                     | here                         |
//! |--------------------------------------------|---------------------------------------------------|------------------------------|
//! | no magic, or magic + at most 16 bytes      | plain record                                      | plain record                 |
//! | magic, digest does not match               | plain record                                      | plain record                 |
//! | digest matches, protobuf does not parse    | plain record (magic, protobuf, digest as data)    | [`KplError::Protobuf`]       |
//! | a proto2 `required` field is absent        | plain record (protobuf-java refuses to parse)     | [`KplError::MissingField`]   |
//! | key index outside its table                | logged; earlier user records kept, rest dropped   | [`KplError`] (index variant) |
//! | protobuf with zero records                 | zero user records                                 | zero user records            |
//!
//! A record whose digest matches was certainly written by an aggregating producer, so handing it to the
//! event decoder as if it were one event (KCL) cannot succeed, and keeping half
//! the user records (KCL) loses the rest silently; an error lets the caller dead-letter the Kinesis
//! record whole. The KCL can also be given the shard's hash-key range, and then drops every user record
//! of an aggregated record once one of them hashes outside it; we are not given a range and keep all.
//!
//! Writing ([`aggregate`], [`Aggregator`]): the load generator's side, so that tests and load runs can
//! exercise the de-aggregating path with KPL-shaped traffic.

use md5::{Digest, Md5};
use prost::Message;
use thiserror::Error;

/// The four bytes that open every aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// Length of the MD5 digest that closes every aggregated record.
const DIGEST_LEN: usize = 16;

/// Bytes an aggregate takes besides its protobuf: magic and digest.
const FRAMING_LEN: usize = MAGIC.len() + DIGEST_LEN;

/// Kinesis's limit on one record: data plus partition key.
pub const KINESIS_MAX_RECORD_SIZE: usize = 1024 * 1024;

/// The largest partition key in UTF-8: 256 characters of up to 4 bytes each.
const MAX_PARTITION_KEY_BYTES: usize = 256 * 4;

// The protobuf schema of the KPL (`messages.proto`), written with prost's derive macros so the build
// needs neither build.rs nor protoc. The schema is proto2; its `required` fields are declared
// `optional` here, which is the same on the wire, because prost's `required` decodes an absent field
// as its default (index 0, empty data) where protobuf-java refuses the message: presence lets
// `validate` refuse it too. Writers always set them, so the encoder emits a zero index the way a proto2
// writer does (a proto3-style field would omit it, and protobuf-java would then reject the record).

/// The protobuf between magic and digest.
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<Record>,
}

/// A tag on a user record; the KPL defines it but neither it nor the KCL uses it. Decoded only so that
/// a tag without its required key is refused as protobuf-java would.
#[derive(Clone, PartialEq, Message)]
struct Tag {
    /// Required in the schema.
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
}

/// One user record inside an aggregate.
#[derive(Clone, PartialEq, Message)]
struct Record {
    /// Required in the schema.
    #[prost(uint64, optional, tag = "1")]
    partition_key_index: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    /// Required in the schema.
    #[prost(bytes = "vec", optional, tag = "3")]
    data: Option<Vec<u8>>,
    #[prost(message, repeated, tag = "4")]
    tags: Vec<Tag>,
}

/// Why an aggregated record (magic and digest both right) cannot be de-aggregated. Never retryable: the
/// caller dead-letters the whole Kinesis record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KplError {
    #[error("aggregated record (digest verified) is not a valid AggregatedRecord protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("user record {record} of the aggregated record lacks the required field `{field}`")]
    MissingField { record: usize, field: &'static str },
    #[error("user record {record} names partition key {index}, but the aggregated record has {table_len}")]
    PartitionKeyIndex { record: usize, index: u64, table_len: usize },
    #[error("user record {record} names explicit hash key {index}, but the aggregated record has {table_len}")]
    ExplicitHashKeyIndex { record: usize, index: u64, table_len: usize },
    #[error("{0} user records in one aggregated record: more than 32-bit sub-sequence numbers can tell apart")]
    TooManyRecords(usize),
}

/// One user record of a Kinesis record, borrowed from the Kinesis record or its decoded aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRecord<'a> {
    /// Place inside the Kinesis record, from 0; with the Kinesis sequence number it orders and
    /// checkpoints user records (`zigzag_model::position::Position::sub`). Always 0 for a plain record.
    pub sub_sequence: u32,
    /// The user record's own partition key; a plain record's is the Kinesis record's.
    pub partition_key: &'a str,
    /// Set only when the producer routed the user record by explicit hash key (and only in aggregates:
    /// GetRecords does not return a plain record's).
    pub explicit_hash_key: Option<&'a str>,
    pub data: &'a [u8],
}

/// The user records of one Kinesis record, as [`deaggregate`] found them.
#[derive(Debug, Clone, PartialEq)]
pub struct Deaggregated<'a> {
    repr: Repr<'a>,
}

#[derive(Debug, Clone, PartialEq)]
enum Repr<'a> {
    Plain(UserRecord<'a>),
    /// Validated: every record has its required fields, its indexes are inside the tables, and the
    /// records are numbered by u32.
    Aggregated(AggregatedRecord),
}

/// Splits the data of one Kinesis record (with its partition key) into its user records.
///
/// A record that is not aggregated — no magic, too short to hold a protobuf and digest, or a digest
/// that does not match — is one user record, the whole data, sub-sequence 0, as in the KCL. An
/// aggregated record yields its user records in order (possibly none). Errors are for aggregated records
/// that cannot be trusted whole; see the module documentation for how that differs from the KCL.
pub fn deaggregate<'a>(partition_key: &'a str, data: &'a [u8]) -> Result<Deaggregated<'a>, KplError> {
    let plain = Deaggregated {
        repr: Repr::Plain(UserRecord { sub_sequence: 0, partition_key, explicit_hash_key: None, data }),
    };
    let Some(rest) = data.strip_prefix(&MAGIC[..]) else {
        return Ok(plain);
    };
    // The KCL wants at least one byte before the digest, so magic + MD5 of nothing (which is what an
    // aggregate of zero user records and empty tables encodes to) is a plain record, not an empty one.
    if rest.len() <= DIGEST_LEN {
        return Ok(plain);
    }
    let (body, digest) = rest.split_at(rest.len() - DIGEST_LEN);
    if Md5::digest(body).as_slice() != digest {
        return Ok(plain);
    }
    let message = AggregatedRecord::decode(body)?;
    validate(&message)?;
    Ok(Deaggregated { repr: Repr::Aggregated(message) })
}

/// Checks up front everything the iterator relies on, so that iterating cannot fail half-way.
fn validate(message: &AggregatedRecord) -> Result<(), KplError> {
    let count = message.records.len();
    if u32::try_from(count).is_err() {
        return Err(KplError::TooManyRecords(count));
    }
    let keys = message.partition_key_table.len();
    let hash_keys = message.explicit_hash_key_table.len();
    for (record, r) in message.records.iter().enumerate() {
        let missing = |field| KplError::MissingField { record, field };
        let index = r.partition_key_index.ok_or_else(|| missing("partition_key_index"))?;
        if r.data.is_none() {
            return Err(missing("data"));
        }
        if r.tags.iter().any(|t| t.key.is_none()) {
            return Err(missing("tags.key"));
        }
        if !in_table(index, keys) {
            return Err(KplError::PartitionKeyIndex { record, index, table_len: keys });
        }
        if let Some(index) = r.explicit_hash_key_index.filter(|&i| !in_table(i, hash_keys)) {
            return Err(KplError::ExplicitHashKeyIndex { record, index, table_len: hash_keys });
        }
    }
    Ok(())
}

fn in_table(index: u64, table_len: usize) -> bool {
    usize::try_from(index).is_ok_and(|i| i < table_len)
}

impl<'a> Deaggregated<'a> {
    /// Whether the Kinesis record was a KPL aggregate (even an empty one) rather than a plain record.
    pub fn is_aggregated(&self) -> bool {
        matches!(self.repr, Repr::Aggregated(_))
    }

    /// Number of user records: 1 for a plain record, 0 or more for an aggregate.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Plain(_) => 1,
            Repr::Aggregated(m) => m.records.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The user records in order; their `sub_sequence` numbers are 0, 1, 2, ...
    pub fn iter(&self) -> UserRecords<'_> {
        let inner = match &self.repr {
            Repr::Plain(r) => Inner::Plain(Some(*r)),
            Repr::Aggregated(m) => Inner::Aggregated { message: m, records: m.records.iter().enumerate() },
        };
        UserRecords { inner }
    }
}

impl<'s, 'a> IntoIterator for &'s Deaggregated<'a> {
    type Item = UserRecord<'s>;
    type IntoIter = UserRecords<'s>;

    fn into_iter(self) -> UserRecords<'s> {
        self.iter()
    }
}

/// Iterator over the user records of a [`Deaggregated`].
#[derive(Debug, Clone)]
pub struct UserRecords<'s> {
    inner: Inner<'s>,
}

#[derive(Debug, Clone)]
enum Inner<'s> {
    Plain(Option<UserRecord<'s>>),
    Aggregated { message: &'s AggregatedRecord, records: std::iter::Enumerate<std::slice::Iter<'s, Record>> },
}

impl<'s> Iterator for UserRecords<'s> {
    type Item = UserRecord<'s>;

    fn next(&mut self) -> Option<UserRecord<'s>> {
        match &mut self.inner {
            Inner::Plain(r) => r.take(),
            Inner::Aggregated { message, records } => {
                // Copy the shared reference out of the `&mut` borrow of `self`, to lend for 's.
                let message: &'s AggregatedRecord = message;
                let (i, r) = records.next()?;
                // `validate` has checked the count fits a u32, that both indexes are inside their
                // tables, and that the data is present, so neither the cast nor the indexing can fail.
                let table = |t: &'s [String], i: u64| t[i as usize].as_str();
                Some(UserRecord {
                    sub_sequence: i as u32,
                    partition_key: table(&message.partition_key_table, r.partition_key_index.unwrap_or_default()),
                    explicit_hash_key: r.explicit_hash_key_index.map(|i| table(&message.explicit_hash_key_table, i)),
                    data: r.data.as_deref().unwrap_or_default(),
                })
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            Inner::Plain(r) => usize::from(r.is_some()),
            Inner::Aggregated { records, .. } => records.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for UserRecords<'_> {}

mod write;
pub use write::{aggregate, Aggregate, Aggregator, RecordTooLarge};

#[cfg(test)]
mod tests;
