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
mod changes;

pub use changes::{Added, Changes, FillTarget, MeasuredFrom, NewMeasures, NewTarget};

use crate::rollup::Rollup;
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
/// On a version announced to running workers that one of them wrote past
/// the cut under an older layout: why (set once, never cleared).
const BROKEN: &str = "broken";
/// What a build from before versions reads in the `#layout` item once a
/// version was applied: a layout version newer than it knows.
const MARKER: &str = r#"{"version":3,"see":"the #layout items v000001, v000002, ..."}"#;

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
    /// Judged broken while announced (a worker wrote events past the cut
    /// under an older layout): why. Never adopted after: the lanes that
    /// showed it may be taken again and show nothing.
    pub broken: Option<String>,
}

impl Version {
    fn first(layout: Layout) -> Version {
        Version { number: 1, layout, cut_ms: 0, changes: Changes::default(), at_ms: 0, adopted: true, broken: None }
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
        let broken = match item.attrs.get(BROKEN) {
            Some(AttrValue::S(why)) => Some(why.clone()),
            _ => None,
        };
        Ok(Version {
            number,
            layout: Layout::parse(&text(TEXT)?)?,
            cut_ms: num(CUT)?,
            changes,
            at_ms: num(AT)?,
            adopted,
            broken,
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

    /// What a writer of the newest version writes only from a cut on.
    pub fn adopted(&self) -> Adopted {
        let measured_from = self.measured_from().into_iter().map(|f| (f.projection, f.measure, f.cut_ms)).collect();
        Adopted { number: self.newest.number, written_from: self.written_from(), measured_from }
    }

    /// Every measure a projection the newest layout writes gained in a
    /// version (the one that added it last: a measure dropped and added
    /// again is the later version's), held from that version's cut on.
    pub fn measured_from(&self) -> Vec<MeasuredFrom> {
        let kept = crate::layout_diff::kept_measures(&self.newest.layout);
        let mut out: Vec<MeasuredFrom> = Vec::new();
        for v in &self.versions {
            for gained in &v.changes.measures {
                for m in &gained.measures {
                    out.retain(|f| (&f.projection, &f.measure) != (&gained.projection, m));
                    out.push(MeasuredFrom {
                        projection: gained.projection.clone(),
                        measure: m.clone(),
                        cut_ms: v.cut_ms,
                        version: v.number,
                        adopted: v.adopted,
                    });
                }
            }
        }
        out.retain(|f| kept.iter().any(|(p, m)| (p, m) == (&f.projection, &f.measure)));
        out
    }

    /// A digest of every item read: equal as long as nothing was applied
    /// or recorded since (`gather serve` reloads when it moves).
    pub fn identity(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", self.item.attrs).hash(&mut h);
        for v in &self.versions {
            (v.number, v.layout.digest(), v.cut_ms, v.adopted, &v.broken).hash(&mut h);
        }
        format!("{:016x}", h.finish())
    }
}

/// The table's layout and its versions (one query, strongly consistent);
/// None when no writer recorded one.
pub async fn load<T: SortedTable + ?Sized>(table: &T) -> Result<Option<Stored>, LayoutError> {
    let mut req = QueryRequest::new(LAYOUT_PK, SortKeyCondition::Any);
    req.consistent = true;
    let items = zigzag_core::query::run_key_range(table, req)
        .await
        .map_err(|e| match e {
            // A table's error stays one: a throttle is retried by callers.
            zigzag_core::query::QueryError::Table(e) => LayoutError::Table(e),
            other => LayoutError::Corrupt(format!("reading the layout items: {other}")),
        })?
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
    /// (projection, measure, cut): measures written only for buckets from
    /// the cut on ([`Stored::measured_from`]).
    pub measured_from: Vec<(String, String, i64)>,
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
        Ok(()) => return Ok(Adopted { number: 1, written_from: Vec::new(), measured_from: Vec::new() }),
        Err(LayoutError::Versioned) => {}
        Err(e) => return Err(e),
    }
    // (An apply killed between marking the item and recording its version
    // leaves version 1 alone, as an item of its own.)
    match load(table).await? {
        Some(stored) => {
            let newest = &stored.newest;
            if layout.differences(&newest.layout).is_empty() {
                return Ok(stored.adopted());
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
    let version =
        Version { number: expected + 1, layout: layout.clone(), cut_ms, changes, at_ms, adopted, broken: None };
    if create(table, &version.to_item()).await? {
        Ok(version)
    } else {
        Err(ApplyError::Lost(expected + 1))
    }
}

/// Records that every lane adopted version `number` (repeatable); false
/// when it was recorded broken first.
pub async fn mark_adopted(table: &dyn SortedTable, number: u32) -> Result<bool, LayoutError> {
    let req = UpdateRequest::new(LAYOUT_PK, Version::sk(number))
        .set(ADOPTED, AttrValue::Bool(true))
        .guard(TEXT, CmpOp::Gt, "", false)
        // No text is below "": the guard holds only while it is absent.
        .guard(BROKEN, CmpOp::Lt, "", true);
    match table.update(&req).await? {
        UpdateOutcome::Applied(_) => Ok(true),
        UpdateOutcome::ConditionFailed(Some(i)) if i.attrs.contains_key(BROKEN) => Ok(false),
        UpdateOutcome::ConditionFailed(_) => Err(LayoutError::Corrupt(format!("layout version {number} vanished"))),
    }
}

/// Records that announced version `number` is broken, and why (only
/// while not adopted; the first reason stays); whether it is now.
pub async fn mark_broken(table: &dyn SortedTable, number: u32, why: &str) -> Result<bool, LayoutError> {
    let req = UpdateRequest::new(LAYOUT_PK, Version::sk(number))
        .set(BROKEN, why)
        .guard(ADOPTED, CmpOp::Eq, AttrValue::Bool(false), false)
        .guard(BROKEN, CmpOp::Lt, "", true);
    match table.update(&req).await? {
        UpdateOutcome::Applied(_) => Ok(true),
        UpdateOutcome::ConditionFailed(Some(i)) => Ok(i.attrs.contains_key(BROKEN)),
        UpdateOutcome::ConditionFailed(None) => Err(LayoutError::Corrupt(format!("layout version {number} vanished"))),
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
mod tests;
