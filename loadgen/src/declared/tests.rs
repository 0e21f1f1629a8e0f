use super::traffic_file::TrafficFile;
use super::*;
use std::collections::{BTreeMap, HashMap};
use zigzag_ingest::decode::{DecodeLimits, Decoder};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/schemas");

fn example(name: &str) -> Config {
    let text = std::fs::read_to_string(format!("{EXAMPLES}/{name}.toml")).expect("example schema");
    Config::from_toml(&text).expect("valid example")
}

fn example_traffic(name: &str) -> TrafficFile {
    let text = std::fs::read_to_string(format!("{EXAMPLES}/{name}.traffic.toml")).expect("example traffic");
    TrafficFile::from_toml(&text).expect("valid traffic")
}

fn gen_cfg(records: u64, malformed: f64) -> GenConfig {
    GenConfig { records, shards: 2, malformed_fraction: malformed, ..Default::default() }
}

/// Every type and time format, nested paths with array indexes (and digit
/// tokens beside keys, which make an object), defaults, optional fields,
/// and a CSV layout with an undeclared column.
fn schemas() -> Vec<(&'static str, Config, TrafficFile)> {
    let json = r#"
        [input]
        time = "when"
        [[field]]
        name = "when"
        path = "/meta/0/t"
        type = "timestamp"
        format = "epoch_ns"
        [[field]]
        name = "kind"
        path = "/meta/1/kind"
        type = "string"
        values = ["a", "b", "c"]
        [[field]]
        name = "n"
        path = "/m/n"
        type = "integer"
        min = -50
        max = 50
        [[field]]
        name = "price"
        path = "/m/p"
        type = "decimal"
        scale = 4
        min = "-10"
        optional = true
        [[field]]
        name = "ok"
        type = "boolean"
        default = "false"
        [[field]]
        name = "seen"
        type = "timestamp"
        format = "rfc3339"
        optional = true
        [[field]]
        name = "who"
        path = "/a~1b/who"
        type = "string"
        max_bytes = 3
        default = "-"
        [[field]]
        name = "note"
        path = "/meta/note"
        type = "string"
        optional = true
        [[dimension]]
        field = "kind"
        type = "enum"
        [[measure]]
        name = "events"
        type = "count"
    "#;
    let csv = r#"
        [input]
        format = "csv"
        columns = ["at", "skip", "word", "flag", "amount", "later"]
        time = "at"
        [[field]]
        name = "at"
        type = "timestamp"
        format = "%Y-%m-%dT%H:%M:%S%.3f%z"
        [[field]]
        name = "word"
        type = "string"
        max_bytes = 12
        [[field]]
        name = "flag"
        type = "boolean"
        [[field]]
        name = "amount"
        type = "decimal"
        scale = 2
        optional = true
        [[field]]
        name = "later"
        type = "timestamp"
        format = "epoch_s"
        optional = true
        [[dimension]]
        field = "word"
        bytes = 4
        [[measure]]
        name = "events"
        type = "count"
    "#;
    let minutes = r#"
        [input]
        format = "csv"
        columns = ["day", "hits"]
        time = "day"
        [[field]]
        name = "day"
        type = "timestamp"
        format = "%Y-%m-%d %H:%M"
        [[field]]
        name = "hits"
        type = "integer"
        [[dimension]]
        field = "hits"
        type = "hash"
        bits = 8
        [[measure]]
        name = "events"
        type = "count"
    "#;
    let no_traffic = TrafficFile::default;
    vec![
        ("ad_server", example("ad_server"), example_traffic("ad_server")),
        ("ad_server, default traffic", example("ad_server"), no_traffic()),
        ("access_log", example("access_log"), example_traffic("access_log")),
        ("access_log, default traffic", example("access_log"), no_traffic()),
        ("shipped fields", Config::default(), no_traffic()),
        ("json, every type", Config::from_toml(json).expect("json schema"), no_traffic()),
        ("csv, every type", Config::from_toml(csv).expect("csv schema"), no_traffic()),
        ("csv, minutes", Config::from_toml(minutes).expect("minutes schema"), no_traffic()),
    ]
}

