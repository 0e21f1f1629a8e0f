//! Items and attribute values, sized by DynamoDB's rules.

use rust_decimal::Decimal;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Attribute name of the partition key in every store.
pub const PK_ATTR: &str = "pk";
/// Attribute name of the (binary) sort key in every store.
pub const SK_ATTR: &str = "sk";
/// Attribute holding the epoch second after which an item may be deleted
/// (DynamoDB's TTL attribute; [`super::SortedTable::purge_expired`]).
pub const TTL_ATTR: &str = "expires";

/// A DynamoDB attribute value (the scalar types Zigzag uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    S(String),
    N(Decimal),
    B(Vec<u8>),
    Bool(bool),
}

impl AttrValue {
    /// DynamoDB comparison: only values of the same type compare; numbers
    /// numerically, strings and binaries as unsigned bytes.
    pub fn compare(&self, other: &AttrValue) -> Option<Ordering> {
        match (self, other) {
            (AttrValue::S(a), AttrValue::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            (AttrValue::N(a), AttrValue::N(b)) => Some(a.cmp(b)),
            (AttrValue::B(a), AttrValue::B(b)) => Some(a.cmp(b)),
            (AttrValue::Bool(a), AttrValue::Bool(b)) if a == b => Some(Ordering::Equal),
            _ => None,
        }
    }

    /// Stored size of the value (the attribute name is added by the item).
    pub fn size(&self) -> usize {
        match self {
            AttrValue::S(s) => s.len(),
            AttrValue::B(b) => b.len(),
            AttrValue::Bool(_) => 1,
            AttrValue::N(n) => number_size(n),
        }
    }
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::S(s.to_string())
    }
}

impl From<i64> for AttrValue {
    fn from(n: i64) -> Self {
        AttrValue::N(Decimal::from(n))
    }
}

/// "1 byte per two significant digits, plus 1" (leading and trailing zeros trimmed).
fn number_size(n: &Decimal) -> usize {
    let mantissa = n.normalize().mantissa().unsigned_abs();
    let mut digits = if mantissa == 0 { 1 } else { mantissa.ilog10() as usize + 1 };
    let mut m = mantissa;
    while m != 0 && m.is_multiple_of(10) {
        m /= 10;
        digits -= 1;
    }
    digits.div_ceil(2) + 1
}

/// One item: the partition key, the binary sort key, and other attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub pk: String,
    pub sk: Vec<u8>,
    pub attrs: BTreeMap<String, AttrValue>,
}

impl Item {
    pub fn new(pk: impl Into<String>, sk: impl Into<Vec<u8>>) -> Self {
        Item { pk: pk.into(), sk: sk.into(), attrs: BTreeMap::new() }
    }

    pub fn with(mut self, name: &str, value: impl Into<AttrValue>) -> Self {
        self.attrs.insert(name.to_string(), value.into());
        self
    }

    /// Rejects what DynamoDB rejects on write: empty key values.
    pub fn validate_keys(&self) -> Result<(), super::TableError> {
        if self.pk.is_empty() || self.sk.is_empty() {
            return Err(super::TableError::InvalidRequest("key attributes must not be empty".into()));
        }
        Ok(())
    }

    /// Size by DynamoDB's rules: attribute names plus values, keys included.
    pub fn size(&self) -> usize {
        PK_ATTR.len()
            + self.pk.len()
            + SK_ATTR.len()
            + self.sk.len()
            + self.attrs.iter().map(|(k, v)| k.len() + v.size()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn sizes() {
        let n = |s: &str| number_size(&Decimal::from_str(s).unwrap());
        assert_eq!(n("0"), 2);
        assert_eq!(n("7"), 2);
        assert_eq!(n("12"), 2);
        assert_eq!(n("123"), 3);
        assert_eq!(n("1000"), 2, "trailing zeros trimmed");
        assert_eq!(n("-12.345"), 4);
        let item = Item::new("p", vec![1, 2]).with("name", "abc").with("n", 5);
        assert_eq!(item.size(), 2 + 1 + 2 + 2 + 4 + 3 + 1 + 2);
    }

    #[test]
    fn comparisons_need_matching_types() {
        let n = |s: &str| AttrValue::N(Decimal::from_str(s).unwrap());
        assert_eq!(n("10").compare(&n("9")), Some(Ordering::Greater));
        assert_eq!(AttrValue::from("10").compare(&AttrValue::from("9")), Some(Ordering::Less));
        assert_eq!(n("1").compare(&AttrValue::from("1")), None);
        assert_eq!(AttrValue::B(vec![0x80]).compare(&AttrValue::B(vec![0x7f])), Some(Ordering::Greater));
    }
}
