//! Items ↔ DynamoDB attribute maps. The partition key is the string `pk`,
//! the sort key the binary `sk`; other attributes keep their types.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use rust_decimal::Decimal;
use std::collections::HashMap;
use std::str::FromStr;
use zigzag_core::table::{AttrValue, Item, TableError, PK_ATTR, SK_ATTR};

pub type AttrMap = HashMap<String, AttributeValue>;

pub fn to_sdk(v: &AttrValue) -> AttributeValue {
    match v {
        AttrValue::S(s) => AttributeValue::S(s.clone()),
        // `normalize` drops trailing zeros: DynamoDB stores numbers
        // canonically anyway, and a shorter string is the same number.
        AttrValue::N(n) => AttributeValue::N(n.normalize().to_string()),
        AttrValue::B(b) => AttributeValue::B(Blob::new(b.clone())),
        AttrValue::Bool(b) => AttributeValue::Bool(*b),
    }
}

fn corrupt(what: String) -> TableError {
    TableError::Store(what.into())
}

pub fn from_sdk(name: &str, v: &AttributeValue) -> Result<AttrValue, TableError> {
    Ok(match v {
        AttributeValue::S(s) => AttrValue::S(s.clone()),
        AttributeValue::N(n) => AttrValue::N(
            Decimal::from_str(n)
                .or_else(|_| Decimal::from_scientific(n))
                .map_err(|e| corrupt(format!("attribute {name:?}: number {n:?} does not fit a decimal: {e}")))?,
        ),
        AttributeValue::B(b) => AttrValue::B(b.as_ref().to_vec()),
        AttributeValue::Bool(b) => AttrValue::Bool(*b),
        other => return Err(corrupt(format!("attribute {name:?} has a type Zigzag never writes: {other:?}"))),
    })
}

pub fn key(pk: &str, sk: &[u8]) -> AttrMap {
    HashMap::from([
        (PK_ATTR.to_string(), AttributeValue::S(pk.to_string())),
        (SK_ATTR.to_string(), AttributeValue::B(Blob::new(sk.to_vec()))),
    ])
}

pub fn item_to_sdk(item: &Item) -> AttrMap {
    let mut map = key(&item.pk, &item.sk);
    map.extend(item.attrs.iter().map(|(k, v)| (k.clone(), to_sdk(v))));
    map
}

pub fn item_from_sdk(map: &AttrMap) -> Result<Item, TableError> {
    let pk = match map.get(PK_ATTR) {
        Some(AttributeValue::S(s)) => s.clone(),
        other => return Err(corrupt(format!("item without a string partition key: {other:?}"))),
    };
    let sk = sort_key(map)?;
    let mut item = Item::new(pk, sk);
    for (name, v) in map {
        if name != PK_ATTR && name != SK_ATTR {
            item.attrs.insert(name.clone(), from_sdk(name, v)?);
        }
    }
    Ok(item)
}

/// The binary sort key of an item or of a LastEvaluatedKey.
pub fn sort_key(map: &AttrMap) -> Result<Vec<u8>, TableError> {
    match map.get(SK_ATTR) {
        Some(AttributeValue::B(b)) => Ok(b.as_ref().to_vec()),
        other => Err(corrupt(format!("item without a binary sort key: {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip() {
        let mut item = Item::new("p#1", vec![0, 255, 7]);
        item.attrs.insert("s".into(), AttrValue::S("x".into()));
        item.attrs.insert("n".into(), AttrValue::N(Decimal::new(-12_345_000, 3)));
        item.attrs.insert("b".into(), AttrValue::B(vec![]));
        item.attrs.insert("t".into(), AttrValue::Bool(true));
        let back = item_from_sdk(&item_to_sdk(&item)).unwrap();
        assert_eq!(back, item);
        assert_eq!(to_sdk(&AttrValue::N(Decimal::new(1_500, 3))), AttributeValue::N("1.5".into()));
    }

    #[test]
    fn numbers_in_exponent_form_parse() {
        assert_eq!(from_sdk("n", &AttributeValue::N("1E+2".into())).unwrap(), AttrValue::N(Decimal::from(100)));
        assert!(from_sdk("n", &AttributeValue::N("1E+200".into())).is_err());
        assert!(from_sdk("l", &AttributeValue::L(vec![])).is_err());
    }
}
