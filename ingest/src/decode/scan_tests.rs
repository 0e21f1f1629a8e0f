//! The scanner (`json/`) against the serde_json walk it replaced
//! (`serde_walk.rs`), on generated records and on their corruptions: the
//! same texts are JSON, the same values are captured, the same problems
//! are found.

use super::json::{Marks, PathTrie};
use super::serde_walk;
use super::DecodeError;
use proptest::prelude::*;
use zigzag_model::schema::FieldSpec;
use zigzag_model::Config;

/// Paths over keys the generator draws: nesting, an array index, a key
/// that is digits, keys needing escapes (`/` in a pointer, `"` in JSON).
const SCHEMA: &str = r#"
[input]
time = "ts"
[[field]]
name = "ts"
type = "timestamp"
[[field]]
name = "a"
path = "/geo/cc"
type = "string"
[[field]]
name = "b"
path = "/ad/campaign/id"
type = "string"
[[field]]
name = "c"
path = "/ad/slots/1"
type = "string"
[[field]]
name = "d"
path = "/odd~1key"
type = "string"
[[field]]
name = "e"
path = "/q\"uote"
type = "string"
[[field]]
name = "f"
path = "/n/0"
type = "string"
[[field]]
name = "g"
path = "/longer_than_eight_bytes"
type = "string"
[[dimension]]
field = "a"
bytes = 2
[[measure]]
name = "n"
type = "count"
"#;

fn fields() -> &'static [FieldSpec] {
    static FIELDS: std::sync::LazyLock<Vec<FieldSpec>> =
        std::sync::LazyLock::new(|| Config::from_toml(SCHEMA).expect("the test schema").fields);
    &FIELDS
}

const KEYS: &[&str] = &[
    "ts",
    "geo",
    "cc",
    "ad",
    "campaign",
    "id",
    "slots",
    "odd/key",
    "q\\\"uote",
    "q\\u0022uote",
    "n",
    "0",
    "longer_than_eight_bytes",
    "longer_than_eight_bytez",
    "other",
    "g\\u0065o",
    "",
];

/// JSON text: objects over the schema's keys and others, arrays, every
/// kind of scalar, escapes, irregular whitespace.
fn json_text() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
        "\"([a-z0-9 /é]|\\\\[nt\"\\\\/]|\\\\u00[0-9a-f]{2}|\\\\ud800){0,12}\"",
        Just("\"2026-11-21T10:15:30.250Z\"".to_string()),
    ];
    let ws = prop_oneof![Just(""), Just(""), Just(" "), Just("\n\t"), Just(" \r\n ")];
    scalar.prop_recursive(5, 48, 6, move |inner| {
        let ws = ws.clone();
        prop_oneof![
            prop::collection::vec((prop::sample::select(KEYS), inner.clone(), ws.clone()), 0..6).prop_map(|members| {
                let body: Vec<String> = members.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
                format!("{{{}}}", body.join(","))
            }),
            prop::collection::vec((inner, ws), 0..4).prop_map(|items| {
                let body: Vec<String> = items.iter().map(|(v, w)| format!("{w}{v}{w}")).collect();
                format!("[{}]", body.join(","))
            }),
        ]
    })
}

/// A record: an object at the top, maybe corrupted by one edit.
fn record() -> impl Strategy<Value = Vec<u8>> {
    let object = prop::collection::vec((prop::sample::select(KEYS), json_text()), 0..8).prop_map(|members| {
        let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    });
    let edit = prop_oneof![
        3 => Just(None),
        2 => (any::<prop::sample::Index>(), prop::sample::select(b"{}[]\",:\\ 0-eE.+nul\x01\x7f".to_vec()), 0u8..3)
            .prop_map(Some),
    ];
    (object, edit).prop_map(|(text, edit)| {
        let mut bytes = text.into_bytes();
        if let Some((at, byte, how)) = edit {
            let i = at.index(bytes.len() + 1);
            match how {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => bytes.push(byte),
            }
        }
        bytes
    })
}

/// What a walk made of a record, compared across the two.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Captured(Vec<Option<String>>),
    NotJson,
    Duplicate(String),
    Shape(String),
}

fn outcome(result: Result<(), DecodeError>, captured: Vec<Option<String>>) -> Outcome {
    match result {
        Ok(()) => Outcome::Captured(captured),
        Err(DecodeError::Json { .. }) => Outcome::NotJson,
        Err(DecodeError::Duplicate(f)) => Outcome::Duplicate(f),
        Err(DecodeError::Field { field, .. }) => Outcome::Shape(field),
        Err(other) => panic!("a walk does not say {other:?}"),
    }
}

fn texts(out: &[Option<super::json::Raw>]) -> Vec<Option<(String, bool)>> {
    out.iter().map(|r| r.map(|r| (r.text.to_string(), r.escaped))).collect()
}