#[test]
fn valid_records_decode_to_their_drawn_values_and_malformed_ones_are_refused() {
    for (name, config, traffic) in schemas() {
        let gen =
            SchemaGenerator::new(gen_cfg(3_000, 0.2), &config, &traffic).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoder = Decoder::new(&config, DecodeLimits::default()).expect("decoder");
        let (mut buf, mut again) = (Vec::new(), Vec::new());
        let mut defects: BTreeMap<&str, u32> = BTreeMap::new();
        let mut valid = 0;
        for shard in 0..2 {
            for seq in 1..=gen.shard_len(shard) {
                let drawn = gen.draw(shard, seq, &mut buf);
                assert_eq!(gen.draw(shard, seq, &mut again), drawn, "{name}: deterministic");
                assert_eq!(buf, again, "{name}: the same bytes");
                let text = String::from_utf8_lossy(&buf);
                match (drawn, decoder.decode(&buf)) {
                    (Drawn::Valid(ev), Ok(decoded)) => {
                        valid += 1;
                        assert_eq!(decoded.ts_ms, ev.ts_ms, "{name}: {text}");
                        assert_eq!(decoded.values.to_vec(), ev.values, "{name}: {text}");
                    }
                    (Drawn::Malformed(defect), Err(_)) => *defects.entry(defect).or_default() += 1,
                    (drawn, decoded) => panic!("{name}: generator says {drawn:?}, decoder says {decoded:?}: {text}"),
                }
            }
        }
        let bad: u32 = defects.values().sum();
        assert_eq!(valid + bad as u64, 3_000);
        assert!((450..750).contains(&bad), "{name}: {bad} malformed of 3000 at 20 %");
        let kinds = gen.defects_possible();
        assert_eq!(defects.keys().copied().collect::<Vec<_>>(), kinds, "{name}: every possible defect occurs");
    }
}

/// The share of each value of `field` over valid records.
fn shares(gen: &SchemaGenerator, field: usize, records: u64) -> HashMap<String, f64> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut buf = Vec::new();
    let mut n = 0;
    for shard in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(shard) {
            if let Drawn::Valid(ev) = gen.draw(shard, seq, &mut buf) {
                *counts
                    .entry(zigzag_model::schema::value::display(&gen.fields()[field], &ev.values[field]))
                    .or_default() += 1;
                n += 1;
            }
        }
    }
    assert_eq!(n, records);
    counts.into_iter().map(|(k, c)| (k, c as f64 / n as f64)).collect()
}

fn one_field(field: &str, traffic: &str) -> SchemaGenerator {
    let config = Config::from_toml(&format!(
        "[input]\ntime = \"at\"\n[[field]]\nname = \"at\"\ntype = \"timestamp\"\n{field}\n\
         [[dimension]]\nfield = \"v\"\ntype = \"hash\"\nbits = 8\n[[measure]]\nname = \"n\"\ntype = \"count\"\n"
    ))
    .unwrap_or_else(|e| panic!("{field}: {e}"));
    let traffic = TrafficFile::from_toml(traffic).expect("traffic");
    SchemaGenerator::new(gen_cfg(20_000, 0.0), &config, &traffic).unwrap_or_else(|e| panic!("{traffic:?}: {e}"))
}

