//! One box read the `auto` way (the rules are in the module above): a box
//! of a few exact ranges read range by range; else the cost model's ranges
//! where the statistics say what the partition holds; then pages, each one
//! sized and bounded by what the pages before it showed ([`Walk`]).

use super::costed::read_costed;
use super::gap::{gap_bound, gap_density};
use super::{
    items_per_unit, next_units, Auto, AutoConfig, COSTED_BLOCKS, EVEN, LEARN_PAGES, RECENT_PAGES, RUN_PAGE_SLACK,
};
use crate::query::reader::{Next, Reader};
use crate::query::{QueryError, QueryStats, PRECISE_RANGES};
use crate::table::SortedTable;
use crate::zorder::{
    costed_ranges, decompose, span_end_within_garbage, CostModel, CostedRange, ZAddress, ZBox, ZRange,
};
use std::collections::VecDeque;

/// What one page of `auto` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    /// One unit, unbounded (or stopped before a gap in a needle box).
    Probe,
    /// Several units, bounded by the end of the run it starts in.
    Run,
    /// Several units, ended by its Limit or the end of its cover range.
    Cross,
}

/// Whether `start..=end` holds an address outside the box.
fn crosses_gap(zbox: &ZBox, start: &ZAddress, end: &ZAddress) -> bool {
    end > start && zbox.volume_in_range(start, end) < end.span_f64(start) + 1.0
}

/// Reads the reader's box, learning into `state` (which carries from box
/// to box of one query).
pub(in crate::query) async fn run<T: SortedTable + ?Sized>(
    reader: &mut Reader<'_, T>,
    cfg: &AutoConfig,
    state: &mut Auto,
) -> Result<(), QueryError> {
    let zbox = reader.zbox();
    let d = decompose(zbox, cfg.exact_ranges);
    if d.exact {
        return read_exact(reader, &d.ranges, cfg, state).await;
    }
    let mut walk = Walk::new(zbox, cfg.costed && reader.expected().is_some());
    if let Some(next) = walk.costed_from_statistics(reader, cfg).await? {
        if walk.go(next) {
            return Ok(());
        }
    }
    state.units = state.units.max(1);
    loop {
        if let Some(next) = walk.learn(reader, cfg, state).await? {
            if walk.go(next) {
                return Ok(());
            }
            continue;
        }
        let kind = match (state.units > 1, state.crossing) {
            (false, _) => Page::Probe,
            (true, false) => Page::Run,
            (true, true) => Page::Cross,
        };
        // Where this page starts: after the last key, or at `lo`.
        let start = match &walk.after {
            Some(k) => reader.z_of(k)?,
            None => walk.lo.clone(),
        };
        let (hi, limit) = walk.bounds(kind, &start, cfg, state);
        let before = *reader.stats();
        let last = reader.page(&walk.lo, &hi, walk.after.take(), Some(limit)).await?;
        let page = Paged { kind, start, hi, limit, before, last };
        let next = walk.observe(reader, cfg, state, page)?;
        if walk.go(next) {
            return Ok(());
        }
    }
}

/// A box that is exactly a few Z-ranges: each read whole.
async fn read_exact<T: SortedTable + ?Sized>(
    reader: &mut Reader<'_, T>,
    ranges: &[ZRange],
    cfg: &AutoConfig,
    state: &mut Auto,
) -> Result<(), QueryError> {
    for r in ranges {
        reader.read_range(&r.lo, &r.hi, None).await?;
    }
    if let Some(mean) = reader.mean_item_bytes() {
        state.unit = Some(items_per_unit(cfg.unit_bytes, mean));
    }
    Ok(())
}

/// One page read: what it was, where it started and was bounded, the
/// reader's counts before it, and its last key (None: it read to `hi`).
struct Paged {
    kind: Page,
    start: ZAddress,
    hi: ZAddress,
    limit: u32,
    before: QueryStats,
    last: Option<Vec<u8>>,
}

