//! What changes between the layout a table records and another, and how
//! each change can stay exact (`gather layout diff`): summed from items the
//! table holds (every aggregate here merges exactly), nothing to fill,
//! counted from the workers' adoption on (the table holds no source), or
//! refused, saying what to do instead.
//!
//! A target (a projection's rollup the new layout writes and the table's
//! does not, or writes differently) can be summed from a projection the
//! table writes when that one keeps every dimension and measure of the
//! target, each declared the same in both layouts, at a rollup whose
//! buckets divide the target's (hours from minutes, days from hours). A
//! projection whose scatter changes is re-spread from its own items.

use crate::dimension::DimensionSpec;
use crate::layout::Layout;
use crate::measure::MeasureSpec;
use crate::projection::{ProjectionSpec, BASE};
use crate::rollup::Rollup;
use crate::scatter::ScatterConfig;

/// Items the table holds that a target can be summed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub projection: String,
    pub rollup: Rollup,
}

/// How a change is made exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fill {
    /// Summed from any one of these (the reader picks the cheapest).
    From(Vec<Source>),
    /// Nothing to write: why.
    Nothing(String),
    /// Counted from each shard's adoption of the new layout on; earlier
    /// windows are not covered: why the table cannot fill it.
    FromAdoption(String),
    /// Cannot stay exact: why, and what to do instead.
    Refused(String),
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What changes, in words.
    pub what: String,
    /// The projection and rollup written anew, if any.
    pub target: Option<(String, Rollup)>,
    pub fill: Fill,
    /// The measures a projection the table writes gains (counted from the
    /// cut on), if that is the change.
    pub gained: Option<(String, Vec<String>)>,
}

/// Every (projection, rollup) `layout` writes.
pub fn written_parts(layout: &Layout) -> Vec<(String, Rollup)> {
    written(layout).into_iter().flat_map(|p| p.rollups.into_iter().map(move |r| (p.name.clone(), r))).collect()
}

/// Every (projection, measure) `layout` writes.
pub fn kept_measures(layout: &Layout) -> Vec<(String, String)> {
    written(layout).into_iter().flat_map(|p| p.measures.into_iter().map(move |m| (p.name.clone(), m))).collect()
}

/// The projections `layout` writes: the base (when it has top-level
/// rollups) and the declared ones.
fn written(layout: &Layout) -> Vec<ProjectionSpec> {
    let base = ProjectionSpec {
        name: BASE.into(),
        dimensions: layout.dimensions.iter().map(|d| d.field.clone()).collect(),
        rollups: layout.rollups.clone(),
        measures: layout.measures.iter().map(|m| m.name.clone()).collect(),
        scatter: ScatterConfig { prefixes: layout.scatter_prefixes, mode: layout.scatter_mode },
        partition_by: None,
    };
    (!layout.rollups.is_empty()).then_some(base).into_iter().chain(layout.projections.iter().cloned()).collect()
}

fn dimension<'l>(layout: &'l Layout, field: &str) -> Option<&'l DimensionSpec> {
    layout.dimensions.iter().find(|d| d.field == field)
}

fn measure<'l>(layout: &'l Layout, name: &str) -> Option<&'l MeasureSpec> {
    layout.measures.iter().find(|m| m.name == name)
}

/// Whether `rollup`'s buckets are whole buckets of `finer`.
fn divides(finer: Rollup, rollup: Rollup) -> bool {
    finer.unit_ms() <= rollup.unit_ms() && rollup.unit_ms() % finer.unit_ms() == 0
}

