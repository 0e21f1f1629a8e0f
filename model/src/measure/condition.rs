//! A measure's `where`: which events it counts. Grammar (clauses joined by
//! `and`; a value may be quoted with `"`):
//!
//! ```text
//! FIELD = VALUE        type = click
//! FIELD != VALUE       status != 200
//! FIELD in V1, V2      status in 500, 502, 503
//! ```
//!
//! Values are typed by the field (`status = 200` compares integers), so a
//! literal the field could never hold is a configuration error.

use crate::config::ConfigError;
use crate::schema::{FieldValue, TypedField};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Clause {
    field: usize,
    negate: bool,
    values: Vec<FieldValue<'static>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    clauses: Vec<Clause>,
}

impl Condition {
    pub fn parse(text: &str, fields: &[TypedField]) -> Result<Condition, ConfigError> {
        let bad = |why: String| ConfigError::Invalid(format!("where {text:?}: {why}"));
        let mut clauses = Vec::new();
        for clause in text.split(" and ") {
            let clause = clause.trim();
            let (name, negate, rest) = if let Some((n, r)) = clause.split_once("!=") {
                (n, true, vec![r])
            } else if let Some((n, r)) = clause.split_once('=') {
                (n, false, vec![r])
            } else if let Some((n, r)) = clause.split_once(" in ") {
                (n, false, r.split(',').collect())
            } else {
                return Err(bad(format!("{clause:?} is not FIELD = VALUE, FIELD != VALUE or FIELD in V1, V2")));
            };
            let name = name.trim();
            let field = fields
                .iter()
                .position(|f| f.spec.name == name)
                .ok_or_else(|| bad(format!("{name:?} is not a declared field")))?;
            let values = rest
                .iter()
                .map(|v| {
                    let v = v.trim();
                    let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
                    fields[field]
                        .parse_text(v)
                        .map(FieldValue::into_owned)
                        .map_err(|e| bad(format!("{v:?} cannot be a value of {name}: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            clauses.push(Clause { field, negate, values });
        }
        Ok(Condition { clauses })
    }

    /// Does the event (its values, in field order) match? An absent value
    /// matches only `!=`.
    #[inline]
    pub fn matches(&self, values: &[FieldValue<'_>]) -> bool {
        self.clauses.iter().all(|c| {
            let v = &values[c.field];
            c.values.iter().any(|x| x == v) != c.negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{FieldSpec, FieldType};
    use std::borrow::Cow;

    fn fields() -> Vec<TypedField> {
        [FieldSpec::string("kind"), FieldSpec::string("status").with(FieldType::Integer { min: None, max: None })]
            .iter()
            .map(|f| TypedField::new(f).unwrap())
            .collect()
    }

    #[test]
    fn clauses_are_typed_by_their_field() {
        let f = fields();
        let c = Condition::parse(r#"kind = "click" and status in 500, 503"#, &f).unwrap();
        let ev = |k: &'static str, s: i64| vec![FieldValue::Str(Cow::Borrowed(k)), FieldValue::Int(s)];
        assert!(c.matches(&ev("click", 503)));
        assert!(!c.matches(&ev("click", 200)));
        assert!(!c.matches(&ev("view", 500)));
        let c = Condition::parse("status != 200", &f).unwrap();
        assert!(c.matches(&[FieldValue::Absent, FieldValue::Absent]), "absent is not 200");
        assert!(!c.matches(&ev("x", 200)));
        let e = Condition::parse("status = ok", &f).unwrap_err().to_string();
        assert!(e.contains("status") && e.contains("not a number"), "{e}");
        assert!(Condition::parse("colour = red", &f).unwrap_err().to_string().contains("not a declared field"));
        assert!(Condition::parse("kind click", &f).is_err());
    }
}
