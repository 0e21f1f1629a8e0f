//! Conditional single-item updates: the subset of DynamoDB's UpdateItem
//! that exactly-once aggregation needs, with one evaluator shared by the
//! client-side stores (in-memory, SQLite). The DynamoDB store translates the
//! same request into an UpdateExpression + ConditionExpression.
//!
//! - actions: `ADD a :n` (numbers; creates at `:n`), `SET a = :v`,
//!   `SET a = if_not_exists(a, :v)`;
//! - condition: a conjunction of guards `attribute_not_exists(a) OR a <op> :v`
//!   (or, without `absent_ok`, just `a <op> :v`).
//!
//! The update is all-or-nothing: when a guard fails nothing changes and the
//! caller gets the item as it was (DynamoDB's
//! `ReturnValuesOnConditionCheckFailure = ALL_OLD`), so it can decide what to
//! do without another read.

use super::item::{AttrValue, Item};
use super::TableError;
use rust_decimal::Decimal;
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `ADD attr :n`: numeric increment, creating the attribute at `n`.
    Add(Decimal),
    /// `SET attr = :v`.
    Set(AttrValue),
    /// `SET attr = if_not_exists(attr, :v)`.
    SetIfAbsent(AttrValue),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn holds(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Le => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Ge => ord != Ordering::Less,
        }
    }

    /// The DynamoDB expression operator.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// `attr <op> value`, or also true when the attribute is absent if `absent_ok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub attr: String,
    pub op: CmpOp,
    pub value: AttrValue,
    pub absent_ok: bool,
}

