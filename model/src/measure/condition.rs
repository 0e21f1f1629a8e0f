//! A measure's `where`: which events it counts. Grammar (clauses joined by
//! `and`):
//!
//! ```text
//! FIELD = VALUE        type = click
//! FIELD != VALUE       status != 200
//! FIELD in V1, V2      status in 500, 502, 503
//! ```
//!
//! A value is a bare word (up to a space; in a list, also up to a comma)
//! or quoted ([`crate::literal`]: `"`, with `\"` and `\\`), for values with spaces,
//! commas or the word `and`: `path = "/a, b"`, or starting with `=`, `!`,
//! `<` or `>` (bare, `kind==a` would be an operator this grammar lacks).
//!
//! Values are typed by the field (`status = 200` compares integers), so a
//! literal the field could never hold is a configuration error.

use crate::error::ConfigError;
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
        let mut cur = Cursor { rest: text };
        let mut clauses = Vec::new();
        loop {
            let name = cur.name();
            if name.is_empty() {
                return Err(bad(format!("expected a field name at {:?}", cur.rest)));
            }
            let field = fields
                .iter()
                .position(|f| f.spec.name == name)
                .ok_or_else(|| bad(format!("{name:?} is not a declared field")))?;
            let (negate, list) = if cur.eat("!=") {
                (true, false)
            } else if cur.eat("=") {
                (false, false)
            } else if cur.eat_word("in") {
                (false, true)
            } else {
                return Err(bad(format!("after {name}: expected =, != or in, at {:?}", cur.rest)));
            };
            // `==`, `=<`, `!==`: an operator this grammar does not have, not a
            // value starting with `=` (which would quietly match nothing).
            if let Some(op) = cur.operator_left() {
                let written = match (negate, list) {
                    (true, _) => format!("!={op}"),
                    (false, false) => format!("={op}"),
                    (false, true) => format!("in {op}"),
                };
                return Err(bad(format!(
                    "after {name}: unknown operator {written:?} (the operators are =, != and in; \
                     quote a value that starts with {op:?})"
                )));
            }
            let mut values = Vec::new();
            loop {
                let v = cur.value(list).map_err(&bad)?;
                let typed = fields[field].parse_text(&v).map(FieldValue::into_owned);
                let typed = typed.map_err(|e| bad(format!("{v:?} cannot be a value of {name}: {e}")))?;
                if typed == FieldValue::Absent {
                    // Empty text reads as no value for non-strings: it would
                    // match events without the field.
                    return Err(bad(format!(
                        "an empty value is no value of the {} field {name}",
                        fields[field].spec.type_name()
                    )));
                }
                values.push(typed);
                if !(list && cur.eat(",")) {
                    break;
                }
            }
            clauses.push(Clause { field, negate, values });
            if cur.at_end() {
                return Ok(Condition { clauses });
            }
            if !cur.eat_word("and") {
                return Err(bad(format!("expected `and` or the end at {:?}", cur.rest)));
            }
        }
    }

    /// The fields it reads (indexes into the schema's fields).
    pub fn fields(&self) -> impl Iterator<Item = usize> + '_ {
        self.clauses.iter().map(|c| c.field)
    }

    /// Fields a clause wants equal to the empty text (`= ""`, `in ""`): a
    /// CSV cell can never hold it (an empty cell is no value).
    pub fn wants_empty_text(&self) -> impl Iterator<Item = usize> + '_ {
        let empty = FieldValue::Str(std::borrow::Cow::Borrowed(""));
        self.clauses.iter().filter(move |c| !c.negate && c.values.contains(&empty)).map(|c| c.field)
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

/// Where `Condition::parse` is in the text; every step skips leading spaces.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn at_end(&mut self) -> bool {
        self.skip_spaces();
        self.rest.is_empty()
    }

    /// A field name: up to a space, `=` or `!`.
    fn name(&mut self) -> &'a str {
        self.skip_spaces();
        let end = self.rest.find(|c: char| c.is_whitespace() || c == '=' || c == '!').unwrap_or(self.rest.len());
        let (name, rest) = self.rest.split_at(end);
        self.rest = rest;
        name
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_spaces();
        match self.rest.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    /// A keyword, followed by a space or the end (so `index` is not `in`).
    fn eat_word(&mut self, word: &str) -> bool {
        self.skip_spaces();
        match self.rest.strip_prefix(word) {
            Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                self.rest = rest;
                true
            }
            _ => false,
        }
    }

    /// What is left of an operator if the text goes on with operator
    /// characters (a value that starts with one must be quoted).
    fn operator_left(&mut self) -> Option<String> {
        self.skip_spaces();
        let rest = self.rest;
        let op_chars = |c: char| matches!(c, '=' | '!' | '<' | '>');
        let n = rest.find(|c: char| !op_chars(c)).unwrap_or(rest.len());
        (n > 0).then(|| rest[..n].to_string())
    }

    /// A quoted or bare value (in a list, a bare one also ends at a comma).
    fn value(&mut self, list: bool) -> Result<String, String> {
        self.skip_spaces();
        if let Some(q) = crate::literal::quoted(self.rest) {
            let (value, rest) = q?;
            self.rest = rest;
            return Ok(value);
        }
        let end = self.rest.find(|c: char| c.is_whitespace() || (list && c == ',')).unwrap_or(self.rest.len());
        let (value, rest) = self.rest.split_at(end);
        if value.is_empty() {
            return Err(format!("a value is missing at {:?}", self.rest));
        }
        self.rest = rest;
        Ok(value.to_string())
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

    #[test]
    fn quoted_values_hold_spaces_commas_quotes_and_the_word_and() {
        let f = fields();
        let ev = |k: &'static str| vec![FieldValue::Str(Cow::Borrowed(k)), FieldValue::Int(0)];
        let c = Condition::parse(r#"kind in "a, b", "rock and roll", "say \"hi\"", plain"#, &f).unwrap();
        for k in ["a, b", "rock and roll", r#"say "hi""#, "plain"] {
            assert!(c.matches(&ev(k)), "{k}");
        }
        assert!(!c.matches(&ev("a")));
        let c = Condition::parse(r#"kind="x=y"and status!=3"#, &f).unwrap();
        assert!(c.matches(&ev("x=y")), "a closing quote ends a value: no spaces needed");
        let c = Condition::parse(r#"kind = a=b and status != 3"#, &f).unwrap();
        assert!(c.matches(&ev("a=b")), "a bare value may hold `=`");
        let c = Condition::parse(r#"kind = "=a""#, &f).unwrap();
        assert!(c.matches(&ev("=a")), "a value starting with `=` is quoted");
        let c = Condition::parse(r#"kind = """#, &f).unwrap();
        assert!(c.matches(&ev("")), "an empty quoted value");
        for (bad, why) in [
            (r#"kind = "open"#, "does not end"),
            (r#"kind = "a\q""#, "escapes"),
            ("kind =", "value is missing"),
            ("kind = a b", "expected `and`"),
            ("kind = a and", "field name"),
            ("status in 1,, 2", "value is missing"),
            ("kind index a", "expected =, != or in"),
            (r#"status = """#, "an empty value"),
            ("kind==a", "unknown operator \"==\""),
            ("kind !== a", "unknown operator \"!==\""),
            ("kind =>a", "unknown operator \"=>\""),
            ("kind in =a", "quote a value"),
        ] {
            let e = Condition::parse(bad, &f).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
