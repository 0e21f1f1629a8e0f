//! One query's reading state: issues pages, keeps the relevant items, and
//! adds up the cost. Every strategy reads through it, so every strategy is
//! accounted the same way.

use super::{key_condition, QueryError, QueryOutcome, QueryStats, ZQuery};
use crate::table::{Item, QueryRequest, SortedTable};
use crate::zorder::{ZAddress, ZBox};

pub(super) struct Reader<'a, T: SortedTable + ?Sized> {
    table: &'a T,
    query: &'a ZQuery<'a>,
    bits: u32,
    items: Vec<Item>,
    stats: QueryStats,
    /// Items the store returned (inside the box or not) and their bytes:
    /// the item size that sizes pages in read units.
    sized: (u64, u64),
}

/// The next read of a page-jumping strategy.
pub(super) enum Next {
    /// Continue after this key (a LastEvaluatedKey inside the box; its Z).
    After(Vec<u8>, ZAddress),
    /// Start a new range here (inside the box).
    Jump(ZAddress),
    /// The box is read.
    Done,
}

impl<'a, T: SortedTable + ?Sized> Reader<'a, T> {
    pub fn new(table: &'a T, query: &'a ZQuery<'a>) -> Self {
        let bits = query.zbox.layout().total_bits();
        Reader { table, query, bits, items: Vec::new(), stats: QueryStats::default(), sized: (0, 0) }
    }

    pub fn zbox(&self) -> &'a ZBox {
        self.query.zbox
    }

    pub fn expected(&self) -> Option<super::Expected> {
        self.query.expected
    }

    pub fn stats(&self) -> &QueryStats {
        &self.stats
    }

    /// Mean bytes of the items the store returned so far (None before any).
    pub fn mean_item_bytes(&self) -> Option<f64> {
        (self.sized.0 > 0).then(|| self.sized.1 as f64 / self.sized.0 as f64)
    }

    /// The Z-address a sort key starts with.
    pub fn z_of(&self, sk: &[u8]) -> Result<ZAddress, QueryError> {
        ZAddress::from_bytes(sk, self.bits).ok_or_else(|| QueryError::CorruptKey { sk: sk.to_vec(), bits: self.bits })
    }

    /// Reads one page of `[lo, hi]`; returns the LastEvaluatedKey, if any.
    pub async fn page(
        &mut self,
        lo: &ZAddress,
        hi: &ZAddress,
        exclusive_start: Option<Vec<u8>>,
        limit: Option<u32>,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        let req = QueryRequest {
            pk: self.query.pk.clone(),
            sk: key_condition(self.bits, lo, hi, self.query.suffixed),
            filter: self.query.filter.clone(),
            limit,
            exclusive_start,
            consistent: self.query.consistent,
        };
        let page = self.table.query(&req).await?;
        self.stats.requests += 1;
        self.stats.scanned += page.scanned_count as u64;
        self.stats.rcu += page.consumed_rcu;
        for item in page.items {
            self.sized.0 += 1;
            self.sized.1 += item.size() as u64;
            if self.query.zbox.is_relevant(&self.z_of(&item.sk)?) {
                self.stats.returned += 1;
                self.items.push(item);
            }
        }
        Ok(page.last_evaluated)
    }

    /// Reads all of `[lo, hi]`, page after page.
    pub async fn read_range(&mut self, lo: &ZAddress, hi: &ZAddress, limit: Option<u32>) -> Result<(), QueryError> {
        let mut after = None;
        loop {
            match self.page(lo, hi, after, limit).await? {
                Some(last) => after = Some(last),
                None => return Ok(()),
            }
        }
    }

    /// Where page-jump goes after a page that stopped at `last` (Z-order part 1,
    /// steps 5-6): on from `last` while it is inside the box, else to the
    /// box's next address after it (BIGMIN), or nowhere.
    pub fn after_page(&self, last: Vec<u8>) -> Result<Next, QueryError> {
        let z = self.z_of(&last)?;
        if self.zbox().is_relevant(&z) {
            return Ok(Next::After(last, z));
        }
        Ok(self.zbox().next_jump_in(&z).map_or(Next::Done, Next::Jump))
    }

    /// Where reading goes once `[.., hi]` is read to its end: the box's
    /// next address past `hi`, or nowhere.
    pub fn past(&self, hi: &ZAddress) -> Next {
        let zbox = self.zbox();
        let next = hi.checked_next(self.bits).filter(|_| hi < zbox.max()).and_then(|n| zbox.next_jump_in(&n));
        next.map_or(Next::Done, Next::Jump)
    }

    pub fn finish(self) -> QueryOutcome {
        QueryOutcome { items: self.items, stats: self.stats }
    }
}
