//! Versions of a table's layout: what `gather layout apply` records, what
//! a writer must match and a reader reads with.
//!
//! Version 1 is the layout the first writer recorded (the `#layout` item,
//! [`crate::layout`]). `apply` adds versions 2, 3, … as items of their own
//! beside it (pk `#layout`, sk `v000002`, …), each created only if absent:
//! of two applies expecting the same newest version, one creates the next
//! and the other is refused naming it. The first apply also copies version
//! 1 to `v000001` and replaces the `#layout` item's text by a marker that
//! no build before versions can read ("layout version 3 is newer than this
//! build"), so a worker of such a build is refused loudly instead of
//! writing an old layout beside the new one. Every other attribute of the
//! `#layout` item (the lease epoch, the value catalog's coverage) stays.
//!
//! A version names its **cut** and its **fills**: each target the new
//! layout writes that the table's items can fill (`crate::layout_diff`)
//! is the fill's below the cut and the workers' from it on, so no bucket
//! has two writers. Workers matching the newest version write a target's
//! buckets from the cut on; the fill writes those before it.

use crate::layout::{Layout, LayoutError, LAYOUT_PK, LAYOUT_SK};
use crate::rollup::Rollup;
use serde::{Deserialize, Serialize};
use zigzag_core::table::{
    AttrValue, CmpOp, Item, QueryRequest, SortKeyCondition, SortedTable, UpdateOutcome, UpdateRequest,
};

const TEXT: &str = "layout";
const DIGEST: &str = "digest";
const CUT: &str = "cut";
const FILLS: &str = "fills";
const AT: &str = "at";
/// On a version recorded while workers ran: whether every lane adopted it
/// (absent: recorded with none running, adopted at once).
const ADOPTED: &str = "adopted";
/// What a build from before versions reads in the `#layout` item once a
/// version was applied: a layout version newer than it knows.
const MARKER: &str = r#"{"version":3,"see":"the #layout items v000001, v000002, ..."}"#;

/// A target the fill owns below the cut: a projection's rollup summed from
/// another's items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FillTarget {
    pub projection: String,
    pub rollup: Rollup,
    pub source: String,
    pub source_rollup: Rollup,
}

/// A projection's rollup counted from the version's adoption on: nothing
/// before the cut holds it, and a report over earlier buckets is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTarget {
    pub projection: String,
    pub rollup: Rollup,
}

/// What a version changes beside its layout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Summed from the table's items below the cut.
    pub fills: Vec<FillTarget>,
    /// Counted from the cut on only.
    pub counted: Vec<NewTarget>,
}

/// One version of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// 1 for the layout the first writer recorded.
    pub number: u32,
    pub layout: Layout,
    /// Buckets of a target starting before this (ms) are the fill's, from
    /// it on the workers'. 0 for version 1.
    pub cut_ms: i64,
    pub changes: Changes,
    /// When `apply` recorded it (ms; 0 for version 1).
    pub at_ms: i64,
    /// Every writer writes it: recorded with no worker running, or
    /// announced to running ones and acknowledged by every lane
    /// (`zigzag_gather::relayout::adoption`). Until then nothing reads its
    /// targets and nothing fills them.
    pub adopted: bool,
}

/// A target a version added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added<'a> {
    /// Summed from the table below the version's cut.
    Fill(&'a FillTarget),
    /// Counted from the version's cut on.
    Counted(&'a NewTarget),
}

impl Added<'_> {
    pub fn projection(&self) -> &str {
        match self {
            Added::Fill(t) => &t.projection,
            Added::Counted(t) => &t.projection,
        }
    }

    pub fn rollup(&self) -> Rollup {
        match self {
            Added::Fill(t) => t.rollup,
            Added::Counted(t) => t.rollup,
        }
    }
}

impl Version {
    fn first(layout: Layout) -> Version {
        Version { number: 1, layout, cut_ms: 0, changes: Changes::default(), at_ms: 0, adopted: true }
    }

    fn sk(number: u32) -> Vec<u8> {
        format!("v{number:06}").into_bytes()
    }

