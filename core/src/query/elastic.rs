//! The elastic strategy: page-jump whose `Limit` follows what the pages
//! find, with no model of where the data lies.
//!
//! Page-jump (Z-order part 1) with a fixed `Limit N` pays one request per N items
//! on dense boxes and scans up to N items of garbage before each jump on
//! sparse ones. The adaptive strategy sizes requests from a density per
//! Z-address, which assumes data spread evenly over the box's volume;
//! aggregate items cluster on a few distinct values of wide string
//! dimensions, and there that model is wrong by orders of magnitude.
//!
//! The rule: after each page, `useful` = items inside the box (and through
//! the filter) / items scanned. A page that was mostly useful (≥ 3/4)
//! doubles the limit, up to `max_limit`: the reader is inside a dense run,
//! and bigger pages cost fewer requests and less 4 KB rounding. A page that
//! was mostly garbage (< 1/4) halves it, down to `min_limit`: jumps (BIGMIN
//! from a LastEvaluatedKey outside the box) come sooner. Otherwise the
//! limit stays. Carry the limit across the boxes of one query ([`Elastic`]),
//! as the adaptive strategy carries its density.

use super::reader::{Next, Reader};
use super::QueryError;
use crate::table::SortedTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElasticConfig {
    pub start_limit: u32,
    pub min_limit: u32,
    pub max_limit: u32,
}

impl Default for ElasticConfig {
    fn default() -> Self {
        // 1,024 items of ~250 bytes is a quarter of DynamoDB's 1 MB page.
        ElasticConfig { start_limit: 32, min_limit: 16, max_limit: 1024 }
    }
}

/// The limit reached so far (carried from box to box of one query).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elastic {
    limit: Option<u32>,
}

impl Elastic {
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }
}

fn next_limit(cfg: &ElasticConfig, limit: u32, scanned: u64, useful: u64) -> u32 {
    let next = if scanned > 0 && useful * 4 >= scanned * 3 {
        limit.saturating_mul(2)
    } else if useful * 4 < scanned {
        limit / 2
    } else {
        limit
    };
    next.clamp(cfg.min_limit.max(1), cfg.max_limit.max(cfg.min_limit.max(1)))
}

/// Z-order part 1's page-jump, steps 1-6 (pages of at most `limit` evaluated
/// items, each starting inside the box; continue from a LastEvaluatedKey
/// inside the box, else jump to BIGMIN of it), with the limit re-sized
/// after every page.
pub(super) async fn run<T: SortedTable + ?Sized>(
    reader: &mut Reader<'_, T>,
    cfg: &ElasticConfig,
    state: &mut Elastic,
) -> Result<(), QueryError> {
    let zbox = reader.zbox();
    let mut lo = zbox.min().clone();
    let mut after: Option<Vec<u8>> = None;
    let mut limit = state.limit.unwrap_or(cfg.start_limit);
    loop {
        let before = *reader.stats();
        let last = reader.page(&lo, zbox.max(), after.take(), Some(limit)).await?;
        let now = reader.stats();
        limit = next_limit(cfg, limit, now.scanned - before.scanned, now.returned - before.returned);
        state.limit = Some(limit);
        let Some(last) = last else { return Ok(()) };
        match reader.after_page(last)? {
            Next::After(key, _) => after = Some(key),
            Next::Jump(next) => lo = next,
            Next::Done => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_doubles_on_useful_pages_and_halves_on_garbage() {
        let cfg = ElasticConfig { start_limit: 32, min_limit: 8, max_limit: 100 };
        assert_eq!(next_limit(&cfg, 32, 32, 30), 64);
        assert_eq!(next_limit(&cfg, 64, 64, 64), 100, "capped");
        assert_eq!(next_limit(&cfg, 32, 32, 4), 16);
        assert_eq!(next_limit(&cfg, 8, 8, 0), 8, "floored");
        assert_eq!(next_limit(&cfg, 32, 32, 16), 32, "in between: unchanged");
        assert_eq!(next_limit(&cfg, 32, 0, 0), 32, "an empty page says nothing");
    }
}
