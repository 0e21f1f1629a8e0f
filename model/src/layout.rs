//! The layout: the part of the configuration that decides what a flush
//! writes and where (rollups, dimensions and their encodings, measures,
//! scatter), stored with the data. The first writer records it in the
//! aggregate table; a writer with another layout is refused with what
//! differs; readers take it from the table, so they need no configuration.
//!
//! Its canonical form is JSON with fields in a fixed order (not `Debug`
//! output, which changes with the code), and its digest is the xxh3-64 of
//! that text. Version 1 (before declared schemas) is read as the shipped
//! schema with its dimensions and measures.

use crate::dimension::DimensionSpec;
use crate::measure::{MeasureSpec, RatioSpec};
use crate::projection::ProjectionSpec;
use crate::retention::Retention;
use crate::rollup::Rollup;
use crate::scatter::ScatterMode;
use crate::schema::{FieldSpec, InputSpec};
use serde::{Deserialize, Serialize};
use zigzag_core::table::{AttrValue, Item, SortedTable, TableError, UpdateOutcome, UpdateRequest};

/// The layout item's key in the aggregate table (no item partition key
/// starts with `#`).
pub const LAYOUT_PK: &str = "#layout";
pub const LAYOUT_SK: &[u8] = b"layout";
const TEXT: &str = "layout";
const DIGEST: &str = "digest";
/// The `#layout` item's digest once versions were applied
/// (`crate::versions`): its text is then no layout.
pub(crate) const VERSIONED: &str = "versioned";

/// Bumped when the meaning of a layout's fields changes.
pub const LAYOUT_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub version: u32,
    pub rollups: Vec<Rollup>,
    pub input: InputSpec,
    pub fields: Vec<FieldSpec>,
    pub dimensions: Vec<DimensionSpec>,
    pub measures: Vec<MeasureSpec>,
    pub ratios: Vec<RatioSpec>,
    pub scatter_prefixes: u32,
    pub scatter_mode: ScatterMode,
    /// Left out when there are none, so a layout without projections keeps
    /// the text and digest it had before they existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projections: Vec<ProjectionSpec>,
    /// Left out when every rollup is kept forever (the same text and digest
    /// as before retention existed).
    #[serde(default, skip_serializing_if = "Retention::is_forever")]
    pub retention: Retention,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("store: {0}")]
    Table(#[from] TableError),
    #[error("the layout item in the table is unreadable: {0}")]
    Corrupt(String),
    #[error(
        "the table was written with another layout; this configuration differs in: {}. \
         `gather layout show` prints the table's layout as a configuration file (edit only its [flush]); \
         `gather layout diff FILE` says what changing it would take, and `gather layout apply FILE` changes it",
        first_of(.0)
    )]
    Differs(Vec<String>),
    #[error(
        "this configuration is the table's layout version {mine}, but version {newest} was applied since \
         (`gather layout show` prints it as a configuration file; or start without --config to take it)"
    )]
    Superseded { mine: u32, newest: u32 },
    /// The table records versions (`crate::versions`): what a writer must
    /// match is the newest of them.
    #[error("the table records layout versions: read them with `zigzag_model::versions`")]
    Versioned,
}

/// The differences a message shows: a whole other schema differs in every
/// field, dimension and measure, and the first few say enough.
const SHOWN_DIFFERENCES: usize = 6;

fn first_of(differences: &[String]) -> String {
    let shown = differences[..differences.len().min(SHOWN_DIFFERENCES)].join("; ");
    match differences.len().saturating_sub(SHOWN_DIFFERENCES) {
        0 => shown,
        more => format!("{shown}; and {more} more"),
    }
}

impl zigzag_core::retry::Retryable for LayoutError {
    fn is_retryable(&self) -> bool {
        matches!(self, LayoutError::Table(e) if zigzag_core::retry::Retryable::is_retryable(e))
    }
}

impl Layout {
    pub fn canonical(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn digest(&self) -> String {
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(self.canonical().as_bytes()))
    }