    fn to_item(&self) -> Item {
        let mut item = Item::new(LAYOUT_PK, Version::sk(self.number));
        item.attrs.insert(TEXT.into(), AttrValue::S(self.layout.canonical()));
        item.attrs.insert(DIGEST.into(), AttrValue::S(self.layout.digest()));
        item.attrs.insert(CUT.into(), AttrValue::from(self.cut_ms));
        item.attrs.insert(AT.into(), AttrValue::from(self.at_ms));
        let changes = serde_json::to_string(&self.changes).unwrap_or_default();
        item.attrs.insert(FILLS.into(), AttrValue::S(changes));
        if !self.adopted {
            item.attrs.insert(ADOPTED.into(), AttrValue::Bool(false));
        }
        item
    }

    fn from_item(item: &Item) -> Result<Version, LayoutError> {
        let corrupt = |why: String| LayoutError::Corrupt(format!("layout version item: {why}"));
        let number = std::str::from_utf8(&item.sk)
            .ok()
            .and_then(|s| s.strip_prefix('v'))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| corrupt(format!("sort key {:?}", String::from_utf8_lossy(&item.sk))))?;
        let text = |attr: &str| match item.attrs.get(attr) {
            Some(AttrValue::S(s)) => Ok(s.clone()),
            other => Err(corrupt(format!("{attr} is {other:?}"))),
        };
        let num = |attr: &str| match item.attrs.get(attr) {
            Some(AttrValue::N(n)) => i64::try_from(*n).map_err(|e| corrupt(format!("{attr}: {e}"))),
            other => Err(corrupt(format!("{attr} is {other:?}"))),
        };
        let changes = serde_json::from_str(&text(FILLS)?).map_err(|e| corrupt(format!("{FILLS}: {e}")))?;
        let adopted = !matches!(item.attrs.get(ADOPTED), Some(AttrValue::Bool(false)));
        Ok(Version {
            number,
            layout: Layout::parse(&text(TEXT)?)?,
            cut_ms: num(CUT)?,
            changes,
            at_ms: num(AT)?,
            adopted,
        })
    }
}

/// What the table records of its layout.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The newest version: the one writers must match, readers read with.
    pub newest: Version,
    /// Every version, oldest first (one when none was applied).
    pub versions: Vec<Version>,
    /// The `#layout` item (the lease epoch and the value catalog's
    /// coverage are on it).
    pub item: Item,
}

impl Stored {
    pub fn layout(&self) -> &Layout {
        &self.newest.layout
    }

    /// Every target a version added that the newest layout still writes,
    /// with the version that added it last (a target dropped and added
    /// again is the later version's).
    pub fn added(&self) -> Vec<(&Version, Added<'_>)> {
        let written = crate::layout_diff::written_parts(&self.newest.layout);
        let mut out: Vec<(&Version, Added<'_>)> = Vec::new();
        for v in &self.versions {
            let added = v.changes.fills.iter().map(Added::Fill).chain(v.changes.counted.iter().map(Added::Counted));
            for a in added {
                out.retain(|(_, b)| (b.projection(), b.rollup()) != (a.projection(), a.rollup()));
                out.push((v, a));
            }
        }
        out.retain(|(_, a)| written.iter().any(|(p, r)| p == a.projection() && *r == a.rollup()));
        out
    }

    /// The table as it was when version `number` was the newest (None: no
    /// such version).
    pub fn as_of(&self, number: u32) -> Option<Stored> {
        let versions: Vec<Version> = self.versions.iter().filter(|v| v.number <= number).cloned().collect();
        let newest = versions.last().filter(|v| v.number == number)?.clone();
        Some(Stored { newest, versions, item: self.item.clone() })
    }

    /// What a writer of the newest version writes of each target only from
    /// its cut on: (projection, rollup, cut).
    pub fn written_from(&self) -> Vec<(String, Rollup, i64)> {
        self.added().into_iter().map(|(v, a)| (a.projection().to_string(), a.rollup(), v.cut_ms)).collect()
    }

    /// A digest of every item read: equal as long as nothing was applied
    /// or recorded since (`gather serve` reloads when it moves).
    pub fn identity(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", self.item.attrs).hash(&mut h);
        for v in &self.versions {
            (v.number, v.layout.digest(), v.cut_ms, v.adopted).hash(&mut h);
        }
        format!("{:016x}", h.finish())
    }
}

/// The table's layout and its versions (one query, strongly consistent);
/// None when no writer recorded one.
pub async fn load(table: &dyn SortedTable) -> Result<Option<Stored>, LayoutError> {
    let mut req = QueryRequest::new(LAYOUT_PK, SortKeyCondition::Any);
    req.consistent = true;
    let items = zigzag_core::query::run_key_range(table, req)
        .await
        .map_err(|e| LayoutError::Corrupt(format!("reading the layout items: {e}")))?
        .items;
    let Some(item) = items.iter().find(|i| i.sk == LAYOUT_SK).cloned() else { return Ok(None) };
    let mut versions =
        items.iter().filter(|i| i.sk.first() == Some(&b'v')).map(Version::from_item).collect::<Result<Vec<_>, _>>()?;
    versions.sort_by_key(|v| v.number);
    if versions.is_empty() {
        versions.push(Version::first(crate::layout::from_item(&item)?));
    }
    let newest = versions.last().cloned().expect("one at least");
    Ok(Some(Stored { newest, versions, item }))
}

/// The newest layout, if any was recorded.
pub async fn load_layout(table: &dyn SortedTable) -> Result<Option<Layout>, LayoutError> {
    Ok(load(table).await?.map(|s| s.newest.layout))
}

/// What a writer adopted: the version, and the targets it writes only
/// from their cut on ([`Stored::written_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub number: u32,
    pub written_from: Vec<(String, Rollup, i64)>,
}

