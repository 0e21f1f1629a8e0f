use super::*;
use proptest::prelude::*;

fn dim(toml_text: &str) -> Dimension {
    let schema = Schema::from_toml(toml_text).unwrap();
    schema.dims()[0].clone()
}

fn err_of(toml_text: &str) -> String {
    Schema::from_toml(toml_text).unwrap_err().to_string()
}

#[test]
fn seed_001_signed_ints_flip_the_sign_bit() {
    let d = dim("[[dimension]]\nname='c'\ntype='int'\nbits=8");
    let table = [(0, 128), (1, 129), (127, 255), (-128, 0), (-127, 1), (-2, 126), (-1, 127)];
    for (v, want) in table {
        assert_eq!(d.encode(&Value::Int(v)).unwrap(), want, "{v}");
    }
    let e = d.encode(&Value::Int(128)).unwrap_err();
    assert_eq!(e.to_string(), "dimension \"c\": 128 is out of range -128..=127");
}

#[test]
fn seed_001_fixed_width_utf8() {
    let d = dim("[[dimension]]\nname='w'\ntype='string'\nbytes=4");
    let enc = |s| d.encode(&Value::Str(s)).unwrap();
    assert_eq!(enc("car"), 0x6361_7200);
    assert_eq!(enc("cart"), 0x6361_7274);
    assert_eq!(enc("cartographer"), 0x6361_7274);
    assert_eq!(enc("carton"), enc("cart"));
    assert!(enc("candy") < enc("car"));
}

#[test]
fn seed_001_floats_flip_sign_of_positives_all_bits_of_negatives() {
    let d = dim("[[dimension]]\nname='f'\ntype='f32'");
    let enc = |f: f64| d.encode(&Value::Float(f)).unwrap();
    assert_eq!(enc(0.0), 0x8000_0000);
    assert_eq!(enc(-0.0), enc(0.0));
    assert!(enc(-2.0) < enc(-1.0) && enc(-1.0) < enc(0.0) && enc(0.0) < enc(1.0) && enc(1.0) < enc(2.0));
    assert!(enc(f64::NEG_INFINITY) < enc(-1e30));
    assert_eq!(d.encode(&Value::Float(f64::NAN)).unwrap_err().error, EncodeError::NaN);
}

#[test]
fn scaled_quantizes_and_rejects_out_of_range() {
    let d = dim("[[dimension]]\nname='lat'\ntype='scaled'\nmin=24.0\nmax=50.0\nbits=10");
    assert_eq!(d.encode(&Value::Float(24.0)).unwrap(), 0);
    assert_eq!(d.encode(&Value::Float(50.0)).unwrap(), 1023);
    assert_eq!(d.encode(&Value::Float(37.0)).unwrap(), 512);
    let e = d.encode(&Value::Float(51.0)).unwrap_err().to_string();
    assert!(e.contains("51 is out of range 24..=50"), "{e}");
    // Query bounds clamp, or empty the range.
    let b = |v, s| d.encoding.encode_bound(d.bits, &Value::Float(v), s).unwrap();
    assert_eq!(b(10.0, Side::Lower), Some(0));
    assert_eq!(b(60.0, Side::Upper), Some(1023));
    assert_eq!(b(10.0, Side::Upper), None);
    assert_eq!(b(60.0, Side::Lower), None);
}

#[test]
fn timestamps_offset_from_origin_or_bin() {
    let d = dim("[[dimension]]\nname='ts'\ntype='timestamp'\nunit='second'\norigin='2016-01-01T00:00:00Z'\nbits=23");
    let t = |s| d.parse(s).unwrap();
    assert_eq!(d.encode(&t("2016-01-01T00:00:00Z")).unwrap(), 0);
    assert_eq!(d.encode(&t("1451606460")).unwrap(), 60);
    let e = d.encode(&t("2015-12-31T23:59:59Z")).unwrap_err().to_string();
    assert!(e.contains("out of range 2016-01-01T00:00:00Z..="), "{e}");

    let d = dim("[[dimension]]\nname='ts'\ntype='timestamp'\nunit='minute'\nbin='day'\nbits=11");
    assert_eq!(d.encode(&d.parse("2016-02-17T12:34:56Z").unwrap()).unwrap(), 12 * 60 + 34);
    assert!(d.parse("noon").is_err());
}