/// The items of `old` that `target` (of `new`) at `rollup` can be summed
/// from: each projection keeping its dimensions and measures, at each of
/// its rollups dividing `rollup`. Each holds at least one item per item of
/// the target (the target's keys are its keys, projected), so the fewest
/// of them also bound what is written.
fn sources(old: &Layout, new: &Layout, target: &ProjectionSpec, rollup: Rollup) -> Vec<Source> {
    let same_dimension = |d: &String| dimension(old, d).is_some() && dimension(old, d) == dimension(new, d);
    let same_measure = |m: &String| measure(old, m).is_some() && measure(old, m) == measure(new, m);
    if !target.dimensions.iter().all(same_dimension) || !target.measures.iter().all(same_measure) {
        return Vec::new();
    }
    written(old)
        .into_iter()
        .filter(|s| target.dimensions.iter().all(|d| s.dimensions.contains(d)))
        .filter(|s| target.measures.iter().all(|m| s.measures.contains(m)))
        .flat_map(|s| {
            let mut rollups: Vec<Rollup> = s.rollups.iter().copied().filter(|&r| divides(r, rollup)).collect();
            rollups.sort_by_key(|r| r.unit_ms());
            rollups.into_iter().map(move |r| Source { projection: s.name.clone(), rollup: r })
        })
        .collect()
}

/// Why a target has no source, for `Fill::FromAdoption`.
fn why_no_source(old: &Layout, new: &Layout, target: &ProjectionSpec) -> String {
    let missing_dims: Vec<&str> =
        target.dimensions.iter().filter(|d| dimension(old, d) != dimension(new, d)).map(String::as_str).collect();
    let missing_measures: Vec<&str> =
        target.measures.iter().filter(|m| measure(old, m) != measure(new, m)).map(String::as_str).collect();
    match (missing_dims.is_empty(), missing_measures.is_empty()) {
        (false, _) => format!("the table keeps no dimension {} as declared here", missing_dims.join(", ")),
        (_, false) => format!("the table keeps no measure {} as declared here", missing_measures.join(", ")),
        _ => "no projection the table writes keeps its dimensions and measures at a rollup dividing it".into(),
    }
}