/// Where a box's walk is, and what its pages showed.
struct Walk<'z> {
    zbox: &'z ZBox,
    /// The ranges precise reads (once a crossing page needs them):
    /// crossing pages stop at their ends, so that the box's widest gaps,
    /// which may hold dense data, are jumped.
    cover: Option<Vec<ZRange>>,
    /// The next page starts after `after` if set, else at `lo`.
    lo: ZAddress,
    after: Option<Vec<u8>>,
    /// Densities (items per address) of the last unbounded pages, and the
    /// items each found inside the box.
    recent: VecDeque<(f64, u64)>,
    /// Full probe pages of this box: items scanned, addresses they
    /// spanned, and the least and most dense of them.
    probed: (u32, f64, f64),
    spread: (f64, f64),
    /// The partition's density is known or was taken (once per box).
    learned: bool,
}

impl<'z> Walk<'z> {
    fn new(zbox: &'z ZBox, learned: bool) -> Self {
        Walk {
            zbox,
            cover: None,
            lo: zbox.min().clone(),
            after: None,
            recent: VecDeque::new(),
            probed: (0, 0.0, 0.0),
            spread: (f64::INFINITY, 0.0),
            learned,
        }
    }

    /// Moves to where `next` says; true when the box is read.
    fn go(&mut self, next: Next) -> bool {
        match next {
            Next::After(key, _) => self.after = Some(key),
            Next::Jump(next) => self.lo = next,
            Next::Done => return true,
        }
        false
    }

    /// What the partition holds is known: the ranges a cost model over it
    /// picks, while what they hold agrees with it (None: not read so).
    async fn costed_from_statistics<T: SortedTable + ?Sized>(
        &mut self,
        reader: &mut Reader<'_, T>,
        cfg: &AutoConfig,
    ) -> Result<Option<Next>, QueryError> {
        let Some(e) = reader.expected().filter(|_| cfg.costed) else { return Ok(None) };
        let model = CostModel {
            items_per_address: e.items / 2f64.powi(self.zbox.layout().total_bits() as i32),
            items_per_unit: f64::from(items_per_unit(cfg.unit_bytes, e.item_bytes)),
        };
        match costed_ranges(self.zbox, &model, COSTED_BLOCKS) {
            Some((ranges, _)) => Ok(Some(read_costed(reader, &ranges, &model, cfg.max_limit).await?)),
            None => Ok(None),
        }
    }

    /// Sparse in the box, dense enough around it to cost a request a unit:
    /// once a few full probes say how dense the partition is, the ranges
    /// the cost model picks at that density, while the data agrees with it
    /// (a box of thin runs, which paging reads one garbage unit at a time).
    /// None: not now (paging goes on).
    async fn learn<T: SortedTable + ?Sized>(
        &mut self,
        reader: &mut Reader<'_, T>,
        cfg: &AutoConfig,
        state: &Auto,
    ) -> Result<Option<Next>, QueryError> {
        let even = self.spread.1 <= EVEN * self.spread.0;
        if self.learned || self.after.is_some() || self.probed.0 < LEARN_PAGES || !even {
            return Ok(None);
        }
        self.learned = true;
        let Some(u) = state.unit else { return Ok(None) };
        let model = CostModel { items_per_address: self.probed.1 / self.probed.2, items_per_unit: f64::from(u) };
        let Some((ranges, _)) = costed_ranges(self.zbox, &model, COSTED_BLOCKS) else { return Ok(None) };
        let rest: Vec<CostedRange> = ranges
            .into_iter()
            .filter(|r| r.range.hi >= self.lo)
            .map(|mut r| {
                r.range.lo = r.range.lo.max(self.lo.clone());
                r
            })
            .collect();
        Ok(Some(read_costed(reader, &rest, &model, cfg.max_limit).await?))
    }

