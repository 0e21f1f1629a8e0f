//! Query requests and pages, and the evaluation every client-side store
//! shares (in-memory, SQLite): validation, Limit, the 1 MB page cap,
//! filtering and read-capacity accounting, all as DynamoDB does them.

use super::item::{AttrValue, Item};
use super::TableError;
use std::cmp::Ordering;

/// DynamoDB stops a page after this much data has been read.
pub const PAGE_BYTES: usize = 1 << 20;
/// One read capacity unit covers this many bytes (strongly consistent).
pub const RCU_BYTES: usize = 4096;

/// The sort-key part of a key condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SortKeyCondition {
    Any,
    Eq(Vec<u8>),
    /// Inclusive at both ends.
    Between(Vec<u8>, Vec<u8>),
    Ge(Vec<u8>),
    Gt(Vec<u8>),
    Le(Vec<u8>),
    Lt(Vec<u8>),
    BeginsWith(Vec<u8>),
}

impl SortKeyCondition {
    pub fn matches(&self, sk: &[u8]) -> bool {
        match self {
            SortKeyCondition::Any => true,
            SortKeyCondition::Eq(v) => sk == v.as_slice(),
            SortKeyCondition::Between(a, b) => a.as_slice() <= sk && sk <= b.as_slice(),
            SortKeyCondition::Ge(v) => sk >= v.as_slice(),
            SortKeyCondition::Gt(v) => sk > v.as_slice(),
            SortKeyCondition::Le(v) => sk <= v.as_slice(),
            SortKeyCondition::Lt(v) => sk < v.as_slice(),
            SortKeyCondition::BeginsWith(p) => sk.starts_with(p),
        }
    }

    fn operands(&self) -> Vec<&[u8]> {
        match self {
            SortKeyCondition::Any => vec![],
            SortKeyCondition::Between(a, b) => vec![a, b],
            SortKeyCondition::Eq(v)
            | SortKeyCondition::Ge(v)
            | SortKeyCondition::Gt(v)
            | SortKeyCondition::Le(v)
            | SortKeyCondition::Lt(v)
            | SortKeyCondition::BeginsWith(v) => vec![v],
        }
    }

    /// The smallest key that can match (the scan's start), if bounded below.
    pub fn lower(&self) -> Option<&[u8]> {
        match self {
            SortKeyCondition::Eq(v)
            | SortKeyCondition::Between(v, _)
            | SortKeyCondition::Ge(v)
            | SortKeyCondition::Gt(v)
            | SortKeyCondition::BeginsWith(v) => Some(v),
            _ => None,
        }
    }
}

/// A filter test on one non-key attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Eq(AttrValue),
    Between(AttrValue, AttrValue),
    Ge(AttrValue),
    Le(AttrValue),
    In(Vec<AttrValue>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub attr: String,
    pub test: Test,
}

/// A conjunction of conditions, applied after items are read (it saves
/// bandwidth, never capacity). A missing attribute or a value of another
/// type fails the test, as in DynamoDB.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter(pub Vec<Condition>);