/// Every change from `old` (the table's) to `new`, in layout order.
pub fn changes(old: &Layout, new: &Layout) -> Vec<Change> {
    let mut out = Vec::new();
    // Declarations a stored item depends on: changed under one name, refused.
    for d in &new.dimensions {
        if let Some(was) = dimension(old, &d.field).filter(|was| *was != d) {
            out.push(Change {
                what: format!("dimension {} declared {was:?}, now {d:?}", d.field),
                target: None,
                fill: Fill::Refused(
                    "items written keep the old encoding: declare a dimension on a new field and a projection over \
                     it, and drop the old one"
                        .into(),
                ),
                gained: None,
            });
        }
    }
    for m in &new.measures {
        if let Some(was) = measure(old, &m.name).filter(|was| *was != m) {
            out.push(Change {
                what: format!("measure {} declared {:?}, now {:?}", m.name, was, m),
                target: None,
                fill: Fill::Refused(format!(
                    "items written hold {} as declared before: add a measure under another name and drop {}",
                    m.name, m.name
                )),
                gained: None,
            });
        }
    }
    let (before, after) = (written(old), written(new));
    for p in &after {
        let was = before.iter().find(|b| b.name == p.name);
        match was {
            Some(was) if was.dimensions != p.dimensions || was.partition_by != p.partition_by => {
                out.push(Change {
                    what: format!("projection {}: its dimensions change", p.name),
                    target: None,
                    fill: Fill::Refused(format!(
                        "a projection's dimensions are its keys: add a projection under another name with the new \
                         ones, and drop {}",
                        p.name
                    )),
                    gained: None,
                });
                continue;
            }
            _ => {}
        }
        for &rollup in &p.rollups {
            let target = Some((p.name.clone(), rollup));
            let (what, fill) = match was {
                None => {
                    let what = format!("add projection {} ({}), {rollup}", p.name, p.dimensions.join(", "));
                    match sources(old, new, p, rollup) {
                        s if s.is_empty() => (what, Fill::FromAdoption(why_no_source(old, new, p))),
                        s => (what, Fill::From(s)),
                    }
                }
                Some(was) if !was.rollups.contains(&rollup) => {
                    let what = format!("projection {}: add rollup {rollup}", p.name);
                    match sources(old, new, p, rollup) {
                        s if s.is_empty() => (what, Fill::FromAdoption(why_no_source(old, new, p))),
                        s => (what, Fill::From(s)),
                    }
                }
                Some(was) if was.scatter != p.scatter => (
                    format!(
                        "projection {} {rollup}: scatter {} {} prefixes, now {} {}",
                        p.name,
                        was.scatter.mode.name(),
                        was.scatter.prefixes,
                        p.scatter.mode.name(),
                        p.scatter.prefixes
                    ),
                    Fill::From(vec![Source { projection: p.name.clone(), rollup }]),
                ),
                Some(_) => continue,
            };
            out.push(Change { what, target, fill, gained: None });
        }
        // Measures it gains: counted from adoption on (no item holds them).
        if let Some(was) = was {
            let gained: Vec<&str> =
                p.measures.iter().filter(|m| !was.measures.contains(m)).map(String::as_str).collect();
            if !gained.is_empty() {
                out.push(Change {
                    what: format!("projection {}: add measure(s) {}", p.name, gained.join(", ")),
                    target: None,
                    fill: Fill::FromAdoption(
                        "its items hold no such measure: reports over earlier windows say from when it covers".into(),
                    ),
                    gained: Some((p.name.clone(), gained.iter().map(|m| m.to_string()).collect())),
                });
            }
            let lost: Vec<&str> = was.measures.iter().filter(|m| !p.measures.contains(m)).map(String::as_str).collect();
            if !lost.is_empty() {
                out.push(Change {
                    what: format!("projection {}: drop measure(s) {}", p.name, lost.join(", ")),
                    target: None,
                    fill: Fill::Nothing("reports stop reading them; items written keep them until they expire".into()),
                    gained: None,
                });
            }
        }
    }
    for b in &before {
        let kept = after.iter().find(|p| p.name == b.name);
        for &rollup in &b.rollups {
            if kept.is_some_and(|p| p.rollups.contains(&rollup)) {
                continue;
            }
            let what = match kept {
                None => format!("drop projection {}, {rollup}", b.name),
                Some(_) => format!("projection {}: drop rollup {rollup}", b.name),
            };
            out.push(Change {
                what,
                target: None,
                fill: Fill::Nothing(
                    "reports stop reading it at once; its items are deleted, or left to their retention".into(),
                ),
                gained: None,
            });
        }
    }
    if old.retention != new.retention {
        out.push(Change {
            what: format!("retention: {}, now {}", old.retention.describe(), new.retention.describe()),
            target: None,
            fill: Fill::Nothing(
                "items already written keep the expiry they were written with; new ones take the new retention".into(),
            ),
            gained: None,
        });
    }
    if old.ratios != new.ratios {
        out.push(Change {
            what: "ratios".into(),
            target: None,
            fill: Fill::Nothing("readers compute them: nothing is written".into()),
            gained: None,
        });
    }
    if old.input != new.input || old.fields != new.fields {
        out.push(Change {
            what: "input format or fields".into(),
            target: None,
            fill: Fill::Nothing("how events are decoded, from each worker's adoption on".into()),
            gained: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn layout(toml: &str) -> Layout {
        Layout::of(&Config::from_toml(toml).unwrap_or_else(|e| panic!("{e}\n{toml}")))
    }

    const SHIPPED: &str = crate::shipped::SHIPPED_TOML;

    fn with(extra: &str) -> Layout {
        layout(&format!("{SHIPPED}\n{extra}"))
    }

    #[test]
    fn the_same_layout_changes_nothing() {
        assert_eq!(changes(&layout(SHIPPED), &layout(SHIPPED)), Vec::new());
    }

    #[test]
    fn a_projection_by_campaign_is_summed_from_those_keeping_campaign_at_a_dividing_rollup() {
        let new = with(
            "[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"hour\", \"day\"]\n",
        );
        let c = changes(&layout(SHIPPED), &new);
        assert_eq!(c.len(), 2, "{c:#?}");
        let cc = |rollup| Source { projection: "cc".into(), rollup };
        let expected = [
            (Rollup::Hour, vec![cc(Rollup::Minute), cc(Rollup::Hour)]),
            (Rollup::Day, vec![cc(Rollup::Minute), cc(Rollup::Hour), cc(Rollup::Day)]),
        ];
        for (change, (rollup, sources)) in c.iter().zip(expected) {
            assert_eq!(change.target, Some(("by_campaign".to_string(), rollup)));
            // cc keeps campaign, at every rollup dividing the target's;
            // total and referrer_country do not keep campaign.
            assert_eq!(change.fill, Fill::From(sources), "{change:?}");
        }
    }

    #[test]
    fn a_rollup_added_is_summed_from_a_finer_one() {
        let old = layout(SHIPPED);
        let mut new = old.clone();
        let rc = new.projections.iter_mut().find(|p| p.name == "referrer_country").expect("shipped");
        assert!(!rc.rollups.contains(&Rollup::Minute));
        rc.rollups = vec![Rollup::Hour, Rollup::Day];
        rc.rollups.retain(|r| *r != Rollup::Day);
        let c = changes(&old, &new);
        assert_eq!(c.len(), 1, "the day rollup dropped: {c:#?}");
        assert!(matches!(c[0].fill, Fill::Nothing(_)) && c[0].what.contains("drop rollup day"), "{c:?}");
        // A day rollup over a projection that keeps only hours: from its hours.
        let c = changes(&new, &old);
        let Fill::From(sources) = &c[0].fill else { panic!("{c:?}") };
        assert!(sources.contains(&Source { projection: "referrer_country".into(), rollup: Rollup::Hour }), "{c:?}");
        // A minute rollup there: no projection keeps referrers by the minute.
        let mut minutes = old.clone();
        minutes
            .projections
            .iter_mut()
            .find(|p| p.name == "referrer_country")
            .expect("shipped")
            .rollups
            .push(Rollup::Minute);
        let c = changes(&old, &minutes);
        assert_eq!(c.len(), 1);
        assert!(matches!(&c[0].fill, Fill::FromAdoption(_)), "{c:?}");
    }

    #[test]
    fn more_prefixes_are_re_spread_from_the_projection_s_own_items() {
        let old = layout(SHIPPED);
        let mut new = old.clone();
        new.projections.iter_mut().find(|p| p.name == "referrer_country").expect("shipped").scatter.prefixes *= 2;
        let c = changes(&old, &new);
        assert_eq!(c.len(), 2, "hour and day: {c:#?}");
        for change in &c {
            let (_, rollup) = change.target.clone().expect("a target");
            assert_eq!(change.fill, Fill::From(vec![Source { projection: "referrer_country".into(), rollup }]));
        }
    }

    #[test]
    fn a_measure_changed_under_its_name_or_a_projection_s_keys_are_refused() {
        let old = layout(SHIPPED);
        let mut new = old.clone();
        let clicks = new.measures.iter_mut().find(|m| m.name == "clicks").expect("shipped");
        clicks.condition = Some("type = impression".into());
        let c = changes(&old, &new);
        assert!(c.iter().any(|c| matches!(&c.fill, Fill::Refused(w) if w.contains("another name"))), "{c:#?}");
        let mut keys = old.clone();
        keys.projections.iter_mut().find(|p| p.name == "cc").expect("shipped").dimensions = vec!["campaign".into()];
        let c = changes(&old, &keys);
        assert!(c.iter().any(|c| c.what.contains("cc: its dimensions change") && matches!(c.fill, Fill::Refused(_))));
    }

    #[test]
    fn a_new_measure_is_counted_from_adoption_and_a_projection_needing_it_has_no_source() {
        let old = layout(SHIPPED);
        let mut new = old.clone();
        let mut spend = new.measures.iter().find(|m| m.name == "clicks").expect("shipped").clone();
        spend.name = "clicks_again".into();
        new.measures.push(spend);
        for p in &mut new.projections {
            p.measures.push("clicks_again".into());
        }
        let c = changes(&old, &new);
        assert!(c.iter().all(|c| matches!(c.fill, Fill::FromAdoption(_))), "{c:#?}");
        let cc = c.iter().find(|c| c.what == "projection cc: add measure(s) clicks_again").expect("{c:#?}");
        assert_eq!(cc.gained, Some(("cc".to_string(), vec!["clicks_again".to_string()])));
    }
}