    /// Where a page of `kind` from `start` ends, and its Limit.
    fn bounds(&mut self, kind: Page, start: &ZAddress, cfg: &AutoConfig, state: &Auto) -> (ZAddress, u32) {
        let zbox = self.zbox;
        let mut limit = match state.unit {
            // Bounded below: its bound ends it; its Limit, once the runs'
            // density is known, only guards against a cluster in a gap.
            Some(_) if kind == Page::Run => cfg.max_limit,
            Some(u) => u.saturating_mul(state.units).min(cfg.max_limit),
            None => cfg.probe_limit,
        };
        let hi = match kind {
            Page::Cross => {
                let cover = self.cover.get_or_insert_with(|| decompose(zbox, PRECISE_RANGES).ranges);
                cover.iter().find(|r| r.hi >= *start).map_or_else(|| zbox.max().clone(), |r| r.hi.clone())
            }
            // A page of several units stops at the end of the box's run it
            // is in: past it, it would buy garbage by the unit. Gaps where
            // under a unit of items is expected (at the density of the runs
            // read so far) are read through rather than paid for with
            // another request and its rounding.
            Page::Run => match (state.unit, state.density()) {
                (Some(u), Some(rho)) => {
                    let end = span_end_within_garbage(zbox, start, zbox.max(), f64::from(u) / rho);
                    let expected = rho * zbox.volume_in_range(start, &end) + f64::from(u);
                    limit = (RUN_PAGE_SLACK * expected).ceil().clamp(f64::from(u), f64::from(cfg.max_limit)) as u32;
                    end
                }
                _ => span_end_within_garbage(zbox, start, zbox.max(), 0.0),
            },
            // Stop before a gap the page would have ended in anyway: its
            // items are saved for no request.
            Page::Probe => match (state.unit, cfg.gap_margin, gap_density(&self.recent)) {
                (Some(u), Some(m), Some(rho)) if self.probed.0 > 0 => {
                    gap_bound(zbox, start, f64::from(u), rho, f64::from(m))
                }
                _ => None,
            }
            .unwrap_or_else(|| zbox.max().clone()),
        };
        (hi, limit)
    }

    /// What `page` showed, into the walk and `state`; where the next one
    /// goes.
    fn observe<T: SortedTable + ?Sized>(
        &mut self,
        reader: &Reader<'_, T>,
        cfg: &AutoConfig,
        state: &mut Auto,
        page: Paged,
    ) -> Result<Next, QueryError> {
        let Paged { kind, start, hi, limit, before, last } = page;
        let zbox = self.zbox;
        let now = reader.stats();
        let scanned = now.scanned - before.scanned;
        if let (Page::Probe, Some(k)) = (kind, &last) {
            if scanned >= u64::from(limit) && state.unit.is_some() {
                let span = reader.z_of(k)?.span_f64(&start) + 1.0;
                self.probed.0 += 1;
                self.probed.1 += scanned as f64;
                self.probed.2 += span;
                let density = scanned as f64 / span;
                self.spread = (self.spread.0.min(density), self.spread.1.max(density));
            }
        }
        if kind == Page::Probe && state.unit.is_some() {
            let end = match &last {
                Some(k) => reader.z_of(k)?,
                None => hi.clone(),
            };
            self.recent.push_back((scanned as f64 / (end.span_f64(&start) + 1.0), now.returned - before.returned));
            if self.recent.len() > RECENT_PAGES {
                self.recent.pop_front();
            }
        }
        if let Some(mean) = reader.mean_item_bytes() {
            let unit = items_per_unit(cfg.unit_bytes, mean);
            state.unit = Some(unit);
            let max_units = (cfg.max_limit / unit).max(1);
            let (scanned, useful) = (now.scanned - before.scanned, now.returned - before.returned);
            state.units = next_units(state.units, limit, scanned, useful, max_units);
            if scanned >= u64::from(limit) && useful * 4 >= scanned * 3 {
                // Full and useful: across gaps, if it crossed one (a page
                // bounded by its run keeps to runs).
                if kind != Page::Run {
                    state.crossing = match &last {
                        Some(k) => crosses_gap(zbox, &start, &reader.z_of(k)?),
                        None => false,
                    };
                }
            } else if useful * 4 < scanned {
                state.crossing = false;
            }
        }
        if kind == Page::Run {
            // Items per address of the runs read so far, from what this
            // page covered: up to its last key, or its whole range.
            let end = match &last {
                Some(k) => reader.z_of(k)?,
                None => hi.clone(),
            };
            state.seen.0 += (now.returned - before.returned) as f64;
            state.seen.1 += end.span_f64(&start) + 1.0;
        }
        Ok(match last {
            Some(last) => reader.after_page(last)?,
            // The run is read. Where the next one starts and how full it
            // is are unknown: one unit, unbounded, looks for it. A crossing
            // page that read its cover range's end goes on to the next
            // range as it was, unless the range held under a unit.
            None => {
                if !(kind == Page::Cross && state.unit.is_some_and(|u| scanned >= u64::from(u))) {
                    state.units = 1;
                    state.crossing = false;
                }
                reader.past(&hi)
            }
        })
    }
}
