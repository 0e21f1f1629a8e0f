//! Conditional deletes (DynamoDB DeleteItem with a ConditionExpression):
//! what retires bookkeeping items that are no longer needed, such as the
//! leases of shards read to their end long ago.

use super::{CmpOp, Guard, Item, TableError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    pub pk: String,
    pub sk: Vec<u8>,
    /// All must hold (on the item as it is; an absent item has no
    /// attributes); empty = unconditional.
    pub guards: Vec<Guard>,
}

impl DeleteRequest {
    pub fn new(pk: impl Into<String>, sk: impl Into<Vec<u8>>) -> Self {
        DeleteRequest { pk: pk.into(), sk: sk.into(), guards: Vec::new() }
    }

    /// Require `attr <op> v`, or that the attribute is absent when `absent_ok`.
    pub fn guard(mut self, attr: &str, op: CmpOp, v: impl Into<super::AttrValue>, absent_ok: bool) -> Self {
        self.guards.push(Guard { attr: attr.to_string(), op, value: v.into(), absent_ok });
        self
    }

    /// Rejects what DynamoDB rejects with a ValidationException.
    pub fn validate(&self) -> Result<(), TableError> {
        if self.pk.is_empty() || self.sk.is_empty() {
            return Err(TableError::InvalidRequest("key attributes must not be empty".into()));
        }
        Ok(())
    }
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The guards held; the item is gone. The item as it was (None if
    /// there was none: deleting an absent item succeeds, as in DynamoDB).
    Deleted(Option<Item>),
    /// A guard failed; nothing changed. The item as it is (None if absent).
    ConditionFailed(Option<Item>),
}

impl DeleteOutcome {
    pub fn deleted(&self) -> bool {
        matches!(self, DeleteOutcome::Deleted(_))
    }
}

/// Evaluates a delete against the current item: the caller removes the
/// item on `Deleted`.
pub fn check_delete(current: Option<Item>, req: &DeleteRequest) -> DeleteOutcome {
    if req.guards.iter().all(|g| g.holds(current.as_ref())) {
        DeleteOutcome::Deleted(current)
    } else {
        DeleteOutcome::ConditionFailed(current)
    }
}