#[test]
fn enums_and_hashes() {
    let d = dim("[[dimension]]\nname='type'\ntype='enum'\nvalues=['click','impression']");
    assert_eq!(d.bits, 1);
    assert_eq!(d.encode(&Value::Str("impression")).unwrap(), 1);
    let e = d.encode(&Value::Str("view")).unwrap_err().to_string();
    assert_eq!(e, "dimension \"type\": \"view\" is not one of [\"click\", \"impression\"]");
    let h = dim("[[dimension]]\nname='ref'\ntype='hash'\nbits=16");
    let a = h.encode(&Value::Str("example.com")).unwrap();
    assert!(a < 1 << 16);
    // Stable across runs and builds: xxh3-64 of the UTF-8 bytes, top 16 bits.
    assert_eq!(a, (xxhash_rust::xxh3::xxh3_64(b"example.com") >> 48) as u128);
}

#[test]
fn config_errors_name_the_dimension() {
    assert_eq!(err_of("[[dimension]]\nname='x'\ntype='bogus'\nbits=3"),
        "dimension \"x\": unknown type \"bogus\"; expected one of uint, int, f32, f64, scaled, timestamp, string, hash, enum");
    assert_eq!(err_of("[[dimension]]\nname='x'\ntype='uint'"), "dimension \"x\": type \"uint\" needs `bits`");
    assert_eq!(
        err_of("[[dimension]]\nname='x'\ntype='uint'\nbits=3\nunit='second'"),
        "dimension \"x\": field `unit` does not apply to type \"uint\""
    );
    assert_eq!(
        err_of("[[dimension]]\nname='x'\ntype='hash'\nbits=65"),
        "dimension \"x\": `bits` must be 1..=64, got 65"
    );
    assert_eq!(
        err_of("[[dimension]]\nname='x'\ntype='uint'\nbits=3\n[[dimension]]\nname='x'\ntype='uint'\nbits=3"),
        "dimension name \"x\" appears twice"
    );
    assert!(
        err_of("[[dimension]]\nname='t'\ntype='timestamp'\nunit='second'\nbin='day'\nbits=16").contains("cannot hold")
    );
    assert_eq!(err_of(""), "the schema has no dimensions");
    assert!(err_of("[[dimension]]\nname='x'\ntype='uint'\nbits=3\ncolour='red'").starts_with("schema TOML:"));
}

