use super::decimal::{decimal_units, format_units};
use super::*;
use proptest::prelude::*;

fn typed(kind: FieldType) -> TypedField {
    TypedField::new(&FieldSpec::string("f").with(kind)).unwrap()
}

fn decimal(scale: u32) -> TypedField {
    typed(FieldType::Decimal { scale, min: None, max: None })
}

#[test]
fn decimals_are_exact_or_refused() {
    assert_eq!(decimal_units("0.25", 6), Ok(250_000));
    assert_eq!(decimal_units("-12.5", 2), Ok(-1_250));
    assert_eq!(decimal_units("3e2", 0), Ok(300));
    assert_eq!(decimal_units("1.5E-3", 4), Ok(15));
    assert_eq!(decimal_units("0.000", 0), Ok(0));
    assert_eq!(decimal_units("9223372036854775807", 0), Ok(i64::MAX));
    assert_eq!(decimal_units("-9223372036854775808", 0), Ok(i64::MIN));
    assert!(matches!(decimal_units("9223372036854775808", 0), Err(ValueError::OutOfRange { .. })));
    assert!(matches!(decimal_units("1e999", 0), Err(ValueError::OutOfRange { .. })));
    assert!(matches!(decimal_units("0.1234567", 6), Err(ValueError::TooPrecise { .. })));
    assert!(matches!(decimal_units("1e-999", 6), Err(ValueError::TooPrecise { .. })));
    for bad in ["", ".", "-", "1.2.3", "0x10", "1e", "NaN", "inf", "1_000"] {
        assert!(matches!(decimal_units(bad, 2), Err(ValueError::BadNumber { .. })), "{bad}");
    }
    assert_eq!(format_units(1_250, 2), "12.5");
}

proptest! {
    /// Any i64 count of units survives its text, at any scale.
    #[test]
    fn decimal_text_round_trips(v in any::<i64>(), scale in 0u32..=18) {
        prop_assert_eq!(decimal_units(&format_units(v as i128, scale), scale), Ok(v));
    }

    /// Whatever the bytes, typing a value never panics.
    #[test]
    fn hostile_text_never_panics(text in ".{0,40}") {
        for kind in [
            FieldType::Integer { min: Some(-5), max: Some(5) },
            FieldType::Decimal { scale: 3, min: None, max: None },
            FieldType::Boolean,
            FieldType::Timestamp { format: TimeFormat::Auto },
            FieldType::Timestamp { format: TimeFormat::EpochS },
            FieldType::Timestamp { format: TimeFormat::Pattern("%Y-%m-%d %H:%M:%S".into()) },
        ] {
            let f = typed(kind);
            let _ = f.parse_text(&text);
            let _ = f.parse_json(&text);
        }
    }
}