/// A writer's check before its first write: the first records `layout`
/// (version 1); later ones must match the newest version, and get what
/// they write only from a cut on. One matching an older version is
/// refused naming the newest; any other, with what differs from the
/// newest.
pub async fn ensure(table: &dyn SortedTable, layout: &Layout) -> Result<Adopted, LayoutError> {
    // One guarded write, no read, on a table without versions (as before
    // they existed); the versions are read only when it says there are.
    match crate::layout::ensure(table, layout).await {
        Ok(()) => return Ok(Adopted { number: 1, written_from: Vec::new() }),
        Err(LayoutError::Versioned) => {}
        Err(e) => return Err(e),
    }
    // (An apply killed between marking the item and recording its version
    // leaves version 1 alone, as an item of its own.)
    match load(table).await? {
        Some(stored) => {
            let newest = &stored.newest;
            if layout.differences(&newest.layout).is_empty() {
                return Ok(Adopted { number: newest.number, written_from: stored.written_from() });
            }
            if let Some(old) = stored.versions.iter().find(|v| layout.differences(&v.layout).is_empty()) {
                return Err(LayoutError::Superseded { mine: old.number, newest: newest.number });
            }
            Err(LayoutError::Differs(layout.differences(&newest.layout)))
        }
        None => Err(LayoutError::Corrupt("the #layout item vanished while it was read".into())),
    }
}

/// Why `apply` could not record a version.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("the table records no layout yet: run ingest first (its first writer records one)")]
    NoLayout,
    #[error(
        "another `gather layout apply` recorded version {0} first (`gather layout show` prints it); \
         run `gather layout diff` against it again"
    )]
    Lost(u32),
}

/// Records `layout` as the version after `expected` (the newest when the
/// change was planned), with its cut and changes. Refused when another
/// version was recorded since (two applies: one wins).
pub async fn record(
    table: &dyn SortedTable,
    expected: u32,
    layout: &Layout,
    cut_ms: i64,
    changes: Changes,
    at_ms: i64,
    adopted: bool,
) -> Result<Version, ApplyError> {
    let stored = load(table).await?.ok_or(ApplyError::NoLayout)?;
    if stored.newest.number != expected {
        return Err(ApplyError::Lost(stored.newest.number));
    }
    if expected == 1 {
        // Version 1 kept as an item of its own, then the `#layout` text
        // made unreadable to builds from before versions (both repeatable).
        let first = stored.versions[0].to_item();
        let text = first.attrs.get(TEXT).cloned().unwrap_or(AttrValue::S(String::new()));
        create(table, &first).await?;
        let mark = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec())
            .set(TEXT, MARKER)
            .set(DIGEST, crate::layout::VERSIONED)
            .guard(TEXT, CmpOp::Eq, text, false);
        match table.update(&mark).await.map_err(LayoutError::Table)? {
            UpdateOutcome::Applied(_) => {}
            UpdateOutcome::ConditionFailed(Some(i)) if i.attrs.get(TEXT) == Some(&AttrValue::S(MARKER.into())) => {}
            UpdateOutcome::ConditionFailed(_) => {
                return Err(
                    LayoutError::Corrupt("the #layout item changed while versions were being recorded".into()).into()
                )
            }
        }
    }
    let version = Version { number: expected + 1, layout: layout.clone(), cut_ms, changes, at_ms, adopted };
    if create(table, &version.to_item()).await? {
        Ok(version)
    } else {
        Err(ApplyError::Lost(expected + 1))
    }
}