impl Guard {
    pub fn holds(&self, item: Option<&Item>) -> bool {
        match item.and_then(|i| i.attrs.get(&self.attr)) {
            None => self.absent_ok,
            // Values of different types never compare (DynamoDB: false).
            Some(v) => v.compare(&self.value).is_some_and(|o| self.op.holds(o)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRequest {
    pub pk: String,
    pub sk: Vec<u8>,
    pub actions: Vec<(String, Action)>,
    /// All must hold; empty = unconditional.
    pub guards: Vec<Guard>,
}

impl UpdateRequest {
    pub fn new(pk: impl Into<String>, sk: impl Into<Vec<u8>>) -> Self {
        UpdateRequest { pk: pk.into(), sk: sk.into(), actions: Vec::new(), guards: Vec::new() }
    }

    pub fn add(mut self, attr: &str, n: Decimal) -> Self {
        self.actions.push((attr.to_string(), Action::Add(n)));
        self
    }

    pub fn set(mut self, attr: &str, v: impl Into<AttrValue>) -> Self {
        self.actions.push((attr.to_string(), Action::Set(v.into())));
        self
    }

    pub fn set_if_absent(mut self, attr: &str, v: impl Into<AttrValue>) -> Self {
        self.actions.push((attr.to_string(), Action::SetIfAbsent(v.into())));
        self
    }

    /// Require `attr <op> v`, or that the attribute is absent when `absent_ok`.
    pub fn guard(mut self, attr: &str, op: CmpOp, v: impl Into<AttrValue>, absent_ok: bool) -> Self {
        self.guards.push(Guard { attr: attr.to_string(), op, value: v.into(), absent_ok });
        self
    }

    /// Rejects what DynamoDB rejects with a ValidationException.
    pub fn validate(&self) -> Result<(), TableError> {
        let invalid = |m: String| Err(TableError::InvalidRequest(m));
        if self.pk.is_empty() || self.sk.is_empty() {
            return invalid("key attributes must not be empty".into());
        }
        if self.actions.is_empty() {
            return invalid("an update needs at least one action".into());
        }
        for (i, (attr, _)) in self.actions.iter().enumerate() {
            if attr == super::PK_ATTR || attr == super::SK_ATTR {
                return invalid(format!("cannot update key attribute {attr:?}"));
            }
            if self.actions[..i].iter().any(|(a, _)| a == attr) {
                return invalid(format!("two actions on attribute {attr:?} (overlapping paths)"));
            }
        }
        Ok(())
    }
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// Applied; the item as it now is.
    Applied(Item),
    /// A guard failed; nothing changed. The item as it is (None if absent).
    ConditionFailed(Option<Item>),
}

impl UpdateOutcome {
    pub fn applied(&self) -> bool {
        matches!(self, UpdateOutcome::Applied(_))
    }
}

/// Evaluates an update against the current item (None = absent). Returns
/// the outcome; on `Applied`, the caller stores the new item. The request
/// must be valid.
pub fn apply_update(current: Option<Item>, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
    if !req.guards.iter().all(|g| g.holds(current.as_ref())) {
        return Ok(UpdateOutcome::ConditionFailed(current));
    }
    let mut item = current.unwrap_or_else(|| Item::new(req.pk.clone(), req.sk.clone()));
    for (attr, action) in &req.actions {
        match action {
            Action::Set(v) => {
                item.attrs.insert(attr.clone(), v.clone());
            }
            Action::SetIfAbsent(v) => {
                item.attrs.entry(attr.clone()).or_insert_with(|| v.clone());
            }
            Action::Add(n) => match item.attrs.get_mut(attr) {
                None => {
                    item.attrs.insert(attr.clone(), AttrValue::N(*n));
                }
                Some(AttrValue::N(old)) => {
                    *old = old.checked_add(*n).ok_or_else(|| {
                        TableError::InvalidRequest(format!("ADD overflows number attribute {attr:?}"))
                    })?;
                }
                Some(_) => {
                    return Err(TableError::InvalidRequest(format!(
                        "ADD on attribute {attr:?}, which is not a number (type mismatch)"
                    )))
                }
            },
        }
    }
    Ok(UpdateOutcome::Applied(item))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(v: i64) -> Decimal {
        Decimal::from(v)
    }

    #[test]
    fn add_creates_then_accumulates() {
        let req = UpdateRequest::new("p", vec![1]).add("c", n(2));
        let UpdateOutcome::Applied(item) = apply_update(None, &req).unwrap() else { panic!() };
        assert_eq!(item.attrs["c"], AttrValue::N(n(2)));
        let UpdateOutcome::Applied(item) = apply_update(Some(item), &req).unwrap() else { panic!() };
        assert_eq!(item.attrs["c"], AttrValue::N(n(4)));
    }

    #[test]
    fn guards_gate_the_whole_update() {
        let req = UpdateRequest::new("p", vec![1]).add("c", n(1)).set("h", 5).guard("h", CmpOp::Lt, 5, true);
        let UpdateOutcome::Applied(item) = apply_update(None, &req).unwrap() else { panic!() };
        // h = 5 now: `h < 5` fails, the item comes back unchanged.
        let out = apply_update(Some(item.clone()), &req).unwrap();
        assert_eq!(out, UpdateOutcome::ConditionFailed(Some(item)));
        let strict = UpdateRequest::new("p", vec![1]).set("x", 1).guard("h", CmpOp::Eq, 1, false);
        assert_eq!(apply_update(None, &strict).unwrap(), UpdateOutcome::ConditionFailed(None));
    }

    #[test]
    fn if_absent_keeps_existing_values() {
        let first = UpdateRequest::new("p", vec![1]).set_if_absent("m", 3);
        let UpdateOutcome::Applied(item) = apply_update(None, &first).unwrap() else { panic!() };
        let second = UpdateRequest::new("p", vec![1]).set_if_absent("m", 1);
        let UpdateOutcome::Applied(item) = apply_update(Some(item), &second).unwrap() else { panic!() };
        assert_eq!(item.attrs["m"], AttrValue::N(n(3)));
    }

    #[test]
    fn type_mismatches_are_errors_or_false() {
        let item = Item::new("p", vec![1]).with("s", "text");
        let add = UpdateRequest::new("p", vec![1]).add("s", n(1));
        assert!(apply_update(Some(item.clone()), &add).is_err());
        let guard = UpdateRequest::new("p", vec![1]).set("x", 1).guard("s", CmpOp::Lt, 3, true);
        assert!(!apply_update(Some(item), &guard).unwrap().applied());
        let dup = UpdateRequest::new("p", vec![1]).set("x", 1).add("x", n(1));
        assert!(dup.validate().is_err());
    }
}
