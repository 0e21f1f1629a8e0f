//! The JSON walk the scanner (`json/`) replaced, through serde_json's
//! visitor: kept as the tests' oracle, since serde_json is the reference
//! for which texts are JSON. Same trie, same captures, same errors.

use super::DecodeError;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use zigzag_model::schema::pointer::Pointer;
use zigzag_model::schema::FieldSpec;
use zigzag_model::ConfigError;

#[derive(Debug, Clone, Default)]
struct Node {
    /// The field captured here (a leaf).
    field: Option<usize>,
    /// Keys below, with each key's array index if it is one.
    children: Vec<(String, Option<usize>, Node)>,
}

#[derive(Debug, Clone)]
pub struct PathTrie {
    root: Node,
    names: Vec<String>,
}

impl PathTrie {
    pub fn new(fields: &[FieldSpec]) -> Result<PathTrie, ConfigError> {
        let mut root = Node::default();
        for (i, f) in fields.iter().enumerate() {
            let pointer = f.pointer()?;
            if pointer.tokens.is_empty() {
                return Err(ConfigError::Invalid(format!("field {}: the path names the whole record", f.name)));
            }
            let mut node = &mut root;
            for token in &pointer.tokens {
                if node.field.is_some() {
                    return Err(prefix_err(fields, &f.name, node.field));
                }
                let at = match node.children.iter().position(|(k, _, _)| k == token) {
                    Some(at) => at,
                    None => {
                        node.children.push((token.clone(), Pointer::index(token), Node::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].2;
            }
            if node.field.is_some() || !node.children.is_empty() {
                return Err(prefix_err(fields, &f.name, node.field));
            }
            node.field = Some(i);
        }
        Ok(PathTrie { root, names: fields.iter().map(|f| f.name.clone()).collect() })
    }

    /// The text of every field's value in `record` (None: not there).
    pub fn capture<'a>(&self, record: &'a str, out: &mut [Option<&'a str>]) -> Result<(), DecodeError> {
        if !record.trim_start().starts_with('{') {
            let kind = zigzag_model::schema::value::json_kind(record.trim_start());
            let (line, column) = (1, record.len() - record.trim_start().len() + 1);
            return Err(DecodeError::Json { line, column, message: format!("expected a JSON object, got {kind}") });
        }
        let mut de = serde_json::Deserializer::from_str(record);
        let mut problem = None;
        let walk = Walk { node: &self.root, out, problem: &mut problem };
        let result = walk.deserialize(&mut de).and_then(|()| de.end());
        match problem {
            Some(Problem::Duplicate(field)) => return Err(DecodeError::Duplicate(self.names[field].clone())),
            Some(Problem::Shape { field, expected, got }) => {
                let error = zigzag_model::schema::ValueError::WrongType { expected, got };
                return Err(DecodeError::Field { field: self.names[field].clone(), error });
            }
            None => {}
        }
        result.map_err(|e| DecodeError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string().split(" at line").next().unwrap_or_default().to_string(),
        })
    }
}

fn prefix_err(fields: &[FieldSpec], name: &str, other: Option<usize>) -> ConfigError {
    let other = other.map_or_else(|| "another field".to_string(), |i| format!("field {}", fields[i].name));
    ConfigError::Invalid(format!("field {name}: its path and the path of {other} are one inside the other"))
}

/// Why a walk stopped short of a JSON syntax error.
enum Problem {
    /// A captured key appears twice.
    Duplicate(usize),
    /// Where a path goes deeper, a value that cannot hold it (a string, a
    /// number, an array without the path's index): `field` is the first
    /// field below.
    Shape { field: usize, expected: &'static str, got: &'static str },
}

impl Node {
    /// The first field at or below this node (every node has one).
    fn first_field(&self) -> usize {
        self.field.or_else(|| self.children.first().map(|(_, _, c)| c.first_field())).unwrap_or(0)
    }
}

struct Walk<'n, 'o, 'a> {
    node: &'n Node,
    out: &'o mut [Option<&'a str>],
    problem: &'o mut Option<Problem>,
}

impl Walk<'_, '_, '_> {
    #[cold]
    #[inline(never)]
    fn shape<E: serde::de::Error>(self, got: &'static str) -> Result<(), E> {
        let expected =
            if self.node.children.iter().any(|(_, i, _)| i.is_some()) { "an array or object" } else { "an object" };
        *self.problem = Some(Problem::Shape { field: self.node.first_field(), expected, got });
        Err(E::custom("a value where the path goes deeper"))
    }
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Walk<'_, '_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if let Some(field) = self.node.field {
            let raw = <&'de RawValue>::deserialize(d)?;
            if self.out[field].replace(raw.get()).is_some() {
                *self.problem = Some(Problem::Duplicate(field));
                return Err(serde::de::Error::custom("duplicate field"));
            }
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

use serde::Deserialize;

/// An object key, borrowed unless it has escapes (serde's `Cow` always copies).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Walk<'_, '_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match self.node.children.iter().find(|(k, _, _)| *k == *key) {
                Some((_, _, child)) => {
                    map.next_value_seed(Walk { node: child, out: self.out, problem: self.problem })?
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        if !self.node.children.iter().any(|(_, index, _)| index.is_some()) {
            // `[]` for an empty object is a common encoder habit (PHP's
            // json_encode): the fields below are absent, as with `null`.
            return match seq.next_element::<IgnoredAny>()? {
                None => Ok(()),
                Some(_) => self.shape("an array"),
            };
        }
        let mut i = 0;
        loop {
            let wanted = self.node.children.iter().find(|(_, index, _)| *index == Some(i));
            let more = match wanted {
                Some((_, _, child)) => {
                    seq.next_element_seed(Walk { node: child, out: self.out, problem: self.problem })?.is_some()
                }
                None => seq.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }

    // A scalar where a path goes deeper: the record does not have the
    // declared shape (`null` is an absent subtree).
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.shape("a boolean")
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.shape("a number")
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.shape("a number")
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.shape("a number")
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.shape("a string")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}