#[test]
fn weights_zipf_and_absence_shape_the_values() {
    let s = shares(
        &one_field(
            "[[field]]\nname = \"v\"\ntype = \"string\"\nvalues = [\"x\", \"y\", \"z\"]",
            "[field.v]\nweights = [70, 20, 10]",
        ),
        1,
        20_000,
    );
    for (v, want) in [("x", 0.7), ("y", 0.2), ("z", 0.1)] {
        assert!((s[v] - want).abs() < 0.015, "{v}: {} vs {want}", s[v]);
    }
    // Zipf(1.0) over 100 names: rank 1 holds 1/H(100) = 19.3 % of draws,
    // rank 2 half as much.
    let s = shares(
        &one_field("[[field]]\nname = \"v\"\ntype = \"string\"", "[field.v]\ncardinality = 100\nzipf = 1.0"),
        1,
        20_000,
    );
    assert_eq!(s.len(), 100, "every name drawn");
    let (first, second) = (s["v-0"], s["v-1"]);
    assert!((first - 0.193).abs() < 0.015 && (second - 0.0965).abs() < 0.01, "{first} {second}");
    // Absent 40 % of the time, the default then.
    let s = shares(
        &one_field(
            "[[field]]\nname = \"v\"\ntype = \"string\"\ndefault = \"none\"",
            "[field.v]\nabsent = 0.4\nvalues = [\"a\"]",
        ),
        1,
        20_000,
    );
    assert!((s["none"] - 0.4).abs() < 0.015 && (s["a"] - 0.6).abs() < 0.015, "{s:?}");
    let s = shares(&one_field("[[field]]\nname = \"v\"\ntype = \"boolean\"", "[field.v]\np_true = 0.25"), 1, 20_000);
    assert!((s["true"] - 0.25).abs() < 0.015, "{s:?}");
    let s = shares(
        &one_field(
            "[[field]]\nname = \"v\"\ntype = \"integer\"",
            "[field.v]\nvalues = [200, 404, 500]\nweights = [8, 1, 1]",
        ),
        1,
        20_000,
    );
    assert!((s["200"] - 0.8).abs() < 0.015 && s.len() == 3, "{s:?}");
}

#[test]
fn a_field_with_when_is_present_only_where_its_condition_holds() {
    let config = example("ad_server");
    let gen = SchemaGenerator::new(gen_cfg(4_000, 0.0), &config, &example_traffic("ad_server")).unwrap();
    let (event, price) = (1, 5);
    let mut buf = Vec::new();
    let (mut priced, mut clicks) = (0, 0);
    for seq in 1..=gen.shard_len(0) {
        let Drawn::Valid(ev) = gen.draw(0, seq, &mut buf) else { panic!("valid") };
        let paid = matches!(&ev.values[event], FieldValue::Str(e) if e != "view");
        clicks += u32::from(paid);
        let has_price = ev.values[price] != FieldValue::Absent;
        assert!(!has_price || paid, "a view has no price: {}", String::from_utf8_lossy(&buf));
        priced += u32::from(has_price);
    }
    // Clicks and conversions are 10 % of 2000 records; 5 % of them lack a price.
    assert!(clicks > 120 && priced as f64 > 0.9 * clicks as f64 && priced < clicks, "{priced} of {clicks}");
}

