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
use std::collections::HashMap;
use std::fmt;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Magic + body + MD5(body): an aggregated record around a hand-written protobuf.
    fn framed(body: &[u8]) -> Vec<u8> {
        [&MAGIC[..], body, &Md5::digest(body)[..]].concat()
    }

    fn assert_plain(key: &str, data: &[u8]) {
        let d = deaggregate(key, data).expect("plain records are not errors");
        assert!(!d.is_aggregated());
        assert_eq!(d.len(), 1);
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            vec![UserRecord { sub_sequence: 0, partition_key: key, explicit_hash_key: None, data }]
        );
    }

    /// Field keys of the schema: (field number << 3) | wire type (0 varint, 2 length-delimited).
    const PK_TABLE: u8 = 1 << 3 | 2;
    const EHK_TABLE: u8 = 2 << 3 | 2;
    const RECORDS: u8 = 3 << 3 | 2;
    const R_PK_INDEX: u8 = 1 << 3;
    const R_EHK_INDEX: u8 = 2 << 3;
    const R_DATA: u8 = 3 << 3 | 2;
    const R_TAGS: u8 = 4 << 3 | 2;
    const T_KEY: u8 = 1 << 3 | 2;
    const T_VALUE: u8 = 2 << 3 | 2;

    #[test]
    fn decodes_hand_written_wire_bytes() {
        let big = vec![0x5A; 130]; // its length takes a two-byte varint: 130 = 0x82 0x01
        let mut body = vec![PK_TABLE, 3, b'p', b'k', b'0', PK_TABLE, 3, b'p', b'k', b'1'];
        body.extend([EHK_TABLE, 3, b'1', b'2', b'3']);
        // Record 0: key 1, data "hi".
        body.extend([RECORDS, 6, R_PK_INDEX, 1, R_DATA, 2, b'h', b'i']);
        // Record 1: key 0, explicit hash key 0, empty data, tag k=v.
        body.extend([RECORDS, 14, R_PK_INDEX, 0, R_EHK_INDEX, 0, R_DATA, 0]);
        body.extend([R_TAGS, 6, T_KEY, 1, b'k', T_VALUE, 1, b'v']);
        // Record 2: key 0, 130 bytes of data; 2 + 3 + 130 = 135 = 0x87 0x01.
        body.extend([RECORDS, 0x87, 0x01, R_PK_INDEX, 0, R_DATA, 0x82, 0x01]);
        body.extend(&big);

        let data = framed(&body);
        let d = deaggregate("outer", &data).expect("valid aggregate");
        assert!(d.is_aggregated());
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            vec![
                UserRecord { sub_sequence: 0, partition_key: "pk1", explicit_hash_key: None, data: b"hi" },
                UserRecord { sub_sequence: 1, partition_key: "pk0", explicit_hash_key: Some("123"), data: b"" },
                UserRecord { sub_sequence: 2, partition_key: "pk0", explicit_hash_key: None, data: &big },
            ]
        );
        assert_eq!(d.iter().len(), 3);
    }

    #[test]
    fn encodes_hand_written_wire_bytes() {
        // Index 0 must be on the wire: the field is proto2 `required`.
        let body = [
            PK_TABLE, 1, b'a', PK_TABLE, 1, b'b', //
            RECORDS, 5, R_PK_INDEX, 0, R_DATA, 1, b'x', //
            RECORDS, 6, R_PK_INDEX, 1, R_DATA, 2, b'y', b'z', //
            RECORDS, 4, R_PK_INDEX, 0, R_DATA, 0,
        ];
        let records: [(&str, &[u8]); 3] = [("a", b"x"), ("b", b"yz"), ("a", b"")];
        assert_eq!(aggregate(&records), framed(&body));
    }

    #[test]
    fn plain_records() {
        assert_plain("k", br#"{"click":1}"#);
        assert_plain("k", b"");
        assert_plain("k", &MAGIC[..3]);
        assert_plain("k", &MAGIC);
        // Magic + exactly a digest (of nothing): no room for a protobuf, as the KCL judges it.
        assert_plain("k", &framed(b""));
        assert_plain("k", &[&MAGIC[..], &[0; 16]].concat());
    }

    #[test]
    fn bad_digest_is_a_plain_record() {
        let good = aggregate(&[("a", b"one".as_slice()), ("b", b"two".as_slice())]);
        for flip in [good.len() - 1, MAGIC.len(), MAGIC.len() + 3] {
            let mut bad = good.clone();
            bad[flip] ^= 0x01;
            assert_plain("outer", &bad);
        }
    }

    #[test]
    fn garbage_protobuf_with_good_digest_is_an_error() {
        for body in [
            &[0xFF, 0xFF, 0xFF][..],              // truncated varint key
            &[PK_TABLE, 5, b'a'],                 // length beyond the end
            &[0x0F, 0x00],                        // wire type 7 does not exist
            &[PK_TABLE, 1, 0xFF],                 // a string that is not UTF-8
            &[RECORDS, 2, R_PK_INDEX | 2, 0x00],  // key index as length-delimited
            &[RECORDS, 3, R_PK_INDEX, 0, R_DATA], // truncated inside a record
        ] {
            let err = deaggregate("outer", &framed(body)).expect_err("garbage");
            assert!(matches!(err, KplError::Protobuf(_)), "{body:?}: {err}");
        }
    }

    #[test]
    fn index_out_of_range_is_an_error() {
        let body = [PK_TABLE, 1, b'a', RECORDS, 4, R_PK_INDEX, 0, R_DATA, 0, RECORDS, 4, R_PK_INDEX, 1, R_DATA, 0];
        assert_eq!(
            deaggregate("outer", &framed(&body)).expect_err("index 1 of 1"),
            KplError::PartitionKeyIndex { record: 1, index: 1, table_len: 1 }
        );
        let mut body = vec![RECORDS, 13, R_PK_INDEX];
        body.extend([0xFF; 9]);
        body.extend([0x01, R_DATA, 0]); // u64::MAX in 10 bytes, no table at all
        assert_eq!(
            deaggregate("outer", &framed(&body)).expect_err("index u64::MAX"),
            KplError::PartitionKeyIndex { record: 0, index: u64::MAX, table_len: 0 }
        );
        let body = [PK_TABLE, 1, b'a', RECORDS, 6, R_PK_INDEX, 0, R_EHK_INDEX, 0, R_DATA, 0];
        assert_eq!(
            deaggregate("outer", &framed(&body)).expect_err("no hash key table"),
            KplError::ExplicitHashKeyIndex { record: 0, index: 0, table_len: 0 }
        );
    }

    #[test]
    fn missing_required_fields_are_errors() {
        let cases: [(&[u8], &str); 3] = [
            (&[PK_TABLE, 1, b'a', RECORDS, 2, R_DATA, 0], "partition_key_index"),
            (&[PK_TABLE, 1, b'a', RECORDS, 2, R_PK_INDEX, 0], "data"),
            (&[PK_TABLE, 1, b'a', RECORDS, 8, R_PK_INDEX, 0, R_DATA, 0, R_TAGS, 2, T_VALUE, 0], "tags.key"),
        ];
        for (body, field) in cases {
            assert_eq!(deaggregate("outer", &framed(body)), Err(KplError::MissingField { record: 0, field }));
        }
    }

    #[test]
    fn aggregate_without_records_has_no_user_records() {
        // As in the KCL: a protobuf that parses but holds no records yields nothing, and the caller
        // still has to advance past the Kinesis record's sequence number.
        let data = framed(&[PK_TABLE, 1, b'a']);
        let d = deaggregate("outer", &data).expect("valid aggregate");
        assert!(d.is_aggregated());
        assert!(d.is_empty());
        assert_eq!(d.iter().next(), None);
        // While an aggregate of nothing at all is 20 bytes that the KCL reads as a plain record.
        let empty: [(&str, &[u8]); 0] = [];
        assert_eq!(aggregate(&empty), framed(b""));
        assert_plain("outer", &aggregate(&empty));
    }

    #[test]
    fn record_too_large_is_handed_back() {
        let mut agg = Aggregator::with_max_size(64);
        assert_eq!(agg.push("a".into(), vec![1; 10]), Ok(None));
        let before = agg.size();
        let err = agg.push("b".into(), vec![2; 60]).expect_err("too large alone");
        assert_eq!((err.partition_key.as_str(), err.data.len(), err.max_size), ("b", 60, 64));
        assert_eq!(err.needed, aggregate(&[("b", vec![2; 60])]).len());
        assert_eq!((agg.len(), agg.size()), (1, before), "left as it was");
        let done = agg.flush().expect("one record");
        assert_eq!(done.data, aggregate(&[("a", vec![1; 10])]));
        assert_eq!((done.partition_key.as_str(), done.user_records), ("a", 1));
        assert_eq!(agg.flush(), None);
    }

    #[test]
    fn default_limit_leaves_room_for_the_partition_key() {
        let agg = Aggregator::default();
        assert_eq!(agg.max_size() + 256 * 4, 1024 * 1024);
        assert!(agg.is_empty());
    }

    fn partition_key() -> impl Strategy<Value = String> {
        // A small alphabet so keys repeat (table dedup), plus arbitrary Unicode, empty included.
        prop_oneof![3 => "[abc]{1,2}", 1 => ".{0,6}"]
    }

    proptest! {
        #[test]
        fn round_trip(records in prop::collection::vec((partition_key(), prop::collection::vec(any::<u8>(), 0..48)), 1..40)) {
            let data = aggregate(&records);
            let d = deaggregate("outer", &data).expect("our own aggregate");
            prop_assert!(d.is_aggregated());
            prop_assert_eq!(d.len(), records.len());
            let back: Vec<_> = d.iter().map(|r| (r.sub_sequence, r.partition_key.to_owned(), r.data.to_vec())).collect();
            let expected: Vec<_> = records.iter().enumerate().map(|(i, (k, v))| (i as u32, k.clone(), v.clone())).collect();
            prop_assert_eq!(back, expected);
            prop_assert!(d.iter().all(|r| r.explicit_hash_key.is_none()));
        }

        #[test]
        fn aggregator_flushes_exactly_when_full(
            max_size in 20usize..400,
            records in prop::collection::vec((partition_key(), 0usize..120), 0..60),
        ) {
            let mut agg = Aggregator::with_max_size(max_size);
            let mut pending: Vec<(String, Vec<u8>)> = vec![];
            let (mut accepted, mut flushed) = (0, 0);
            for (i, (key, len)) in records.into_iter().enumerate() {
                let data = vec![i as u8; len];
                let mut with = pending.clone();
                with.push((key.clone(), data.clone()));
                let fits = aggregate(&with).len() <= max_size;
                let alone = aggregate(&[(key.clone(), data.clone())]).len();
                prop_assert_eq!(agg.would_fit(&key, len), fits);
                match agg.push(key.clone(), data.clone()) {
                    Err(e) => {
                        prop_assert!(alone > max_size && !fits);
                        prop_assert_eq!(e.needed, alone);
                    }
                    Ok(None) => {
                        prop_assert!(fits);
                        accepted += 1;
                        pending = with;
                    }
                    Ok(Some(done)) => {
                        prop_assert!(!fits && !pending.is_empty() && alone <= max_size);
                        prop_assert!(done.data.len() <= max_size);
                        prop_assert_eq!(&done.data, &aggregate(&pending));
                        prop_assert_eq!(&done.partition_key, &pending[0].0);
                        prop_assert_eq!(done.user_records, pending.len());
                        flushed += done.user_records;
                        accepted += 1;
                        pending = vec![(key, data)];
                    }
                }
                prop_assert_eq!(agg.len(), pending.len());
                prop_assert_eq!(agg.size(), if pending.is_empty() { FRAMING_LEN } else { aggregate(&pending).len() });
            }
            if let Some(done) = agg.flush() {
                prop_assert!(done.data.len() <= max_size);
                prop_assert_eq!(&done.data, &aggregate(&pending));
                flushed += done.user_records;
            } else {
                prop_assert!(pending.is_empty());
            }
            prop_assert!(agg.is_empty());
            prop_assert_eq!(flushed, accepted, "every accepted user record comes out once");
        }
    }
}
