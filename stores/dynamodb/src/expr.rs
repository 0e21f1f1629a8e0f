//! Requests → DynamoDB expressions. Every attribute name goes through a
//! `#placeholder` (our names may be reserved words) and every value through
//! a `:placeholder`.

use crate::convert::{to_sdk, AttrMap};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use zigzag_core::table::{Action, AttrValue, Filter, Guard, SortKeyCondition, Test, UpdateRequest, PK_ATTR, SK_ATTR};

/// Expression text with its name and value placeholders.
#[derive(Debug, Default)]
pub struct Expressions {
    pub names: HashMap<String, String>,
    pub values: AttrMap,
}

impl Expressions {
    fn name(&mut self, attr: &str) -> String {
        let p = format!("#n{}", self.names.len());
        self.names.insert(p.clone(), attr.to_string());
        p
    }

    fn value(&mut self, v: AttributeValue) -> String {
        let p = format!(":v{}", self.values.len());
        self.values.insert(p.clone(), v);
        p
    }

    fn attr_value(&mut self, v: &AttrValue) -> String {
        self.value(to_sdk(v))
    }

    fn bytes(&mut self, b: &[u8]) -> String {
        self.value(AttributeValue::B(Blob::new(b.to_vec())))
    }

    /// `KeyConditionExpression` of a Query.
    pub fn key_condition(&mut self, pk: &str, sk: &SortKeyCondition) -> String {
        let pk_name = self.name(PK_ATTR);
        let pk_value = self.value(AttributeValue::S(pk.to_string()));
        let mut text = format!("{pk_name} = {pk_value}");
        if matches!(sk, SortKeyCondition::Any) {
            return text;
        }
        let n = self.name(SK_ATTR);
        let cond = match sk {
            SortKeyCondition::Any => unreachable!("handled above"),
            SortKeyCondition::Eq(v) => format!("{n} = {}", self.bytes(v)),
            SortKeyCondition::Between(a, b) => format!("{n} BETWEEN {} AND {}", self.bytes(a), self.bytes(b)),
            SortKeyCondition::Ge(v) => format!("{n} >= {}", self.bytes(v)),
            SortKeyCondition::Gt(v) => format!("{n} > {}", self.bytes(v)),
            SortKeyCondition::Le(v) => format!("{n} <= {}", self.bytes(v)),
            SortKeyCondition::Lt(v) => format!("{n} < {}", self.bytes(v)),
            SortKeyCondition::BeginsWith(v) => format!("begins_with({n}, {})", self.bytes(v)),
        };
        text.push_str(" AND ");
        text.push_str(&cond);
        text
    }

    /// `FilterExpression` of a Query (None when the filter is empty).
    pub fn filter(&mut self, filter: &Filter) -> Option<String> {
        if filter.is_empty() {
            return None;
        }
        let parts: Vec<String> = filter
            .0
            .iter()
            .map(|c| {
                let n = self.name(&c.attr);
                match &c.test {
                    Test::Eq(v) => format!("{n} = {}", self.attr_value(v)),
                    Test::Between(a, b) => format!("{n} BETWEEN {} AND {}", self.attr_value(a), self.attr_value(b)),
                    Test::Ge(v) => format!("{n} >= {}", self.attr_value(v)),
                    Test::Le(v) => format!("{n} <= {}", self.attr_value(v)),
                    Test::In(vs) => {
                        let list: Vec<String> = vs.iter().map(|v| self.attr_value(v)).collect();
                        format!("{n} IN ({})", list.join(", "))
                    }
                }
            })
            .collect();
        Some(parts.join(" AND "))
    }

    /// `UpdateExpression` and `ConditionExpression` (None when unguarded)
    /// of an UpdateItem.
    pub fn update(&mut self, req: &UpdateRequest) -> (String, Option<String>) {
        let mut sets = Vec::new();
        let mut adds = Vec::new();
        for (attr, action) in &req.actions {
            let n = self.name(attr);
            match action {
                Action::Set(v) => sets.push(format!("{n} = {}", self.attr_value(v))),
                Action::SetIfAbsent(v) => sets.push(format!("{n} = if_not_exists({n}, {})", self.attr_value(v))),
                Action::Add(d) => adds.push(format!("{n} {}", self.attr_value(&AttrValue::N(*d)))),
            }
        }
        let mut update = String::new();
        if !sets.is_empty() {
            update.push_str("SET ");
            update.push_str(&sets.join(", "));
        }
        if !adds.is_empty() {
            if !update.is_empty() {
                update.push(' ');
            }
            update.push_str("ADD ");
            update.push_str(&adds.join(", "));
        }
        let condition = self.condition(&req.guards);
        (update, condition)
    }

    /// The `ConditionExpression` of guards (None when there are none).
    pub fn condition(&mut self, guards: &[Guard]) -> Option<String> {
        let guards: Vec<String> = guards
            .iter()
            .map(|g| {
                let n = self.name(&g.attr);
                let cmp = format!("{n} {} {}", g.op.symbol(), self.attr_value(&g.value));
                if g.absent_ok {
                    format!("(attribute_not_exists({n}) OR {cmp})")
                } else {
                    cmp
                }
            })
            .collect();
        (!guards.is_empty()).then(|| guards.join(" AND "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use zigzag_core::table::CmpOp;

    #[test]
    fn update_expressions_read_like_dynamodb() {
        let req = UpdateRequest::new("p", vec![1])
            .add("clicks", Decimal::from(3))
            .set("label", "x")
            .set_if_absent("first", 7i64)
            .guard("w#0", CmpOp::Lt, 5i64, true)
            .guard("max", CmpOp::Ge, 2i64, false);
        let mut e = Expressions::default();
        let (update, cond) = e.update(&req);
        assert_eq!(update, "SET #n1 = :v1, #n2 = if_not_exists(#n2, :v2) ADD #n0 :v0");
        assert_eq!(cond.as_deref(), Some("(attribute_not_exists(#n3) OR #n3 < :v3) AND #n4 >= :v4"));
        assert_eq!(e.names["#n3"], "w#0");
        assert_eq!(e.values[":v0"], AttributeValue::N("3".into()));
    }

    #[test]
    fn key_conditions_and_filters() {
        let mut e = Expressions::default();
        assert_eq!(
            e.key_condition("p", &SortKeyCondition::Between(vec![1], vec![2])),
            "#n0 = :v0 AND #n1 BETWEEN :v1 AND :v2"
        );
        let f = Filter::none().and("a", Test::In(vec![1i64.into(), 2i64.into()])).and("b", Test::Ge("k".into()));
        assert_eq!(e.filter(&f).as_deref(), Some("#n2 IN (:v3, :v4) AND #n3 >= :v5"));
        assert_eq!(e.filter(&Filter::none()), None);
        let mut e = Expressions::default();
        assert_eq!(e.key_condition("p", &SortKeyCondition::BeginsWith(vec![9])), "#n0 = :v0 AND begins_with(#n1, :v1)");
    }
}
