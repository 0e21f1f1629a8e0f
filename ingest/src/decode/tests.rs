use super::*;
use proptest::prelude::*;
use std::borrow::Cow;
use zigzag_model::schema::ValueError;

const OK: &str = r#"{"type":"click","ts":"2026-11-21T10:15:30.250Z","referrer":"news.example","campaign":"c-42","country":"DE","url":"/a","cost":0.25,"user_id":"u1","extra":[1,{"a":2}]}"#;

fn shipped(s: &str) -> Result<Event<'_>, DecodeError> {
    Decoder::shipped().decode(s.as_bytes())
}

fn err(s: &str) -> DecodeError {
    shipped(s).unwrap_err()
}

fn field(name: &str, error: ValueError) -> DecodeError {
    DecodeError::Field { field: name.into(), error }
}

fn s(x: &str) -> FieldValue<'_> {
    FieldValue::Str(Cow::Borrowed(x))
}

#[test]
fn decodes_the_shipped_shape_borrowing_strings() {
    let e = shipped(OK).unwrap();
    assert_eq!(e.ts_ms, 1_795_256_130_250);
    assert_eq!(e.values[0], s("click"));
    assert!(matches!(e.values[2], FieldValue::Str(Cow::Borrowed("news.example"))));
    assert_eq!(e.values[6], FieldValue::Dec(250_000), "cost in micro-units, from the literal's digits");
    assert_eq!(e.values[7], s("u1"));
    let e = shipped(r#"{"type":"impression","ts":1795256130250,"referrer":"a\u00e9","campaign":"c","country":"FR","url":"/","cost":null}"#).unwrap();
    assert_eq!(e.ts_ms, 1_795_256_130_250);
    assert_eq!(e.values[2], s("aé"));
    assert_eq!((&e.values[6], &e.values[7]), (&FieldValue::Absent, &FieldValue::Absent));
}

#[test]
fn every_defect_has_its_own_reason() {
    let base = |patch: &str| OK.replacen(r#""type":"click""#, patch, 1);
    let e = err(&base(r#""type":"view""#));
    assert_eq!(e.reason(), "not_allowed");
    assert!(e.to_string().contains("\"view\" is not one of [\"click\", \"impression\"]"), "{e}");
    assert_eq!(err(&OK.replace(r#""referrer":"news.example","#, "")), DecodeError::Missing("referrer".into()));
    assert_eq!(
        err(&OK.replace(r#""country":"DE""#, r#""country":7"#)),
        field("country", ValueError::WrongType { expected: "a string", got: "a number" })
    );
    assert_eq!(err(&OK.replace(r#""country":"DE""#, r#""country":"""#)), DecodeError::Empty("country".into()));
    assert_eq!(err(&OK.replace("2026-11-21T10:15:30.250Z", "yesterday")).reason(), "bad_timestamp");
    assert_eq!(err(&OK.replace(r#""2026-11-21T10:15:30.250Z""#, "1.5")).reason(), "bad_timestamp");
    assert!(matches!(err(&OK.replace("2026-11-21", "1970-01-01")), DecodeError::TimestampOutOfRange { .. }));
    assert_eq!(err(&OK.replace(r#""cost":0.25"#, r#""cost":-1"#)).reason(), "out_of_range");
    assert_eq!(
        err(&OK.replace(r#""cost":0.25"#, r#""cost":"free""#)),
        field("cost", ValueError::BadNumber { value: "free".into() })
    );
    assert_eq!(err(&OK.replace(r#""cost":0.25"#, r#""cost":0.1234567"#)).reason(), "too_precise");
    assert!(matches!(err("[1,2]"), DecodeError::Json { .. }));
    assert!(matches!(err("{\"type\":"), DecodeError::Json { line: 1, .. }));
    assert_eq!(Decoder::shipped().decode(b"{\"a\":\"\xff\"}").unwrap_err(), DecodeError::NotUtf8 { offset: 6 });
    let small = Decoder::new(&Config::default(), DecodeLimits { max_bytes: 10, ..Default::default() }).unwrap();
    assert_eq!(small.decode(OK.as_bytes()).unwrap_err(), DecodeError::Oversize { bytes: OK.len(), max: 10 });
    assert_eq!(err(&OK.replace(r#""cost":0.25"#, r#""cost":1e999"#)).reason(), "out_of_range");
    assert_eq!(
        err(&OK.replace(r#""cost":0.25"#, r#""cost":1e13"#)).reason(),
        "out_of_range",
        "a cost that cannot be summed exactly is refused, not dropped from the sums"
    );
    let long = "r".repeat(257);
    assert_eq!(
        err(&OK.replace("news.example", &long)),
        field("referrer", ValueError::TooLong { bytes: 257, max: 256 })
    );
    assert!(shipped(&OK.replace("news.example", &"r".repeat(256))).is_ok());
    assert_eq!(
        err(&OK.replace(r#""url":"/a""#, r#""url":"/a","url":"/b""#)),
        DecodeError::Duplicate("url".into()),
        "a repeated key is refused, not resolved silently"
    );
}

fn declared(toml: &str) -> Decoder {
    Decoder::new(&Config::from_toml(toml).unwrap(), DecodeLimits::default()).unwrap()
}

const AD_SERVER: &str = r#"
[input]
time = "at"
[[field]]
name = "at"
path = "/meta/ts"
type = "timestamp"
format = "epoch_ms"
[[field]]
name = "campaign_id"
path = "/ad/campaign/id"
type = "integer"
min = 0
max = 1000000
[[field]]
name = "country"
path = "/geo/cc"
type = "string"
max_bytes = 2
default = "ZZ"
[[field]]
name = "slot"
path = "/ad/slots/1"
type = "string"
optional = true
[[field]]
name = "price"
path = "/price_micros"
type = "decimal"
scale = 6
[[field]]
name = "a~b"
path = "/odd~1key"
type = "boolean"
optional = true
[[dimension]]
field = "country"
bytes = 2
[[measure]]
name = "views"
type = "count"
"#;

#[test]
fn nested_paths_array_indexes_and_defaults() {
    let toml = AD_SERVER.replace("name = \"a~b\"", "name = \"flag\"");
    let d = declared(&toml);
    let rec = r#"{"ad":{"campaign":{"id":"7","name":"x"},"slots":["top","side"]},"geo":{"cc":"DE"},"meta":{"ts":1795256130250},"price_micros":12.5,"odd/key":true}"#;
    let e = d.decode(rec.as_bytes()).unwrap();
    assert_eq!(e.ts_ms, 1_795_256_130_250);
    assert_eq!(
        e.values.to_vec(),
        vec![
            FieldValue::Time(1_795_256_130_250),
            FieldValue::Int(7),
            s("DE"),
            s("side"),
            FieldValue::Dec(12_500_000),
            FieldValue::Bool(true),
        ]
    );
    let rec = r#"{"ad":{"campaign":{"id":7}},"geo":null,"meta":{"ts":1795256130250},"price_micros":0}"#;
    let e = d.decode(rec.as_bytes()).unwrap();
    assert_eq!((&e.values[2], &e.values[3]), (&s("ZZ"), &FieldValue::Absent), "a null subtree is absent");
    // A value where a declared path goes deeper is the wrong shape, named
    // by the first field below it, never silently absent (or defaulted).
    let rec = r#"{"ad":{"campaign":{"id":7},"slots":"none"},"meta":{"ts":1795256130250},"price_micros":0}"#;
    let e = d.decode(rec.as_bytes()).unwrap_err();
    assert_eq!(e.to_string(), "field `slot`: expected an array or object, got a string");
    let rec = r#"{"ad":{"campaign":{"id":7}},"geo":"DE","meta":{"ts":1795256130250},"price_micros":0}"#;
    assert_eq!(d.decode(rec.as_bytes()).unwrap_err().to_string(), "field `country`: expected an object, got a string");
    let rec = r#"{"ad":{"campaign":{"id":7}},"geo":[],"meta":{"ts":1795256130250},"price_micros":0}"#;
    assert_eq!(d.decode(rec.as_bytes()).unwrap().values[2], s("ZZ"), "an empty array is an absent object");
    let rec = r#"{"ad":{"campaign":{"id":7}},"geo":["DE"],"meta":{"ts":1795256130250},"price_micros":0}"#;
    assert_eq!(d.decode(rec.as_bytes()).unwrap_err().to_string(), "field `country`: expected an object, got an array");
    let rec = r#"{"ad":[{"campaign":{"id":7}}],"meta":{"ts":1795256130250},"price_micros":0}"#;
    assert_eq!(
        d.decode(rec.as_bytes()).unwrap_err().to_string(),
        "field `campaign_id`: expected an object, got an array"
    );
    let e = d.decode(br#"{"ad":{"campaign":{"id":-1}},"meta":{"ts":1795256130250},"price_micros":1}"#).unwrap_err();
    assert_eq!(e.reason(), "out_of_range");
    let e = d.decode(br#"{"meta":{"ts":1795256130250},"price_micros":1}"#).unwrap_err();
    assert_eq!(e, DecodeError::Missing("campaign_id".into()));
    // Skipped subtrees are walked without recursion: 100k levels of
    // nesting cost no stack, and the record is judged by its fields.
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let rec =
        format!(r#"{{"x":{deep},"ad":{{"campaign":{{"id":1}}}},"meta":{{"ts":1795256130250}},"price_micros":1}}"#);
    assert!(d.decode(rec.as_bytes()).is_ok());
    let unclosed = format!(r#"{{"x":{}"#, "[".repeat(100_000));
    assert_eq!(d.decode(unclosed.as_bytes()).unwrap_err().reason(), "malformed_json");
}

#[test]
fn paths_that_overlap_are_refused() {
    let toml = AD_SERVER
        .replace("path = \"/ad/slots/1\"", "path = \"/ad/campaign\"")
        .replace("name = \"a~b\"", "name = \"flag\"");
    let e = Decoder::new(&Config::from_toml(&toml).unwrap(), DecodeLimits::default()).unwrap_err().to_string();
    assert!(e.contains("one inside the other"), "{e}");
}

const ACCESS_LOG: &str = r#"
[input]
format = "csv"
columns = ["time", "method", "path", "status", "bytes"]
time = "time"
[[field]]
name = "time"
type = "timestamp"
format = "%d/%b/%Y:%H:%M:%S %z"
[[field]]
name = "path"
type = "string"
[[field]]
name = "status"
type = "integer"
min = 100
max = 599
[[field]]
name = "bytes"
type = "integer"
min = 0
[[dimension]]
field = "status"
type = "integer"
[[measure]]
name = "requests"
type = "count"
"#;

#[test]
fn csv_columns_quoting_and_headers() {
    let d = declared(ACCESS_LOG);
    let e = d.decode(b"21/Nov/2026:10:15:30 +0000,GET,/a,200,512\n").unwrap();
    assert_eq!(
        e.values.to_vec(),
        vec![FieldValue::Time(1_795_256_130_000), s("/a"), FieldValue::Int(200), FieldValue::Int(512)]
    );
    let e = d.decode(br#"21/Nov/2026:10:15:30 +0000,GET,"/search?q=a,b",404,0"#).unwrap();
    assert_eq!(e.values[1], FieldValue::Str(Cow::Owned("/search?q=a,b".into())));
    assert_eq!(d.decode(b"time,method,path,status,bytes").unwrap_err(), DecodeError::Header);
    assert_eq!(d.decode(b"a,b").unwrap_err(), DecodeError::Columns { got: 2, expected: 5 });
    assert_eq!(d.decode(b"21/Nov/2026:10:15:30 +0000,GET,/a,700,1").unwrap_err().reason(), "out_of_range");
    assert_eq!(d.decode(b"21/Nov/2026:10:15:30 +0000,GET,/a,200,").unwrap_err(), DecodeError::Missing("bytes".into()));
}

proptest! {
    /// Arbitrary bytes never panic the decoder, JSON or CSV.
    #[test]
    fn never_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = Decoder::shipped().decode(&bytes);
        let _ = declared(ACCESS_LOG).decode(&bytes);
    }

    /// Corrupting a valid record anywhere is an error or a valid event, never a panic.
    #[test]
    fn never_panics_on_mutations(pos in 0..OK.len(), byte in any::<u8>(), cut in 0..=OK.len()) {
        let mut b = OK.as_bytes().to_vec();
        b[pos] = byte;
        let _ = Decoder::shipped().decode(&b);
        let _ = Decoder::shipped().decode(&OK.as_bytes()[..cut]);
    }
}

const LIMITS: &str = r#"
[input]
time = "at"
[[field]]
name = "at"
path = "/t"
type = "timestamp"
format = "epoch_ms"
[[field]]
name = "n"
type = "integer"
optional = true
[[field]]
name = "d"
type = "decimal"
scale = 18
optional = true
[[field]]
name = "s"
type = "string"
max_bytes = 4
optional = true
[[dimension]]
field = "at"
type = "hash"
bits = 4
[[measure]]
name = "c"
type = "count"
"#;

#[test]
fn numbers_and_strings_at_their_type_limits() {
    let d = declared(LIMITS);
    let rec = |field: &str, raw: &str| format!(r#"{{"t":1795256130250,"{field}":{raw}}}"#);
    let ok = |field: &str, raw: &str, i: usize| {
        d.decode(rec(field, raw).as_bytes()).map(|e| e.values[i].clone().into_owned())
    };
    assert_eq!(ok("n", "9223372036854775807", 1), Ok(FieldValue::Int(i64::MAX)));
    assert_eq!(ok("n", "-9223372036854775808", 1), Ok(FieldValue::Int(i64::MIN)));
    assert_eq!(ok("n", "\"-0\"", 1), Ok(FieldValue::Int(0)));
    assert_eq!(ok("n", "1e18", 1), Ok(FieldValue::Int(1_000_000_000_000_000_000)));
    for (raw, reason) in [
        ("9223372036854775808", "out_of_range"),
        ("-9223372036854775809", "out_of_range"),
        ("1e19", "out_of_range"),
        ("1e400", "out_of_range"),
        (&"9".repeat(400), "out_of_range"),
        ("0.5", "too_precise"),
        ("\"0x10\"", "bad_number"),
        ("\"\u{0661}\"", "bad_number"), // an Arabic-Indic digit is not an ASCII digit
        ("+1", "malformed_json"),
        ("NaN", "malformed_json"),
        ("[1]", "wrong_type"),
    ] {
        let e = d.decode(rec("n", raw).as_bytes()).unwrap_err();
        assert_eq!(e.reason(), reason, "{raw}: {e}");
    }
    // 18 digits after the point: i64 units up to 9.22...
    assert_eq!(ok("d", "9.223372036854775807", 2), Ok(FieldValue::Dec(i64::MAX)));
    assert_eq!(ok("d", "1e-18", 2), Ok(FieldValue::Dec(1)));
    assert_eq!(d.decode(rec("d", "9.3").as_bytes()).unwrap_err().reason(), "out_of_range");
    assert_eq!(d.decode(rec("d", "1e-19").as_bytes()).unwrap_err().reason(), "too_precise");
    // Lengths are bytes, not characters: "éé" is 4 bytes, "ééé" 6.
    assert_eq!(ok("s", "\"éé\"", 3), Ok(FieldValue::Str("éé".into())));
    assert_eq!(d.decode(rec("s", "\"ééé\"").as_bytes()).unwrap_err().reason(), "field_too_long");
    assert_eq!(
        d.decode(rec("s", r#""\u00e9\u00e9x""#).as_bytes()).unwrap_err().reason(),
        "field_too_long",
        "after unescaping"
    );
    assert_eq!(d.decode(br#"{"t":-1}"#).unwrap_err().reason(), "timestamp_out_of_range");
    assert_eq!(d.decode(br#"{"t":99999999999999999999}"#).unwrap_err().reason(), "bad_timestamp");
}
