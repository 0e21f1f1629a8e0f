//! Random declared schemas, end to end: for each seed, a schema (JSON with
//! nested paths and array indexes, or CSV; every field type; defaults and
//! optional fields; string, hash, integer and enum dimensions, some only
//! stored; count with and without `where`, sum, min, max, distinct), events
//! drawn for it, and a few records that break it. The records go through
//! the real pipeline into SQLite; `gather check` must match the brute-force
//! truth built from the drawn values (`Truth::add_event`), never from
//! decoding, in every rollup, day and dimension group; every broken record
//! must be dead-lettered.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::borrow::Cow;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_model::schema::value::format_units;
use zigzag_model::schema::FieldValue;
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_sqlite::SqliteTable;
use zigzag_tests::VecSource;

/// 2026-11-20T00:00:00Z.
const T0: i64 = 1_795_132_800_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Str,
    Enum,
    Int,
    Dec(u32),
    Bool,
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    kind: Kind,
    /// JSON path tokens (CSV: unused).
    path: Vec<String>,
    /// Absent in some events (not a dimension).
    optional: bool,
    /// A declared default (strings only), taken when absent.
    default: Option<&'static str>,
}

const WORDS: [&str; 6] = ["alpha", "b", "ünï", "x,y", "quote\"d", "zeta-long-value"];
const ENUM: [&str; 3] = ["view", "click", "buy"];

struct Schema {
    csv: bool,
    time_format: &'static str,
    fields: Vec<Field>,
    toml: String,
}

fn schema(rng: &mut ChaCha8Rng) -> Schema {
    let csv = rng.gen_bool(0.3);
    let time_format = ["epoch_ms", "epoch_s", "rfc3339"][rng.gen_range(0..3)];
    let n = rng.gen_range(3..=6);
    let mut fields = Vec::new();
    for i in 0..n {
        let kind = match (i, rng.gen_range(0..6)) {
            (0, _) => Kind::Enum, // a field for `where`
            (1, _) => Kind::Int,  // an integer dimension
            (_, 0) => Kind::Str,
            (_, 1) => Kind::Enum,
            (_, 2) => Kind::Int,
            (_, 3) | (_, 4) => Kind::Dec(rng.gen_range(0..=4)),
            _ => Kind::Bool,
        };
        let depth = rng.gen_range(0..3);
        let mut path: Vec<String> = (0..depth).map(|d| format!("g{}", rng.gen_range(0..2) + d * 2)).collect();
        if depth > 0 && rng.gen_bool(0.3) {
            path.push(rng.gen_range(0..3).to_string()); // an array index
        }
        path.push(format!("f{i}"));
        let optional = i >= 2 && rng.gen_bool(0.3);
        let default = (optional && kind == Kind::Str && rng.gen_bool(0.5)).then_some("dflt");
        fields.push(Field { name: format!("f{i}"), kind, path, optional, default });
    }
    let mut t = String::from("rollups = [\"minute\", \"hour\", \"day\"]\n[input]\ntime = \"at\"\n");
    if csv {
        let cols: Vec<String> =
            std::iter::once("at".to_string()).chain(fields.iter().map(|f| f.name.clone())).collect();
        t += &format!("format = \"csv\"\ncolumns = {cols:?}\n");
    }
    t += &format!("[[field]]\nname = \"at\"\ntype = \"timestamp\"\nformat = \"{time_format}\"\n");
    if !csv {
        t += "path = \"/meta/at\"\n";
    }
    for f in &fields {
        t += &format!("[[field]]\nname = \"{}\"\n", f.name);
        if !csv {
            t += &format!("path = \"/{}\"\n", f.path.join("/"));
        }
        t += match f.kind {
            Kind::Str => "type = \"string\"\nmax_bytes = 32\n".to_string(),
            Kind::Enum => format!("type = \"string\"\nvalues = {ENUM:?}\n"),
            Kind::Int => "type = \"integer\"\nmin = -1000\nmax = 1000\n".to_string(),
            Kind::Dec(scale) => format!("type = \"decimal\"\nscale = {scale}\n"),
            Kind::Bool => "type = \"boolean\"\n".to_string(),
        }
        .as_str();
        match (f.optional, f.default) {
            (_, Some(d)) => t += &format!("default = \"{d}\"\n"),
            (true, None) => t += "optional = true\n",
            _ => {}
        }
    }
    // Dimensions: f0 as enum, f1 as integer, and one more if there is a
    // required or defaulted field for it.
    t += "[[dimension]]\nfield = \"f0\"\ntype = \"enum\"\n";
    t += &format!("[[dimension]]\nfield = \"f1\"\ntype = \"integer\"\nindexed = {}\n", rng.gen_bool(0.7));
    if let Some(f) = fields[2..].iter().find(|f| !f.optional || f.default.is_some()) {
        let (ty, width) = match f.kind {
            Kind::Str | Kind::Enum if rng.gen_bool(0.5) => ("string", format!("bytes = {}", rng.gen_range(1..=6))),
            _ => ("hash", format!("bits = {}", rng.gen_range(4..=20))),
        };
        t += &format!(
            "[[dimension]]\nfield = \"{}\"\ntype = \"{ty}\"\n{width}\nindexed = {}\n",
            f.name,
            rng.gen_bool(0.7)
        );
    }
    t += "[[measure]]\nname = \"events\"\ntype = \"count\"\n";
    t += "[[measure]]\nname = \"clicks\"\ntype = \"count\"\nwhere = \"f0 = click\"\n";
    for f in fields.iter().filter(|f| matches!(f.kind, Kind::Int | Kind::Dec(_))) {
        for kind in ["sum", "min", "max"] {
            t += &format!("[[measure]]\nname = \"{kind}_{}\"\ntype = \"{kind}\"\nfield = \"{}\"\n", f.name, f.name);
        }
    }
    let distinct = &fields[rng.gen_range(0..fields.len())].name;
    t += &format!(
        "[[measure]]\nname = \"distinct_{distinct}\"\ntype = \"distinct\"\nfield = \"{distinct}\"\nprecision = 8\n"
    );
    t += "[flush]\ninterval_ms = 50\nmax_keys = 300\n";
    Schema { csv, time_format, fields, toml: t }
}