fn both(fields: &[FieldSpec], text: &str) -> (Outcome, Outcome) {
    let scanner = PathTrie::new(fields).expect("valid paths");
    let mut out = vec![None; fields.len()];
    let result = scanner.capture(text, None, &mut out);
    for raw in out.iter().flatten() {
        assert_eq!(raw.escaped, raw.text.starts_with('"') && raw.text.contains('\\'), "escape flag of {}", raw.text);
    }
    // With the record's marks (strings found by their quotes when it is
    // plain): the very same result, error positions and messages included.
    let mut marked = vec![None; fields.len()];
    let marks = Marks::of(text.as_bytes());
    let marked_result = scanner.capture(text, marks.as_ref(), &mut marked);
    assert_eq!(marked_result, result, "with marks, record {text}");
    assert_eq!(texts(&marked), texts(&out), "with marks, record {text}");
    let scanned = outcome(result, out.iter().map(|r| r.map(|r| r.text.to_string())).collect());
    let oracle = serde_walk::PathTrie::new(fields).expect("valid paths");
    let mut out = vec![None; fields.len()];
    let result = oracle.capture(text, &mut out);
    // Where a path goes deeper, serde_json's visitor reads a scalar as a
    // value first: a number past f64 or a string with a lone surrogate is
    // an error there before the shape is. Both refuse the record; the
    // scanner names the shape, which is what is wrong with it.
    if let (Outcome::Shape(_), Err(DecodeError::Json { message, .. })) = (&scanned, &result) {
        if message.contains("hex escape") || message.contains("out of range") {
            return (scanned.clone(), scanned);
        }
    }
    let walked = outcome(result, out.iter().map(|r| r.map(str::to_string)).collect());
    (scanned, walked)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// Same verdict, same captured texts, same field named.
    #[test]
    fn the_scanner_agrees_with_serde_json(bytes in record()) {
        let Ok(text) = std::str::from_utf8(&bytes) else { return Ok(()) };
        let (scanned, walked) = both(fields(), text);
        prop_assert_eq!(scanned, walked, "record {}", text);
    }

    /// The same on records with no escape and no control byte, the ones
    /// whose strings are found by their quotes: backslashes made `/`,
    /// tabs and line ends dropped.
    #[test]
    fn plain_records_agree_with_serde_json(bytes in record()) {
        let bytes: Vec<u8> =
            bytes.into_iter().filter(|&b| b >= 0x20).map(|b| if b == b'\\' { b'/' } else { b }).collect();
        let Ok(text) = std::str::from_utf8(&bytes) else { return Ok(()) };
        prop_assert!(Marks::of(text.as_bytes()).is_none_or(|m| m.plain), "record {}", text);
        let (scanned, walked) = both(fields(), text);
        prop_assert_eq!(scanned, walked, "record {}", text);
    }
}

#[test]
fn edge_cases_agree() {
    let fields = fields();
    let cases = [
        r#"{"ts":1,"geo":{"cc":"DE"}}"#,
        r#"{"g\u0065o":{"cc":"DE"}}"#,
        r#"{"geo":{"cc":"DE"},"geo":{"cc":"FR"}}"#,
        // A number with two leading zeros where a path goes deeper: not
        // JSON (found by the plain-records test), not the wrong shape.
        r#"{"n":00.0}"#,
        r#"{"n":-01}"#,
        r#"{"geo":{"cc":"DE"},"geo":{}}"#,
        r#"{"geo":"DE"}"#,
        r#"{"geo":[]}"#,
        r#"{"geo":[1]}"#,
        r#"{"geo":null}"#,
        r#"{"ad":{"slots":["a","b","c"]}}"#,
        r#"{"ad":{"slots":{"1":"b"}}}"#,
        r#"{"ad":{"slots":"x"}}"#,
        r#"{"n":[[1]]}"#,
        r#"{"odd/key":true,"q\"uote":false}"#,
        r#"{"ts":01}"#,
        r#"{"ts":1.}"#,
        r#"{"ts":-}"#,
        r#"{"ts":.5}"#,
        r#"{"ts":+1}"#,
        r#"{"ts":1e}"#,
        r#"{"ts":"a\u12"}"#,
        r#"{"ts":"a\x"}"#,
        "{\"ts\":\"a\u{1}\"}",
        r#"{"ts":1,}"#,
        r#"{"ts":[1,]}"#,
        r#"{"x":{"a":1,}}"#,
        r#"{"ts":1} x"#,
        r#"{"ts":1}  "#,
        r#" {"ts":1}"#,
        r#"{"ts" 1}"#,
        r#"{ts:1}"#,
        r#"{"ts":tru}"#,
        r#"{"ts":nul"#,
        r#"{"x":[[[{"a":[]}]]],"ts":"\ud800"}"#,
        r#"{"longer_than_eight_bytes":1,"longer_than_eight_bytez":2}"#,
        r#"{"longer_than_eight_byte":1}"#,
        "{}",
        "{",
        "",
        "[]",
        "\"x\"",
    ];
    for text in cases {
        let (scanned, walked) = both(fields, text);
        assert_eq!(scanned, walked, "record {text}");
    }
}

#[test]
fn a_scalar_where_a_path_goes_deeper_is_the_wrong_shape_whatever_it_holds() {
    let fields = fields();
    for text in [r#"{"geo":1e400}"#, r#"{"geo":"\ud800"}"#, r#"{"geo":"DE"}"#] {
        let scanner = PathTrie::new(fields).expect("valid paths");
        let e = scanner.capture(text, None, &mut vec![None; fields.len()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field `a`: expected an object, got a string"
                .replace("a string", if text.contains("1e") { "a number" } else { "a string" }),
            "{text}"
        );
    }
}