    /// What differs from `stored`, one phrase per difference: lists
    /// (fields, dimensions, measures, ratios) entry by entry, by name.
    pub fn differences(&self, stored: &Layout) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, mine: String, theirs: String| {
            if mine != theirs {
                out.push(format!("{name} is {mine} here but {theirs} in the table"));
            }
        };
        field("version", self.version.to_string(), stored.version.to_string());
        field("rollups", json(&self.rollups), json(&stored.rollups));
        field("input", json(&self.input), json(&stored.input));
        field("scatter.prefixes", self.scatter_prefixes.to_string(), stored.scatter_prefixes.to_string());
        field("scatter.mode", self.scatter_mode.name().into(), stored.scatter_mode.name().into());
        field("retention", self.retention.describe(), stored.retention.describe());
        entries("field", &self.fields, &stored.fields, |f| &f.name, &mut out);
        entries("dimension", &self.dimensions, &stored.dimensions, |d| &d.field, &mut out);
        entries("measure", &self.measures, &stored.measures, |m| &m.name, &mut out);
        entries("ratio", &self.ratios, &stored.ratios, |r| &r.name, &mut out);
        entries("projection", &self.projections, &stored.projections, |p| &p.name, &mut out);
        out
    }

    /// A stored layout's text, of any version.
    pub fn parse(text: &str) -> Result<Layout, LayoutError> {
        let corrupt = |e: serde_json::Error| LayoutError::Corrupt(e.to_string());
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        match serde_json::from_str::<Version>(text).map_err(corrupt)?.version {
            1 => Ok(serde_json::from_str::<v1::LayoutV1>(text).map_err(corrupt)?.upgrade()),
            LAYOUT_VERSION => serde_json::from_str(text).map_err(corrupt),
            v => Err(LayoutError::Corrupt(format!("layout version {v} is newer than this build ({LAYOUT_VERSION})"))),
        }
    }
}

/// Version 1: the shipped fields, dimensions on them, measures by name.
mod v1 {
    use super::*;
    use crate::dimension::DimensionType;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct LayoutV1 {
        rollups: Vec<Rollup>,
        dimensions: Vec<DimensionV1>,
        measures: Vec<String>,
        scatter_prefixes: u32,
        scatter_mode: ScatterMode,
        #[allow(dead_code)]
        version: u32,
    }

    #[derive(Deserialize)]
    struct DimensionV1 {
        field: String,
        #[serde(rename = "type")]
        kind: DimensionType,
        bytes: Option<u32>,
        bits: Option<u32>,
    }

    impl LayoutV1 {
        /// The same items, described by a version-2 layout (the measure
        /// `cost_sum` wrote the attribute `cost`, now its name).
        pub fn upgrade(self) -> Layout {
            let names: Vec<&str> =
                self.measures.iter().map(|m| if m == "cost_sum" { "cost" } else { m.as_str() }).collect();
            let measures: Vec<MeasureSpec> =
                crate::measure::default_measures().into_iter().filter(|m| names.contains(&m.name.as_str())).collect();
            let ratios = crate::measure::default_ratios()
                .into_iter()
                .filter(|r| names.contains(&r.numerator.as_str()) && names.contains(&r.denominator.as_str()))
                .collect();
            Layout {
                version: LAYOUT_VERSION,
                rollups: self.rollups,
                input: InputSpec::default(),
                fields: crate::schema::default_fields(),
                dimensions: self
                    .dimensions
                    .into_iter()
                    .map(|d| DimensionSpec {
                        field: d.field,
                        kind: d.kind,
                        bytes: d.bytes,
                        bits: d.bits,
                        indexed: true,
                    })
                    .collect(),
                measures,
                ratios,
                scatter_prefixes: self.scatter_prefixes,
                scatter_mode: self.scatter_mode,
                projections: Vec::new(),
                retention: Retention::default(),
            }
        }
    }
}