impl Filter {
    pub fn none() -> Self {
        Filter(Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn and(mut self, attr: &str, test: Test) -> Self {
        self.0.push(Condition { attr: attr.to_string(), test });
        self
    }

    pub fn matches(&self, item: &Item) -> bool {
        self.0.iter().all(|c| {
            let Some(v) = item.attrs.get(&c.attr) else { return false };
            let cmp = |x: &AttrValue| v.compare(x);
            match &c.test {
                Test::Eq(x) => cmp(x) == Some(Ordering::Equal),
                Test::Between(a, b) => {
                    matches!(cmp(a), Some(Ordering::Greater | Ordering::Equal))
                        && matches!(cmp(b), Some(Ordering::Less | Ordering::Equal))
                }
                Test::Ge(x) => matches!(cmp(x), Some(Ordering::Greater | Ordering::Equal)),
                Test::Le(x) => matches!(cmp(x), Some(Ordering::Less | Ordering::Equal)),
                Test::In(xs) => xs.iter().any(|x| cmp(x) == Some(Ordering::Equal)),
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRequest {
    pub pk: String,
    pub sk: SortKeyCondition,
    pub filter: Filter,
    /// Items to *evaluate* (before the filter), not items to return.
    pub limit: Option<u32>,
    /// Continue after this sort key (a previous page's LastEvaluatedKey).
    pub exclusive_start: Option<Vec<u8>>,
    /// Strongly consistent reads cost twice as much.
    pub consistent: bool,
}

impl QueryRequest {
    pub fn new(pk: impl Into<String>, sk: SortKeyCondition) -> Self {
        QueryRequest {
            pk: pk.into(),
            sk,
            filter: Filter::none(),
            limit: None,
            exclusive_start: None,
            consistent: false,
        }
    }

    /// Rejects what DynamoDB rejects with a ValidationException.
    pub fn validate(&self) -> Result<(), TableError> {
        let invalid = |m: &str| Err(TableError::InvalidRequest(m.to_string()));
        if self.pk.is_empty() {
            return invalid("the partition key value is empty");
        }
        if self.limit == Some(0) {
            return invalid("Limit must be at least 1");
        }
        if let SortKeyCondition::Between(a, b) = &self.sk {
            if a > b {
                return invalid("BETWEEN requires the lower bound to be <= the upper bound");
            }
        }
        if self.sk.operands().iter().any(|o| o.is_empty()) {
            return invalid("a binary sort key operand is empty");
        }
        for c in &self.filter.0 {
            if let Test::Between(a, b) = &c.test {
                if !matches!(a.compare(b), Some(Ordering::Less | Ordering::Equal)) {
                    return invalid("filter BETWEEN requires bounds of one type, lower <= upper");
                }
            }
        }
        if let Some(start) = &self.exclusive_start {
            if !self.sk.matches(start) {
                return invalid("The provided starting key is outside query boundaries based on provided conditions");
            }
        }
        Ok(())
    }
}

/// One page of a Query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryPage {
    /// Items that passed the filter.
    pub items: Vec<Item>,
    /// Sort key of the last item evaluated, present whenever the page
    /// stopped early (Limit or 1 MB), even if nothing follows.
    pub last_evaluated: Option<Vec<u8>>,
    /// Items evaluated (DynamoDB's ScannedCount).
    pub scanned_count: u32,
    /// Items returned (DynamoDB's Count).
    pub count: u32,
    /// Read capacity consumed by this page.
    pub consumed_rcu: f64,
}

/// Read capacity for reading `bytes` in one Query: the total rounded up to
/// 4 KB (at least one unit), halved for eventually consistent reads.
pub fn read_capacity(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(RCU_BYTES).max(1) as f64;
    if consistent {
        units
    } else {
        units / 2.0
    }
}

/// Builds a page from the items of the partition that match the key
/// condition, in ascending sort-key order, starting after the exclusive
/// start key. The caller has validated the request.
pub fn evaluate_page(req: &QueryRequest, candidates: impl IntoIterator<Item = Item>) -> QueryPage {
    let mut page = QueryPage::default();
    let mut bytes = 0usize;
    let limit = req.limit.unwrap_or(u32::MAX);
    let mut iter = candidates.into_iter().peekable();
    while let Some(item) = iter.next() {
        bytes += item.size();
        page.scanned_count += 1;
        let last_key = item.sk.clone();
        if req.filter.matches(&item) {
            page.items.push(item);
        }
        let stopped_by_limit = page.scanned_count >= limit;
        let stopped_by_size = bytes >= PAGE_BYTES && iter.peek().is_some();
        if stopped_by_limit || stopped_by_size {
            page.last_evaluated = Some(last_key);
            break;
        }
    }
    page.count = page.items.len() as u32;
    page.consumed_rcu = read_capacity(bytes, req.consistent);
    page
}