#[test]
fn plan_boxes_splits_by_time_bin() {
    let s = Schema::from_toml(
        "[[dimension]]\nname='ts'\ntype='timestamp'\nunit='minute'\nbin='day'\nbits=11\n\
         [[dimension]]\nname='n'\ntype='uint'\nbits=4",
    )
    .unwrap();
    let t0 = parse_instant("2016-02-17T23:00:00Z", TimeUnit::Second).unwrap();
    let t1 = parse_instant("2016-02-19T00:30:00Z", TimeUnit::Second).unwrap();
    let boxes = s
        .plan_boxes(&[
            (0, Constraint::Range(Some(Value::Time(t0)), Some(Value::Time(t1)))),
            (1, Constraint::Eq(Value::Int(3))),
        ])
        .unwrap();
    let summary: Vec<_> = boxes
        .iter()
        .map(|b| (format_instant(b.bin_start.unwrap()), b.zbox.lo().to_vec(), b.zbox.hi().to_vec()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("2016-02-17T00:00:00Z".to_string(), vec![23 * 60, 3], vec![1439, 3]),
            ("2016-02-18T00:00:00Z".to_string(), vec![0, 3], vec![1439, 3]),
            ("2016-02-19T00:00:00Z".to_string(), vec![0, 3], vec![30, 3]),
        ]
    );
    // Open time ranges cannot be planned over bins.
    assert!(s.plan_boxes(&[]).is_err());
    // Contradictory bounds plan nothing.
    let none = s
        .plan_boxes(&[(0, Constraint::Eq(Value::Time(t0))), (1, Constraint::Range(Some(Value::Int(20)), None))])
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn hashed_dimensions_refuse_ranges() {
    let s = Schema::from_toml("[[dimension]]\nname='r'\ntype='hash'\nbits=8").unwrap();
    let e = s.plan_boxes(&[(0, Constraint::Range(Some(Value::Str("a")), Some(Value::Str("b"))))]).unwrap_err();
    assert_eq!(e.error, EncodeError::EqualityOnly);
    assert_eq!(s.plan_boxes(&[(0, Constraint::Eq(Value::Str("a")))]).unwrap().len(), 1);
}

proptest! {
    #[test]
    fn ints_preserve_order(a in any::<i32>(), b in any::<i32>(), bits in 33u32..=128) {
        let d = Dimension { name: "i".into(), bits, encoding: Encoding::Int };
        let (ea, eb) = (d.encode(&Value::Int(a as i128)).unwrap(), d.encode(&Value::Int(b as i128)).unwrap());
        prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
    }

    #[test]
    fn floats_preserve_order(a in any::<f64>(), b in any::<f64>(), bits in 1u32..=64) {
        prop_assume!(!a.is_nan() && !b.is_nan());
        let d = Dimension { name: "f".into(), bits, encoding: Encoding::F64 };
        let (ea, eb) = (d.encode(&Value::Float(a)).unwrap(), d.encode(&Value::Float(b)).unwrap());
        if a < b { prop_assert!(ea <= eb); }
        if bits == 64 { prop_assert_eq!(a.partial_cmp(&b).unwrap(), ea.cmp(&eb)); }
    }

    #[test]
    fn f32_preserves_order(a in any::<f32>(), b in any::<f32>()) {
        prop_assume!(!a.is_nan() && !b.is_nan());
        let d = Dimension { name: "f".into(), bits: 32, encoding: Encoding::F32 };
        let (ea, eb) = (d.encode(&Value::Float(a as f64)).unwrap(), d.encode(&Value::Float(b as f64)).unwrap());
        prop_assert_eq!(a.partial_cmp(&b).unwrap(), ea.cmp(&eb));
    }

    #[test]
    fn strings_preserve_order(a in "\\PC{0,12}", b in "\\PC{0,12}", bytes in 1u32..=16) {
        let d = Dimension { name: "s".into(), bits: bytes * 8, encoding: Encoding::FixedStr { bytes } };
        let (ea, eb) = (d.encode(&Value::Str(&a)).unwrap(), d.encode(&Value::Str(&b)).unwrap());
        if a.as_bytes() < b.as_bytes() { prop_assert!(ea <= eb); }
        if a.len() <= bytes as usize && b.len() <= bytes as usize && !a.contains('\0') && !b.contains('\0') {
            prop_assert_eq!(a.as_bytes().cmp(b.as_bytes()), ea.cmp(&eb));
        }
    }

    #[test]
    fn scaled_preserves_order(a in -100.0f64..100.0, b in -100.0f64..100.0, bits in 1u32..=60) {
        let d = Dimension { name: "x".into(), bits, encoding: Encoding::scaled(-100.0, 100.0, bits) };
        let (ea, eb) = (d.encode(&Value::Float(a)).unwrap(), d.encode(&Value::Float(b)).unwrap());
        if a < b { prop_assert!(ea <= eb); }
        prop_assert!(ea <= dim_max(bits));
    }

    #[test]
    fn timestamps_preserve_order_within_a_bin(a in 0i64..86_400_000, b in 0i64..86_400_000) {
        let te = TimeEncoding { unit: TimeUnit::Millisecond, bin: Some(TimeBin::Day), origin: 0, epoch_unit: TimeUnit::Second };
        let d = Dimension { name: "t".into(), bits: 27, encoding: Encoding::Timestamp(te) };
        let base = 1_455_667_200_000; // a midnight
        let (ea, eb) = (d.encode(&Value::Time(base + a)).unwrap(), d.encode(&Value::Time(base + b)).unwrap());
        prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
    }
}