/// A field as a difference message shows it.
fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The differences between two lists of named entries: each entry only
/// one side has, each entry declared otherwise, and, when the entries
/// agree, their order (it is part of the layout: it orders key values and
/// item attributes).
fn entries<T: Serialize + PartialEq>(
    what: &str,
    mine: &[T],
    theirs: &[T],
    name: impl Fn(&T) -> &String,
    out: &mut Vec<String>,
) {
    let before = out.len();
    for m in mine {
        match theirs.iter().find(|t| name(t) == name(m)) {
            None => out.push(format!("{what} `{}` is declared here but not in the table", name(m))),
            Some(t) if t != m => {
                out.push(format!("{what} `{}` is {} here but {} in the table", name(m), json(m), json(t)))
            }
            Some(_) => {}
        }
    }
    for t in theirs.iter().filter(|t| !mine.iter().any(|m| name(m) == name(t))) {
        out.push(format!("{what} `{}` is in the table but not declared here", name(t)));
    }
    if out.len() == before && mine != theirs {
        let order = |list: &[T]| list.iter().map(|e| name(e).as_str()).collect::<Vec<_>>().join(", ");
        out.push(format!("{what}s are in the order {} here but {} in the table", order(mine), order(theirs)));
    }
}

/// Records `layout` in the table if it has none; otherwise checks it is
/// the same. Called by every writer before its first flush.
///
/// The writer that records it on a new table writes the value catalog from
/// the table's first flush, and the item says so
/// (`value_catalog::coverage`); on a table recorded before, the first
/// writer that has the catalog says it is partial.
/// The layout an item's text holds (the `#layout` item, or a version's).
pub(crate) fn from_item(item: &Item) -> Result<Layout, LayoutError> {
    match item.attrs.get(TEXT) {
        Some(AttrValue::S(text)) => Layout::parse(text),
        other => Err(LayoutError::Corrupt(format!("no layout text ({other:?})"))),
    }
}

pub async fn ensure(table: &dyn SortedTable, layout: &Layout) -> Result<(), LayoutError> {
    use crate::value_catalog::{coverage, ON_LAYOUT};
    // Only where no layout is recorded: its text is JSON ("{..."), never
    // below "0".
    let create = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec())
        .set(TEXT, layout.canonical().as_str())
        .set(DIGEST, layout.digest().as_str())
        .set(ON_LAYOUT, coverage(true))
        .guard(TEXT, zigzag_core::table::CmpOp::Lt, "0", true);
    let item = match table.update(&create).await? {
        UpdateOutcome::Applied(_) => return Ok(()),
        UpdateOutcome::ConditionFailed(Some(item)) => item,
        UpdateOutcome::ConditionFailed(None) => return Err(LayoutError::Corrupt("refused without an item".into())),
    };
    if item.attrs.get(DIGEST) == Some(&AttrValue::S(VERSIONED.into())) {
        return Err(LayoutError::Versioned);
    }
    let differences = layout.differences(&from_item(&item)?);
    if !differences.is_empty() {
        return Err(LayoutError::Differs(differences));
    }
    if !item.attrs.contains_key(ON_LAYOUT) {
        let partial = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec()).set_if_absent(ON_LAYOUT, coverage(false));
        table.update(&partial).await?;
    }
    Ok(())
}

/// The table's layout, if a writer recorded one.
pub async fn load(table: &dyn SortedTable) -> Result<Option<Layout>, LayoutError> {
    Ok(load_item(table).await?.map(|(layout, _)| layout))
}

/// The table's layout and the item it is recorded in (which also holds
/// what the table is bound to: the lease table's epoch, `zigzag_lease`).
pub async fn load_item(table: &dyn SortedTable) -> Result<Option<(Layout, Item)>, LayoutError> {
    match table.get(LAYOUT_PK, LAYOUT_SK).await? {
        None => Ok(None),
        Some(item) => Ok(Some((from_item(&item)?, item))),
    }
}