#[test]
fn json_values_are_typed_by_their_field() {
    let int = typed(FieldType::Integer { min: Some(0), max: Some(599) });
    assert_eq!(int.parse_json("404"), Ok(FieldValue::Int(404)));
    assert_eq!(int.parse_json("\"404\""), Ok(FieldValue::Int(404)), "quoted numbers are numbers");
    assert_eq!(int.parse_json("null"), Ok(FieldValue::Absent));
    assert!(matches!(int.parse_json("600"), Err(ValueError::OutOfRange { .. })));
    assert!(matches!(int.parse_json("4.5"), Err(ValueError::TooPrecise { .. })));
    assert!(matches!(int.parse_json("true"), Err(ValueError::WrongType { got: "a boolean", .. })));
    assert!(matches!(int.parse_json("[1]"), Err(ValueError::WrongType { got: "an array", .. })));
    let s = typed(FieldType::String { max_bytes: 4, values: vec![] });
    assert_eq!(s.parse_json(r#""a\u00e9""#), Ok(FieldValue::Str("aé".into())));
    assert!(matches!(s.parse_json("7"), Err(ValueError::WrongType { got: "a number", .. })));
    assert_eq!(s.parse_json(r#""abcde""#), Err(ValueError::TooLong { bytes: 5, max: 4 }));
    let e = typed(FieldType::String { max_bytes: 16, values: vec!["view".into()] });
    assert!(matches!(e.parse_json(r#""click""#), Err(ValueError::NotAllowed { .. })));
    let b = typed(FieldType::Boolean);
    assert_eq!(b.parse_json("false"), Ok(FieldValue::Bool(false)));
    assert_eq!(b.parse_text("1"), Ok(FieldValue::Bool(true)));
    let d = decimal(6);
    assert_eq!(d.parse_json("1e-6"), Ok(FieldValue::Dec(1)));
    assert_eq!(d.parse_text(""), Ok(FieldValue::Absent), "an empty CSV cell is absent");
    assert_eq!(s.parse_text(""), Ok(FieldValue::Str("".into())), "but an empty string is a string");
}

#[test]
fn timestamps_in_every_declared_format() {
    let t = |format: TimeFormat| typed(FieldType::Timestamp { format });
    let ms = 1_795_256_130_250;
    assert_eq!(t(TimeFormat::Auto).parse_json(r#""2026-11-21T10:15:30.250Z""#), Ok(FieldValue::Time(ms)));
    assert_eq!(t(TimeFormat::Auto).parse_json("1795256130250"), Ok(FieldValue::Time(ms)));
    assert!(matches!(t(TimeFormat::Auto).parse_json("1.5"), Err(ValueError::BadTimestamp { .. })));
    assert_eq!(t(TimeFormat::Rfc3339).parse_text("2026-11-21T11:15:30.250+01:00"), Ok(FieldValue::Time(ms)));
    assert_eq!(t(TimeFormat::EpochS).parse_json("1795256130.25"), Ok(FieldValue::Time(ms)));
    assert_eq!(t(TimeFormat::EpochMs).parse_json("1795256130250"), Ok(FieldValue::Time(ms)));
    assert_eq!(t(TimeFormat::EpochUs).parse_json("1795256130250999"), Ok(FieldValue::Time(ms)), "floored");
    assert_eq!(t(TimeFormat::EpochNs).parse_text("1795256130250000000"), Ok(FieldValue::Time(ms)));
    assert_eq!(t(TimeFormat::EpochNs).parse_text("-1"), Ok(FieldValue::Time(-1)), "floored, not truncated");
    let clf = t(TimeFormat::Pattern("%d/%b/%Y:%H:%M:%S %z".into()));
    assert_eq!(clf.parse_text("21/Nov/2026:10:15:30 +0000"), Ok(FieldValue::Time(ms - 250)));
    let naive = t(TimeFormat::Pattern("%Y-%m-%d %H:%M:%S".into()));
    assert_eq!(naive.parse_text("2026-11-21 10:15:30"), Ok(FieldValue::Time(ms - 250)), "UTC without a zone");
    assert!(matches!(naive.parse_text("yesterday"), Err(ValueError::BadTimestamp { .. })));
}

#[test]
fn schema_errors_name_the_field() {
    let input = InputSpec::default();
    let err = |fields: &[FieldSpec], input: &InputSpec| validate(input, fields).unwrap_err().to_string();
    let ts = FieldSpec::string("ts").with(FieldType::Timestamp { format: TimeFormat::Auto });
    assert!(err(&[FieldSpec::string("a")], &input).contains("input.time = \"ts\" is not a declared field"));
    assert!(err(&[FieldSpec::string("ts")], &input).contains("not a timestamp"));
    assert!(err(&[ts.clone(), FieldSpec::string("a").at("geo/cc")], &input).contains("starts with `/`"));
    assert!(err(&[ts.clone(), FieldSpec::string("a b")], &input).contains("letters"));
    assert!(err(&[ts.clone(), ts.clone()], &input).contains("declared twice"));
    let mut bad_default = FieldSpec::string("n").with(FieldType::Integer { min: Some(0), max: Some(9) });
    bad_default.default = Some("12".into());
    assert!(err(&[ts.clone(), bad_default], &input).contains("default \"12\""));
    let csv = InputSpec { format: Format::Csv, columns: vec!["ts".into()], time: "ts".into() };
    assert!(err(&[ts.clone(), FieldSpec::string("status")], &csv).contains("not in input.columns"));
    assert!(err(&[ts.clone().at("/ts")], &csv).contains("`path` is for JSON"));
    let listed = |values: &[&str]| {
        let kind = FieldType::String { max_bytes: 4, values: values.iter().map(|v| v.to_string()).collect() };
        FieldSpec::string("kind").with(kind)
    };
    assert!(err(&[ts.clone(), listed(&["view", "click"])], &input).contains("\"click\" is empty or over max_bytes = 4"));
    assert!(err(&[ts.clone(), listed(&["", "a"])], &input).contains("\"\" is empty"));
    validate(&input, &[ts.clone(), listed(&["view", "buy"])]).unwrap();
    validate(&csv, std::slice::from_ref(&ts)).unwrap();
    validate(&input, &default_fields()).unwrap();
}

#[test]
fn units_format_exactly_at_any_size() {
    assert_eq!(format_units(0, 6), "0");
    assert_eq!(format_units(1_500, 3), "1.5");
    assert_eq!(format_units(-5, 2), "-0.05");
    assert_eq!(format_units(-500, 2), "-5");
    assert_eq!(format_units(i128::MAX, 0), "170141183460469231731687303715884105727");
    // Past the 96 bits of a Decimal: still exact, point and all.
    assert_eq!(format_units(10i128.pow(30) + 5, 3), "1000000000000000000000000000.005");
    assert_eq!(format_units(i128::MIN, 38), "-1.70141183460469231731687303715884105728");
}