/// Records that every lane adopted version `number` (repeatable).
pub async fn mark_adopted(table: &dyn SortedTable, number: u32) -> Result<(), LayoutError> {
    let req = UpdateRequest::new(LAYOUT_PK, Version::sk(number)).set(ADOPTED, AttrValue::Bool(true)).guard(
        TEXT,
        CmpOp::Gt,
        "",
        false,
    );
    match table.update(&req).await? {
        UpdateOutcome::Applied(_) => Ok(()),
        UpdateOutcome::ConditionFailed(_) => Err(LayoutError::Corrupt(format!("layout version {number} vanished"))),
    }
}

/// The number of a version newer than `mine`, if one was recorded: what a
/// running writer asks every few flushes (one eventually consistent query
/// of at most one small item; none for a table without versions beyond
/// the key range it reads).
pub async fn newer_than(table: &dyn SortedTable, mine: u32) -> Result<Option<u32>, LayoutError> {
    let mut req = QueryRequest::new(LAYOUT_PK, SortKeyCondition::Gt(Version::sk(mine)));
    req.limit = Some(1);
    let page = table.query(&req).await?;
    Ok(page.items.first().and_then(|i| std::str::from_utf8(&i.sk).ok()?.strip_prefix('v')?.parse().ok()))
}

/// Creates `item` unless its key exists; whether it did.
async fn create(table: &dyn SortedTable, item: &Item) -> Result<bool, LayoutError> {
    let mut req = UpdateRequest::new(item.pk.clone(), item.sk.clone());
    for (name, value) in &item.attrs {
        req = req.set(name, value.clone());
    }
    let req = req.guard(TEXT, CmpOp::Lt, "", true);
    Ok(matches!(table.update(&req).await?, UpdateOutcome::Applied(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use zigzag_core::table::MemoryTable;

    fn layouts() -> (Layout, Layout) {
        let v1 = Layout::of(&Config::default());
        let with = Config::from_toml("[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\n").unwrap();
        (v1, Layout::of(&with))
    }

    fn fills() -> Changes {
        let fill = FillTarget {
            projection: "by_campaign".into(),
            rollup: Rollup::Minute,
            source: "cc".into(),
            source_rollup: Rollup::Minute,
        };
        Changes { fills: vec![fill], counted: vec![] }
    }

    #[tokio::test]
    async fn a_recorded_version_is_what_writers_must_match_and_the_one_before_is_refused_naming_it() {
        let table = MemoryTable::new();
        let (v1, v2) = layouts();
        assert_eq!(ensure(&table, &v1).await.unwrap().number, 1);
        let recorded = record(&table, 1, &v2, 3_600_000, fills(), 7, true).await.unwrap();
        assert_eq!(recorded.number, 2);
        let got = ensure(&table, &v2).await.unwrap();
        assert_eq!(got.number, 2);
        assert_eq!(got.written_from, [("by_campaign".to_string(), Rollup::Minute, 3_600_000)], "cc as before");
        let stored = load(&table).await.unwrap().unwrap();
        assert_eq!((stored.newest.cut_ms, stored.newest.changes.clone()), (3_600_000, fills()));
        let e = ensure(&table, &v1).await.unwrap_err().to_string();
        assert!(e.contains("version 1") && e.contains("version 2") && e.contains("gather layout"), "{e}");
        let mut other = Config::default();
        other.scatter.prefixes = 8;
        let e = ensure(&table, &Layout::of(&other)).await.unwrap_err().to_string();
        assert!(e.contains("scatter.prefixes is 8 here but 16 in the table"), "{e}");
        let stored = load(&table).await.unwrap().unwrap();
        assert_eq!(stored.versions.iter().map(|v| v.number).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(stored.versions[0].layout, v1, "version 1 kept");
        assert_eq!(load_layout(&table).await.unwrap(), Some(v2));
    }

    #[tokio::test]
    async fn a_build_from_before_versions_cannot_read_the_layout_item_once_one_is_applied() {
        let table = MemoryTable::new();
        let (v1, v2) = layouts();
        ensure(&table, &v1).await.unwrap();
        record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap();
        // What such a build does: parse the `#layout` item's text, whatever
        // layout it has.
        let item = table.get(LAYOUT_PK, LAYOUT_SK).await.unwrap().expect("kept");
        let e = crate::layout::from_item(&item).unwrap_err().to_string();
        assert!(e.contains("layout version 3 is newer than this build"), "{e}");
        // This build reads the versions instead.
        assert!(matches!(crate::layout::ensure(&table, &v1).await, Err(LayoutError::Versioned)));
        assert_eq!(ensure(&table, &v2).await.unwrap().number, 2);
    }

    #[tokio::test]
    async fn of_two_applies_expecting_the_same_version_one_wins_and_the_other_is_refused_naming_it() {
        let table = MemoryTable::new();
        let (v1, v2) = layouts();
        ensure(&table, &v1).await.unwrap();
        let third = Config { rollups: vec![Rollup::Minute, Rollup::Hour], ..Config::default() };
        let v3 = Layout::of(&third);
        let (a, b) = futures::join!(
            record(&table, 1, &v2, 0, Changes::default(), 0, true),
            record(&table, 1, &v3, 0, Changes::default(), 0, true)
        );
        let lost = match (a, b) {
            (Ok(_), Err(lost)) | (Err(lost), Ok(_)) => lost,
            other => panic!("one wins: {other:?}"),
        };
        assert!(lost.to_string().contains("recorded version 2 first"), "{lost}");
        let stored = load(&table).await.unwrap().unwrap();
        assert_eq!(stored.versions.len(), 2);
        let e = record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap_err().to_string();
        assert!(e.contains("recorded version 2 first"), "a stale apply later: {e}");
    }

    #[tokio::test]
    async fn a_target_keeps_the_cut_of_the_version_that_added_it_until_dropped_and_added_again() {
        let table = MemoryTable::new();
        let (v1, v2) = layouts();
        ensure(&table, &v1).await.unwrap();
        record(&table, 1, &v2, 100, fills(), 0, true).await.unwrap();
        // Version 3 adds a projection by country; by_campaign minute keeps
        // version 2's cut.
        let c3 = Config::from_toml(
            "[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\n\
             [[projection]]\nname = \"by_country\"\ndimensions = [\"country\"]\nrollups = [\"hour\"]\n",
        )
        .unwrap();
        let hour = NewTarget { projection: "by_country".into(), rollup: Rollup::Hour };
        let v3 = Layout::of(&c3);
        record(&table, 2, &v3, 200, Changes { fills: vec![], counted: vec![hour] }, 0, true).await.unwrap();
        let got = ensure(&table, &v3).await.unwrap().written_from;
        assert_eq!(got, [("by_campaign".into(), Rollup::Minute, 100), ("by_country".into(), Rollup::Hour, 200)]);
        // Version 4 drops by_campaign; version 5 adds it again, counted.
        record(&table, 3, &v1, 300, Changes::default(), 0, true).await.unwrap();
        assert_eq!(ensure(&table, &v1).await.unwrap().written_from, []);
        let again = NewTarget { projection: "by_campaign".into(), rollup: Rollup::Minute };
        record(&table, 4, &v2, 400, Changes { fills: vec![], counted: vec![again] }, 0, true).await.unwrap();
        assert_eq!(ensure(&table, &v2).await.unwrap().written_from, [("by_campaign".into(), Rollup::Minute, 400)]);
    }

    #[tokio::test]
    async fn the_layout_items_other_attributes_survive_versions() {
        let table = MemoryTable::new();
        let (v1, v2) = layouts();
        ensure(&table, &v1).await.unwrap();
        let epoch = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec()).set("epoch", "e1");
        table.update(&epoch).await.unwrap();
        let before = load(&table).await.unwrap().unwrap();
        record(&table, 1, &v2, 0, Changes::default(), 0, true).await.unwrap();
        let after = load(&table).await.unwrap().unwrap();
        assert_eq!(after.item.attrs.get("epoch"), Some(&AttrValue::S("e1".into())));
        assert!(crate::value_catalog::is_whole(Some(&after.item)));
        assert_ne!(before.identity(), after.identity(), "a reader sees that it moved");
    }
}
