//! The adaptive strategy: size every request from the density seen so far.
//!
//! The rule. Let ρ be the items scanned per Z-address covered so far in this
//! query (the covered span of a page runs from where it started to its
//! LastEvaluatedKey, or to the end of its range). A request starting at `s`
//! (inside the box) reaches as far as it can while the *expected garbage*,
//! ρ × (addresses outside the box in `[s, e]`), stays within
//! `garbage_per_request` items; `e` is then pulled back to the last address
//! inside the box (LITMAX), and the request asks for a Limit of about twice
//! the items it expects, so a wrong estimate costs one page, not a scan.
//! After each page: continue from LastEvaluatedKey if it is inside the box,
//! jump with BIGMIN if not, or move to the next sub-range.
//!
//! What this does at the extremes:
//! - dense data (ρ high): the garbage allowance covers almost no outside
//!   addresses, so each request is one exact run of the box: *precise*;
//! - sparse data (ρ low): one request spans many runs and their gaps,
//!   expecting under one garbage item: *naive*, with few requests;
//! - in between, or where density varies, every page updates ρ and the
//!   next request is re-sized: *page-jump* with a range and limit that fit.
//!
//! The first request knows nothing: it is a page-jump probe of
//! `probe_limit` items from the box minimum.

use super::reader::{Next, Reader};
use super::QueryError;
use crate::table::SortedTable;
use crate::zorder::{span_end_within_garbage, ZAddress};

#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// Limit of the first request, before any density is known.
    pub probe_limit: u32,
    /// Expected garbage items one request may scan. Lower: fewer items
    /// scanned, more requests. A request costs at least 0.5 RCU, the price
    /// of reading ~8 KB, so raising this trades scans for requests.
    pub garbage_per_request: f64,
    /// Smallest Limit of a sized request.
    pub min_limit: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig { probe_limit: 16, garbage_per_request: 0.1, min_limit: 8 }
    }
}

/// What the adaptive strategy has observed: items scanned over Z-addresses
/// covered. Carry one across the boxes of a query (one per time bin) so
/// each box starts from the density its predecessors measured instead of
/// paying for a fresh probe.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Density {
    covered: f64,
    scanned: f64,
}

impl Density {
    /// Items per Z-address, once anything has been covered.
    pub fn estimate(&self) -> Option<f64> {
        (self.covered > 0.0).then(|| self.scanned / self.covered)
    }
}

pub(super) async fn run<T: SortedTable + ?Sized>(
    reader: &mut Reader<'_, T>,
    cfg: &AdaptiveConfig,
    seen: &mut Density,
) -> Result<(), QueryError> {
    let zbox = reader.zbox();
    let zmax = zbox.max();
    // `lo`: lower bound of the current key range (inside the box).
    // `after`: LastEvaluatedKey to continue from, and its Z-address.
    let mut lo = zbox.min().clone();
    let mut after: Option<(Vec<u8>, ZAddress)> = None;
    loop {
        let from = after.as_ref().map_or(&lo, |(_, z)| z).clone();
        let (hi, limit) = match seen.estimate() {
            None => (zmax.clone(), cfg.probe_limit),
            Some(density) => {
                let allowance = if density > 0.0 { cfg.garbage_per_request / density } else { f64::INFINITY };
                let end = span_end_within_garbage(zbox, &from, zmax, allowance);
                let end = zbox.litmax(&end).expect("`from` is inside the box and <= end");
                let expected = density * (end.span_f64(&from) + 1.0);
                let limit = (2.0 * expected + 2.0 * cfg.garbage_per_request).ceil();
                (end, (limit.min(u32::MAX as f64) as u32).max(cfg.min_limit))
            }
        };
        let before = reader.stats().scanned;
        let last = reader.page(&lo, &hi, after.take().map(|(k, _)| k), Some(limit)).await?;
        seen.scanned += (reader.stats().scanned - before) as f64;
        let next = match last {
            Some(key) => {
                seen.covered += reader.z_of(&key)?.span_f64(&from) + 1.0;
                reader.after_page(key)?
            }
            None => {
                seen.covered += hi.span_f64(&from) + 1.0;
                reader.past(&hi)
            }
        };
        match next {
            Next::After(key, z) => after = Some((key, z)),
            Next::Jump(next) => lo = next,
            Next::Done => return Ok(()),
        }
    }
}