/// One drawn value: its typed form (for the truth) and how a record writes it.
fn draw(rng: &mut ChaCha8Rng, f: &Field) -> Option<(FieldValue<'static>, String)> {
    if f.optional && rng.gen_bool(0.25) {
        return None;
    }
    let s = |x: &str| FieldValue::Str(Cow::Owned(x.to_string()));
    Some(match f.kind {
        Kind::Str => {
            let w = WORDS[rng.gen_range(0..WORDS.len())];
            (s(w), w.to_string())
        }
        Kind::Enum => {
            let w = ENUM[rng.gen_range(0..ENUM.len())];
            (s(w), w.to_string())
        }
        Kind::Int => {
            let v = rng.gen_range(-1000..=1000);
            (FieldValue::Int(v), v.to_string())
        }
        Kind::Dec(scale) => {
            let v = rng.gen_range(-10_i64.pow(scale + 3)..10_i64.pow(scale + 3));
            (FieldValue::Dec(v), format_units(v as i128, scale))
        }
        Kind::Bool => {
            let b = rng.gen_bool(0.5);
            (FieldValue::Bool(b), b.to_string())
        }
    })
}

/// JSON text of nested objects/arrays built from (path, raw value) pairs.
enum Node {
    Obj(Vec<(String, Node)>),
    Arr(Vec<Node>),
    Raw(String),
}

fn insert(node: &mut Node, path: &[String], raw: String) {
    let Some((head, rest)) = path.split_first() else { return };
    let next_is_index = rest.first().is_some_and(|t| t.parse::<usize>().is_ok());
    let fresh = || if next_is_index { Node::Arr(Vec::new()) } else { Node::Obj(Vec::new()) };
    let child = match node {
        Node::Obj(entries) => {
            if !entries.iter().any(|(k, _)| k == head) {
                entries.push((head.clone(), fresh()));
            }
            &mut entries.iter_mut().find(|(k, _)| k == head).expect("inserted").1
        }
        Node::Arr(items) => {
            let i: usize = head.parse().expect("an index");
            while items.len() <= i {
                items.push(Node::Raw("null".into()));
            }
            if matches!(items[i], Node::Raw(_)) {
                items[i] = fresh();
            }
            &mut items[i]
        }
        Node::Raw(_) => return,
    };
    if rest.is_empty() {
        *child = Node::Raw(raw);
    } else {
        insert(child, rest, raw);
    }
}

fn render(node: &Node) -> String {
    match node {
        Node::Raw(r) => r.clone(),
        Node::Arr(items) => format!("[{}]", items.iter().map(render).collect::<Vec<_>>().join(",")),
        Node::Obj(entries) => {
            let body: Vec<String> =
                entries.iter().map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), render(v))).collect();
            format!("{{{}}}", body.join(","))
        }
    }
}