fn mean_and_sd(gen: &SchemaGenerator) -> (f64, f64, i64, i64) {
    let mut buf = Vec::new();
    let mut xs = Vec::new();
    for seq in 1..=gen.shard_len(0) {
        if let Drawn::Valid(ev) = gen.draw(0, seq, &mut buf) {
            xs.push(ev.values[1].units().expect("a number") as f64);
        }
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
    let (lo, hi) = xs.iter().fold((i64::MAX, i64::MIN), |(l, h), &x| (l.min(x as i64), h.max(x as i64)));
    (mean, sd, lo, hi)
}

#[test]
fn numeric_distributions_have_their_moments_inside_the_bounds() {
    let field = "[[field]]\nname = \"v\"\ntype = \"decimal\"\nscale = 2\nmin = 0\nmax = 1000";
    // Units of 0.01: mean 500.00 → 50_000 units.
    let (mean, sd, lo, hi) =
        mean_and_sd(&one_field(field, "[field.v]\ndistribution = \"normal\"\nmean = 500\nsd = 50"));
    assert!((mean - 50_000.0).abs() < 150.0 && (sd - 5_000.0).abs() < 150.0, "normal: {mean} {sd}");
    assert!(lo >= 0 && hi <= 100_000);
    let (mean, _, lo, _) =
        mean_and_sd(&one_field(field, "[field.v]\ndistribution = \"exponential\"\nmean = 20\nmin = 5"));
    assert!((mean - 2_000.0).abs() < 60.0 && lo >= 500, "exponential from 5.00 with mean 20.00: {mean}, lowest {lo}");
    let (mean, _, lo, hi) = mean_and_sd(&one_field(field, "[field.v]\nmin = 1.5\nmax = 2.5"));
    assert!((mean - 200.0).abs() < 2.0 && lo == 150 && hi == 250, "uniform 1.50..=2.50: {mean} {lo} {hi}");
    // Draws beyond the bounds are clamped, never written out of range.
    let (_, _, lo, hi) = mean_and_sd(&one_field(field, "[field.v]\ndistribution = \"normal\"\nmean = 990\nsd = 100"));
    assert!(lo >= 0 && hi == 100_000, "{lo} {hi}");
}

fn sorted_draws(gen: &SchemaGenerator) -> Vec<i64> {
    let mut buf = Vec::new();
    let mut xs: Vec<i64> = (1..=gen.shard_len(0))
        .filter_map(|seq| match gen.draw(0, seq, &mut buf) {
            Drawn::Valid(ev) => ev.values[1].units(),
            _ => None,
        })
        .collect();
    xs.sort_unstable();
    xs
}

/// The shapes a quantile measure is checked on: a lognormal's median, a
/// Pareto tail, two modes, and exact zeros and negatives mixed into any.
#[test]
fn quantile_shapes_have_their_medians_tails_modes_zeros_and_negatives() {
    let field = "[[field]]\nname = \"v\"\ntype = \"integer\"\nmin = -1000000\nmax = 1000000";
    let at = |xs: &[i64], q: f64| xs[((xs.len() - 1) as f64 * q) as usize];
    let xs =
        sorted_draws(&one_field(field, "[field.v]\ndistribution = \"lognormal\"\nmean = 1000\nsigma = 1\nmin = 1"));
    assert!((at(&xs, 0.5) - 1000).abs() < 60, "lognormal median 1000: {}", at(&xs, 0.5));
    // exp(2.326 sigma): the 99th percentile is ~10x the median.
    assert!((8_000..13_000).contains(&at(&xs, 0.99)), "lognormal p99: {}", at(&xs, 0.99));
    let xs = sorted_draws(&one_field(field, "[field.v]\ndistribution = \"pareto\"\nalpha = 1.2\nmin = 10"));
    assert!(xs[0] >= 10, "the tail starts at min: {}", xs[0]);
    // A Pareto's q-quantile is min / (1 - q)^(1 / alpha): p99 = 10 x 46.4,
    // 36x the median (10 x 1.78).
    assert!((380..600).contains(&at(&xs, 0.99)), "pareto p99: {}", at(&xs, 0.99));
    assert!((16..20).contains(&at(&xs, 0.5)), "pareto p50: {}", at(&xs, 0.5));
    let xs = sorted_draws(&one_field(
        field,
        "[field.v]\ndistribution = \"bimodal\"\nmodes = [100, 5000]\nsd = 10\nweights = [3, 1]\nmin = 0\nmax = 10000",
    ));
    let low = xs.iter().filter(|&&x| (50..150).contains(&x)).count() as f64 / xs.len() as f64;
    let high = xs.iter().filter(|&&x| (4_950..5_050).contains(&x)).count() as f64 / xs.len() as f64;
    assert!((low - 0.75).abs() < 0.015 && (high - 0.25).abs() < 0.015, "modes 3:1: {low} {high}");
    let xs = sorted_draws(&one_field(
        field,
        "[field.v]\ndistribution = \"normal\"\nmean = 500\nsd = 50\nmin = 1\nzeros = 0.1\nnegative = 0.2",
    ));
    let share = |f: &dyn Fn(i64) -> bool| xs.iter().filter(|&&x| f(x)).count() as f64 / xs.len() as f64;
    assert!((share(&|x| x == 0) - 0.1).abs() < 0.01, "zeros: {}", share(&|x| x == 0));
    // Of the 90 % not zeroed, a fifth is negative.
    assert!((share(&|x| x < 0) - 0.18).abs() < 0.015, "negatives: {}", share(&|x| x < 0));
}

#[test]
fn traffic_files_that_cannot_be_honoured_are_refused_with_the_field_named() {
    let config = example("ad_server");
    let refused = |traffic: &str| -> String {
        let t = TrafficFile::from_toml(traffic).map_err(|e| e.to_string());
        match t.and_then(|t| SchemaGenerator::new(gen_cfg(10, 0.0), &config, &t).map_err(|e| e.to_string())) {
            Ok(_) => panic!("{traffic} was accepted"),
            Err(e) => e,
        }
    };
    assert!(refused("[field.nope]\nabsent = 0.1").contains("`nope`"));
    assert!(refused("[field.event]\np_true = 0.5").contains("`p_true` does not apply to a string"));
    assert!(refused("[field.event]\nabsent = 0.1").contains("required field"));
    assert!(refused("[field.country]\ncardinality = 5000").contains("do not fit in max_bytes = 2"));
    assert!(refused("[field.campaign_id]\nvalues = [-1]").contains("declared bounds"));
    assert!(refused("[field.price]\ndistribution = \"gamma\"").contains("gamma"));
    assert!(refused("[field.price]\nmean = 3").contains("`mean` applies to distribution normal or exponential"));
    assert!(refused("[field.price]\ndistribution = \"bimodal\"").contains("needs `modes = [low, high]`"));
    assert!(refused("[field.price]\nsigma = 2").contains("`sigma` applies to distribution lognormal"));
    assert!(refused("[field.price]\nzeros = 2").contains("`zeros` = 2 is not a fraction"));
    assert!(refused("[field.event]\nweights = [1, 2]").contains("2 weights for 3 values"));
    assert!(refused("[field.event]\nbogus = 1").contains("bogus"));
    assert!(refused("[field.price]\nmin = 0.5").contains("price"), "integers take whole numbers");
    assert!(refused("[field.event]\nwhen = \"os = ios\"").contains("required field"));
    assert!(refused("[field.country]\nwhen = \"os = ios\"").contains("declared after this one"));
    assert!(refused("[field.price]\nwhen = \"event = buy\"").contains("buy"), "typed like a where");
}

fn timed(format: &str) -> Result<SchemaGenerator, String> {
    let config = Config::from_toml(&format!(
        "[input]\ntime = \"at\"\n[[field]]\nname = \"at\"\ntype = \"timestamp\"\nformat = \"{format}\"\n\
         [[field]]\nname = \"v\"\ntype = \"string\"\n[[dimension]]\nfield = \"v\"\ntype = \"hash\"\nbits = 8\n\
         [[measure]]\nname = \"n\"\ntype = \"count\"\n"
    ))
    .expect("schema");
    SchemaGenerator::new(gen_cfg(100, 0.0), &config, &TrafficFile::default()).map_err(|e| e.to_string())
}

#[test]
fn patterns_are_written_at_their_resolution() {
    let mut buf = Vec::new();
    // Minutes only: the truth is floored to the minute, as readers read it.
    let minutes = timed("%Y-%m-%d %H:%M").expect("generator");
    for seq in 1..=50 {
        let Drawn::Valid(ev) = minutes.draw(0, seq, &mut buf) else { panic!("valid") };
        assert_eq!(ev.ts_ms % 60_000, 0, "{}", String::from_utf8_lossy(&buf));
    }
    let millis = timed("%Y-%m-%dT%H:%M:%S%.3f").expect("generator");
    let sub_second =
        (1..=50).filter(|&seq| matches!(millis.draw(0, seq, &mut buf), Drawn::Valid(ev) if ev.ts_ms % 1000 != 0));
    assert!(sub_second.count() > 40, "milliseconds kept");
    // A pattern that cannot be read back is refused up front.
    let err = timed("%H:%M").unwrap_err();
    assert!(err.contains("does not read back"), "{err}");
}
