use super::*;
use crate::schema::Format;

#[test]
fn empty_file_is_the_default() {
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
    Config::default().validate().unwrap();
}

#[test]
fn errors_name_the_bad_part() {
    let e = Config::from_toml("rollups = [\"week\"]").unwrap_err().to_string();
    assert!(e.contains("week"), "{e}");
    let e = Config::from_toml("[[dimension]]\nfield = \"url\"\nbytes = 40").unwrap_err().to_string();
    assert!(e.contains("url") && e.contains("1..=16"), "{e}");
    let e = Config::from_toml("[scatter]\nprefixes = 0").unwrap_err().to_string();
    assert!(e.contains("prefixes"), "{e}");
    let e = Config::from_toml("[flush]\nintervall_ms = 5").unwrap_err().to_string();
    assert!(e.contains("intervall_ms"), "{e}");
    let e = Config::from_toml("[[dimension]]\nfield = \"city\"\nbytes = 4").unwrap_err().to_string();
    assert!(e.contains("city") && e.contains("no field"), "{e}");
    let e = Config::from_toml("[[dimension]]\nfield = \"cost\"\ntype = \"hash\"\nbits = 8").unwrap_err().to_string();
    assert!(e.contains("cost") && e.contains("optional"), "{e}");
}

#[test]
fn declared_fields_need_declared_dimensions_and_measures() {
    let fields = "[input]\ntime = \"at\"\n[[field]]\nname = \"at\"\ntype = \"timestamp\"\n[[field]]\nname = \"cc\"\ntype = \"string\"\n";
    let e = Config::from_toml(fields).unwrap_err().to_string();
    assert!(e.contains("[[dimension]]"), "{e}");
    let dims = "[[dimension]]\nfield = \"cc\"\nbytes = 2\n";
    let e = Config::from_toml(&format!("{fields}{dims}")).unwrap_err().to_string();
    assert!(e.contains("[[measure]]"), "{e}");
    let measures = "[[measure]]\nname = \"events\"\ntype = \"count\"\n";
    let c = Config::from_toml(&format!("{fields}{dims}{measures}")).unwrap();
    assert!(c.ratios.is_empty(), "the shipped ctr is not for these measures");
    assert_eq!(c.input.format, Format::Json);
    let bad = "[[measure]]\nname = \"spend\"\ntype = \"sum\"\nfield = \"cc\"\n";
    let e = Config::from_toml(&format!("{fields}{dims}{bad}")).unwrap_err().to_string();
    assert!(e.contains("spend") && e.contains("integer or decimal"), "{e}");
}

#[test]
fn a_csv_measure_cannot_count_the_empty_text_of_a_field_without_a_default() {
    let schema = |format: &str, kind_default: &str| {
        let columns = if format == "csv" { "columns = [\"at\", \"cc\", \"kind\"]\n" } else { "" };
        format!(
            "[input]\nformat = \"{format}\"\n{columns}time = \"at\"\n\
             [[field]]\nname = \"at\"\ntype = \"timestamp\"\n[[field]]\nname = \"cc\"\ntype = \"string\"\n\
             [[field]]\nname = \"kind\"\ntype = \"string\"\noptional = true\n{kind_default}\
             [[dimension]]\nfield = \"cc\"\nbytes = 2\n"
        )
    };
    let count = |cond: &str| format!("[[measure]]\nname = \"n\"\ntype = \"count\"\nwhere = '{cond}'\n");
    for cond in [r#"kind = """#, r#"cc = DE and kind in a, """#] {
        let e = Config::from_toml(&(schema("csv", "") + &count(cond))).unwrap_err().to_string();
        assert!(e.contains("measure n") && e.contains(r#"declare `default = ""` on kind"#), "{cond}: {e}");
        Config::from_toml(&(schema("json", "") + &count(cond))).expect("JSON can hold the empty text");
        Config::from_toml(&(schema("csv", "default = \"\"\n") + &count(cond))).expect("an empty cell defaults to it");
    }
    Config::from_toml(&(schema("csv", "") + &count(r#"kind != """#))).expect("!= \"\" matches every cell");
}

#[test]
fn layout_digest_ignores_flush_timing() {
    let mut c = Config::default();
    let d = c.layout_digest();
    c.flush.interval_ms = 5;
    assert_eq!(c.layout_digest(), d);
    c.scatter.prefixes = 8;
    assert_ne!(c.layout_digest(), d);
    let mut c = Config::default();
    c.fields[2].path = Some("/ref".into());
    assert_ne!(c.layout_digest(), d, "where a field is read from decides what is written");
}

#[test]
fn the_shipped_layout_is_valid_and_keeps_no_base() {
    let c = Config::shipped();
    assert!(c.rollups.is_empty());
    let names: Vec<&str> = c.projections.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["total", "cc", "referrer_country"]);
    assert_eq!(c.measures, Config::default().measures, "every measure, in every projection");
}

/// The layouts BENCHMARKS.md measures are valid, and each writes something.
#[test]
fn the_example_layouts_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/layouts");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/layouts") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        let c = Config::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        crate::Projections::new(&c).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n >= 4, "{n} layouts");
}

#[test]
fn custom_dimensions() {
    let c = Config::from_toml(
        "rollups = [\"hour\"]\n[[dimension]]\nfield = \"url\"\ntype = \"hash\"\nbits = 20\n[scatter]\nmode = \"random\"",
    )
    .unwrap();
    assert_eq!(c.rollups, vec![Rollup::Hour]);
    assert_eq!(c.dimensions[0].kind, DimensionType::Hash);
    assert!(c.dimensions[0].indexed);
    assert_eq!(c.scatter.mode, ScatterMode::Random);
}