fn csv_cell(text: &str) -> String {
    if text.contains([',', '"']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn time_text(format: &str, ms: i64) -> String {
    match format {
        "epoch_ms" => ms.to_string(),
        "epoch_s" => format_units(ms as i128, 3),
        _ => chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339(),
    }
}

/// A record and, when valid, its typed values in field order (time first).
fn record(rng: &mut ChaCha8Rng, s: &Schema) -> (Vec<u8>, Option<Vec<FieldValue<'static>>>) {
    let ms = T0 + rng.gen_range(0..2 * 86_400_000);
    let drawn: Vec<Option<(FieldValue<'static>, String)>> = s.fields.iter().map(|f| draw(rng, f)).collect();
    // One record in 20 breaks its schema: an integer field holds a word.
    let broken = rng.gen_ratio(1, 20);
    let text_of = |i: usize, d: &Option<(FieldValue<'static>, String)>| -> Option<String> {
        let (_, text) = d.as_ref()?;
        if broken && i == 1 {
            return Some(if s.csv { "oops".into() } else { "\"oops\"".into() });
        }
        Some(match (s.csv, s.fields[i].kind) {
            (true, _) => csv_cell(text),
            (false, Kind::Str | Kind::Enum) => serde_json::to_string(text).unwrap(),
            (false, _) => text.clone(),
        })
    };
    let bytes = if s.csv {
        let mut cells = vec![time_text(s.time_format, ms)];
        cells.extend(drawn.iter().enumerate().map(|(i, d)| text_of(i, d).unwrap_or_default()));
        cells.join(",")
    } else {
        let mut root = Node::Obj(Vec::new());
        let t = time_text(s.time_format, ms);
        let t = if s.time_format == "rfc3339" { serde_json::to_string(&t).unwrap() } else { t };
        insert(&mut root, &["meta".into(), "at".into()], t);
        for (i, d) in drawn.iter().enumerate() {
            if let Some(text) = text_of(i, d) {
                insert(&mut root, &s.fields[i].path, text);
            }
        }
        render(&root)
    };
    let values = (!broken).then(|| {
        let mut v = vec![FieldValue::Time(ms)];
        for (f, d) in s.fields.iter().zip(drawn) {
            v.push(match (d, f.default) {
                (Some((value, _)), _) => value,
                (None, Some(dflt)) => FieldValue::Str(Cow::Owned(dflt.into())),
                (None, None) => FieldValue::Absent,
            });
        }
        v
    });
    (bytes.into_bytes(), values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schemas_and_events_match_brute_force_through_the_pipeline() {
    for seed in 0..24u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = schema(&mut rng);
        let config = Config::from_toml(&s.toml).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", s.toml));
        let (set, keys, fields) =
            (config.measure_set().unwrap(), KeyModel::new(&config).unwrap(), config.typed_fields().unwrap());
        let mut truth = Truth::default();
        let mut shards = vec![Vec::new(), Vec::new()];
        for i in 0..600 {
            let (bytes, values) = record(&mut rng, &s);
            truth.records += 1;
            match values {
                Some(v) => truth.add_event(
                    &set,
                    &keys,
                    &fields,
                    match v[0] {
                        FieldValue::Time(t) => t,
                        _ => unreachable!("time first"),
                    },
                    &v,
                ),
                None => truth.malformed += 1,
            }
            shards[i % 2].push(bytes);
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("z.db");
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let source = Arc::new(VecSource::new(shards.into_iter().map(Arc::new).collect()));
        let opts = PipelineOptions {
            batch_size: 50,
            ..PipelineOptions::new(config.clone(), "s", "w", dir.path().join("dead.jsonl"))
        };
        let pipeline = Arc::new(Pipeline::new(source, aggregates.clone(), leases, opts).unwrap());
        let summary = pipeline.run(CancellationToken::new()).await.unwrap();
        assert_eq!(summary.rejected, truth.malformed, "seed {seed}: every broken record dead-lettered\n{}", s.toml);
        let report = check::check(&*aggregates, &keys, &truth, 0, &ExecOptions::default()).await.unwrap();
        assert_eq!(report.mismatches(), 0, "seed {seed}:\n{}\n{}", s.toml, check::render(&report));
        let dims = truth.by.len();
        assert!(dims >= 2, "seed {seed}: groups checked for every dimension");
    }
}
