//! `auto` reading the ranges a cost model picked, for as long as what they
//! hold agrees with the model.

use super::super::reader::{Next, Reader};
use super::super::QueryError;
use crate::table::SortedTable;
use crate::zorder::{CostModel, CostedRange};

/// Reads `ranges` (from [`costed_ranges`]) while what they hold agrees
/// with `model`; where it does not, where to go on paging without it. A
/// range is read in pages of a few units at first, doubling: a page whose
/// share of items inside the box is under half the model's (dense data
/// outside the box, which the model took for cheap garbage), a range
/// holding over twice its expected items, or ranges holding under half of
/// theirs over two units (sparse data: each empty range still costs a
/// request) stop it.
pub(super) async fn read_costed<T: SortedTable + ?Sized>(
    reader: &mut Reader<'_, T>,
    ranges: &[CostedRange],
    model: &CostModel,
    max_limit: u32,
) -> Result<Next, QueryError> {
    let u = model.items_per_unit;
    let (mut expected, mut scanned) = (0.0, 0u64);
    for r in ranges {
        let share = if r.items > 0.0 { r.inside / r.items } else { 1.0 };
        let most = (2.0 * r.items).max(u);
        let (mut read, mut after) = (0u64, None);
        let mut limit = (4.0 * u).min(most);
        loop {
            let ask = limit.ceil().clamp(1.0, f64::from(max_limit)) as u32;
            let before = *reader.stats();
            let last = reader.page(&r.range.lo, &r.range.hi, after.take(), Some(ask)).await?;
            let now = reader.stats();
            let (page, useful) = (now.scanned - before.scanned, now.returned - before.returned);
            read += page;
            // Judged only once the page should hold a few of the box's items.
            let hoped = share * page as f64;
            let garbage = page as f64 >= u && hoped >= 4.0 && (useful as f64) < hoped / 2.0;
            match last {
                Some(key) if garbage || read as f64 >= most => return reader.after_page(key),
                Some(key) => after = Some(key),
                None if garbage => return Ok(reader.past(&r.range.hi)),
                None => break,
            }
            limit = (limit * 2.0).min(most - read as f64).max(1.0);
        }
        scanned += read;
        expected += r.items;
        // Under half what was expected, by more than chance would leave
        // (a standard deviation of a count of `expected` items).
        if expected > 2.0 * u && (scanned as f64) < expected / 2.0 - expected.sqrt() {
            return Ok(reader.past(&r.range.hi));
        }
    }
    Ok(Next::Done)
}