/// `work` done on a guessed layout while the table's is read (`stored`):
/// one round trip instead of two where the guess holds. Returns what was
/// read and, when its `key` is the guess, the work's result; else the
/// caller works again on what was read. Readers plan on a cached layout
/// this way (`gather`'s reports, `gather serve`'s queries).
pub async fn speculate<S, K, T, E>(
    guess: &K,
    stored: impl std::future::Future<Output = Result<S, E>>,
    key: impl FnOnce(&S) -> &K,
    work: impl std::future::Future<Output = T>,
) -> Result<(S, Option<T>), E>
where
    K: PartialEq + ?Sized,
{
    let (stored, done) = futures::join!(stored, work);
    let stored = stored?;
    let kept = (key(&stored) == guess).then_some(done);
    Ok((stored, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use zigzag_core::table::MemoryTable;

    #[tokio::test]
    async fn speculated_work_is_kept_only_when_the_stored_layout_is_the_guess() {
        let read = |s: &'static str| async move { Ok::<_, ()>(s) };
        let (stored, kept) = speculate("a", read("a"), |s| *s, async { 42 }).await.unwrap();
        assert_eq!((stored, kept), ("a", Some(42)));
        let (stored, kept) = speculate("a", read("b"), |s| *s, async { 42 }).await.unwrap();
        assert_eq!((stored, kept), ("b", None), "another layout: the work is dropped");
        let failed = speculate("a", async { Err::<&str, _>("unreadable") }, |s| *s, async { 42 }).await;
        assert_eq!(failed, Err("unreadable"));
    }

    #[test]
    fn a_long_list_of_differences_shows_the_first_few_and_counts_the_rest() {
        let diffs = |n: usize| LayoutError::Differs((1..=n).map(|i| format!("d{i}")).collect()).to_string();
        assert!(diffs(2).contains("differs in: d1; d2. `gather layout show`"), "{}", diffs(2));
        assert!(diffs(6).contains("d5; d6. `gather layout show`"), "{}", diffs(6));
        let many = diffs(31);
        assert!(many.contains("d1; d2; d3; d4; d5; d6; and 25 more. `gather layout show`"), "{many}");
        assert!(many.contains("`gather layout diff FILE`"), "{many}");
        assert!(!many.contains("d7"), "{many}");
    }

    #[tokio::test]
    async fn the_writer_recording_a_new_tables_layout_says_the_value_catalog_is_whole_and_one_after_an_older_writer_partial(
    ) {
        async fn is_whole(t: &MemoryTable) -> bool {
            crate::value_catalog::is_whole(load_item(t).await.unwrap().map(|(_, i)| i).as_ref())
        }
        let layout = Layout::of(&Config::default());
        let new = MemoryTable::new();
        assert!(!is_whole(&new).await, "no layout: not written by ingest");
        ensure(&new, &layout).await.unwrap();
        ensure(&new, &layout).await.unwrap();
        assert!(is_whole(&new).await);
        // A table whose layout a writer without the catalog recorded.
        let old = MemoryTable::new();
        let req = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec())
            .set_if_absent(TEXT, layout.canonical().as_str())
            .set_if_absent(DIGEST, layout.digest().as_str());
        old.update(&req).await.unwrap();
        ensure(&old, &layout).await.unwrap();
        assert!(!is_whole(&old).await, "values from before are not in the catalog");
        assert_eq!(load(&old).await.unwrap(), Some(layout.clone()), "the layout is kept");
        let other = Layout::of(&Config { rollups: vec![crate::rollup::Rollup::Hour], ..Config::default() });
        assert!(matches!(ensure(&new, &other).await, Err(LayoutError::Differs(_))), "another layout is refused");
        assert_eq!(load(&new).await.unwrap(), Some(layout));
    }

    #[test]
    fn the_canonical_form_is_stable_json() {
        let l = Layout::of(&Config::default());
        let text = l.canonical();
        assert!(text.starts_with(r#"{"version":2,"rollups":["minute","hour","day"],"input":{"format":"json","columns":[],"time":"ts"},"fields":[{"name":"type","type":"string","max_bytes":16,"values":["click","impression"]},"#), "{text}");
        assert!(text.contains(r#"{"name":"clicks","type":"count","where":"type = click"}"#), "{text}");
        assert_eq!(Layout::parse(&text).unwrap(), l);
        assert_eq!(l.digest().len(), 16);
    }

    #[test]
    fn a_version_1_layout_reads_as_the_shipped_schema() {
        let v1 = r#"{"version":1,"rollups":["hour"],"dimensions":[{"field":"country","type":"string","bytes":2,"bits":null}],"measures":["clicks","impressions","cost_sum"],"scatter_prefixes":8,"scatter_mode":"hash"}"#;
        let l = Layout::parse(v1).unwrap();
        assert_eq!(l.version, LAYOUT_VERSION);
        assert_eq!(l.dimensions, vec![DimensionSpec::string("country", 2)]);
        let names: Vec<&str> = l.measures.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["clicks", "impressions", "cost"]);
        assert_eq!(l.ratios.len(), 1, "ctr: clicks and impressions are there");
        let config = l.apply(&Config::default());
        config.validate().unwrap();
        assert!(matches!(Layout::parse(r#"{"version":9}"#), Err(LayoutError::Corrupt(e)) if e.contains("newer")));
    }

    #[tokio::test]
    async fn the_first_writer_records_it_and_another_layout_is_refused_by_name() {
        let table = MemoryTable::new();
        assert_eq!(load(&table).await.unwrap(), None);
        let mine = Layout::of(&Config::default());
        ensure(&table, &mine).await.unwrap();
        ensure(&table, &mine).await.unwrap();
        assert_eq!(load(&table).await.unwrap(), Some(mine.clone()));
        let mut other = Config::default();
        other.scatter.prefixes = 8;
        other.rollups = vec![Rollup::Hour];
        let e = ensure(&table, &Layout::of(&other)).await.unwrap_err().to_string();
        assert!(e.contains("scatter.prefixes is 8 here but 16 in the table") && e.contains("rollups"), "{e}");
        assert!(!e.contains("measures"), "only what differs: {e}");
        // Lists differ entry by entry, by name.
        let table = MemoryTable::new();
        ensure(&table, &mine).await.unwrap();
        let mut other = Config::default();
        other.measures.retain(|m| m.name != "impressions");
        other.measures.iter_mut().filter(|m| m.name == "clicks").for_each(|m| m.condition = None);
        other.fields.swap(2, 3);
        let e = ensure(&table, &Layout::of(&other)).await.unwrap_err().to_string();
        assert!(e.contains("measure `impressions` is in the table but not declared here"), "{e}");
        assert!(e.contains(r#"measure `clicks` is {"name":"clicks","type":"count"} here but"#), "{e}");
        assert!(e.contains("fields are in the order type, ts, campaign, referrer"), "{e}");
        assert!(!e.contains("dimension"), "only what differs: {e}");
        let with = Config::from_toml("[[projection]]\nname = \"cc\"\ndimensions = [\"country\"]\n").unwrap();
        let e = ensure(&table, &Layout::of(&with)).await.unwrap_err().to_string();
        assert!(e.contains("projection `cc` is declared here but not in the table"), "{e}");
        let stored = Layout::parse(&Layout::of(&with).canonical()).unwrap();
        assert_eq!(stored.apply(&Config::default()).projections, with.projections, "a reader gets them from the table");
        // Retention is layout: every item of a table expires by one rule.
        let kept = Config::from_toml("[retention]\nminute = \"14d\"\n").unwrap();
        let e = ensure(&table, &Layout::of(&kept)).await.unwrap_err().to_string();
        assert!(
            e.contains("retention is minute 14d, hour forever, day forever here but every rollup kept forever"),
            "{e}"
        );
        let stored = Layout::parse(&Layout::of(&kept).canonical()).unwrap();
        assert_eq!(stored.apply(&Config::default()).retention, kept.retention, "a reader gets it from the table");
        assert!(!Layout::of(&Config::default()).canonical().contains("retention"), "forever: digest unchanged");
        let mut flush_only = Config::default();
        flush_only.flush.interval_ms = 5;
        ensure(&table, &Layout::of(&flush_only)).await.expect("flush timing is not layout");
        assert_eq!(mine.apply(&other).scatter.prefixes, 16);
    }
}
