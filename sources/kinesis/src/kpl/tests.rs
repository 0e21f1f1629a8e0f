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
