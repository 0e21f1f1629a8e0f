//! One pass over a JSON record: the schema's paths compiled into a trie;
//! the scanner descends only into keys (and array indexes) some path
//! names, skips everything else, validating it without building it, and
//! keeps each wanted value's text as it stands in the record (typed
//! afterwards, so numbers keep their exact digits).
//!
//! Our own scanner rather than serde_json's visitor: the visitor costs
//! a call per token and compares every key through a `Cow`, and decoding
//! is most of ingest's time per event. It accepts exactly RFC 8259 JSON
//! (as serde_json does: it is tested against it on mutated records), with
//! no depth limit on skipped values (they are skipped with a bit per open
//! bracket, not by recursion); the walk itself recurses only along the
//! schema's paths.

mod marks;
mod scan;

pub(crate) use marks::Marks;

use super::DecodeError;
use scan::{Fail, Key, Scan, Step, Stop, STRING_STOP};
use zigzag_model::schema::pointer::Pointer;
use zigzag_model::schema::{FieldSpec, ValueError};
use zigzag_model::ConfigError;

#[derive(Debug, Clone, Default)]
struct Node {
    /// The field captured here (a leaf).
    field: Option<usize>,
    children: Vec<Child>,
}

/// A token of a path below a node: an object key, and the array index it
/// is if it is all digits.
#[derive(Debug, Clone)]
struct Child {
    key: Box<[u8]>,
    /// The key's first 8 bytes, zero-padded: most keys are told apart by
    /// one comparison of words, without a call to `memcmp`.
    head: u64,
    /// Which bytes of a word `head` is compared with: the key's first 8.
    /// None for a key a record cannot write as it is (holding `"`, `\`
    /// or a control character): such a key is only found unescaped.
    plain_mask: Option<u64>,
    index: Option<usize>,
    node: Node,
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
                let at = match node.children.iter().position(|c| &*c.key == token.as_bytes()) {
                    Some(at) => at,
                    None => {
                        node.children.push(Child {
                            key: token.as_bytes().into(),
                            head: head(token.as_bytes()),
                            plain_mask: (!token.bytes().any(|b| STRING_STOP[b as usize])).then(|| {
                                if token.len() >= 8 {
                                    u64::MAX
                                } else {
                                    (1u64 << (token.len() * 8)) - 1
                                }
                            }),
                            index: Pointer::index(token),
                            node: Node::default(),
                        });
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].node;
            }
            if node.field.is_some() || !node.children.is_empty() {
                return Err(prefix_err(fields, &f.name, node.field));
            }
            node.field = Some(i);
        }
        Ok(PathTrie { root, names: fields.iter().map(|f| f.name.clone()).collect() })
    }

    /// The text of every field's value in `record` (None: not there);
    /// `marks`, when given, are the record's.
    pub fn capture<'a>(
        &self,
        record: &'a str,
        marks: Option<&Marks>,
        out: &mut [Option<Raw<'a>>],
    ) -> Result<(), DecodeError> {
        let plain = marks.filter(|m| m.plain);
        let mut scan = Scan { text: record, b: record.as_bytes(), i: 0, stop: None, plain };
        scan.ws();
        if scan.peek() != Some(b'{') {
            let kind = zigzag_model::schema::value::json_kind(&record[scan.i..]);
            let (line, column) = line_column(record, scan.i);
            return Err(DecodeError::Json { line, column, message: format!("expected a JSON object, got {kind}") });
        }
        let walked = scan.object(&self.root, out).and_then(|()| {
            scan.ws();
            match scan.peek() {
                None => Ok(()),
                Some(_) => Err(scan.syntax("trailing characters")),
            }
        });
        let Err(Fail) = walked else { return Ok(()) };
        // Every `Fail` is made by `Scan::fail`, which keeps the reason.
        match scan.stop.take().unwrap_or(Stop::Syntax { at: scan.i, message: "invalid JSON" }) {
            Stop::Syntax { at, message } => {
                let (line, column) = line_column(record, at);
                Err(DecodeError::Json { line, column, message: message.to_string() })
            }
            Stop::Duplicate(field) => Err(DecodeError::Duplicate(self.names[field].clone())),
            Stop::Shape { field, expected, got } => Err(DecodeError::Field {
                field: self.names[field].clone(),
                error: ValueError::WrongType { expected, got },
            }),
        }
    }
}

fn prefix_err(fields: &[FieldSpec], name: &str, other: Option<usize>) -> ConfigError {
    let other = other.map_or_else(|| "another field".to_string(), |i| format!("field {}", fields[i].name));
    ConfigError::Invalid(format!("field {name}: its path and the path of {other} are one inside the other"))
}

/// The first 8 bytes of `key`, zero-padded, little-endian.
fn head(key: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = key.len().min(8);
    word[..n].copy_from_slice(&key[..n]);
    u64::from_le_bytes(word)
}

/// 1-based line and column (in bytes) of offset `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = at - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
    (line, column)
}

impl Node {
    /// The first field at or below this node (every node has one).
    fn first_field(&self) -> usize {
        self.field.or_else(|| self.children.first().map(|c| c.node.first_field())).unwrap_or(0)
    }

    fn has_indexes(&self) -> bool {
        self.children.iter().any(|c| c.index.is_some())
    }

    fn shape(&self, got: &'static str) -> Stop {
        let expected = if self.has_indexes() { "an array or object" } else { "an object" };
        Stop::Shape { field: self.first_field(), expected, got }
    }
}

/// A captured value's text as it stands in the record.
#[derive(Debug, Clone, Copy)]
pub struct Raw<'a> {
    pub text: &'a str,
    /// A string holding escapes (to be unescaped when typed).
    pub escaped: bool,
}

/// The walk along the schema's paths; the lexing is in `scan.rs`.
impl<'a> Scan<'a, '_> {
    /// An object the walk descends into, at its `{`: keys some path names
    /// are walked, the others' values skipped.
    fn object(&mut self, node: &Node, out: &mut [Option<Raw<'a>>]) -> Step {
        if self.enter(b'}') {
            return Ok(());
        }
        // The child expected next: records of one producer keep their
        // keys in one order, so after the key of child k comes child k+1's.
        let mut expected = 0;
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.eof_or("EOF while parsing an object", "key must be a string"));
            }
            let child = match self.known_key(node, expected) {
                Some(at) => Some(at),
                // Not a path's key as it stands: another key, or one written
                // with escapes (then compared once unescaped).
                None => match self.key()? {
                    Key::Plain => None,
                    Key::Unescaped(key) => node.children.iter().position(|c| *c.key == *key.as_bytes()),
                },
            };
            if let Some(at) = child {
                expected = at + 1;
            }
            self.colon()?;
            match child {
                Some(at) => self.walk(&node.children[at].node, out)?,
                None => self.skip()?,
            }
            if self.member_end(b'}')? {
                return Ok(());
            }
        }
    }

    /// Which child's key the key at `"` is, if it is one written as it
    /// stands: found by comparing bytes (each child's, and the closing
    /// quote after them), without scanning a string. Tried from child
    /// `from` on: records of one producer keep their keys in one order.
    #[inline]
    fn known_key(&mut self, node: &Node, from: usize) -> Option<usize> {
        let start = self.i + 1;
        let word = match self.b.get(start..start + 8) {
            Some(w) => u64::from_le_bytes(w.try_into().unwrap_or_default()),
            None => head(&self.b[start.min(self.b.len())..]),
        };
        let n = node.children.len();
        for k in 0..n {
            let at = if from + k < n { from + k } else { from + k - n };
            let c = &node.children[at];
            let Some(mask) = c.plain_mask else { continue };
            let len = c.key.len();
            if word & mask == c.head
                && self.b.get(start + len) == Some(&b'"')
                && (len <= 8 || self.b[start + 8..start + len] == c.key[8..])
            {
                self.i = start + len + 1;
                return Some(at);
            }
        }
        None
    }

    /// The value of a path's node: captured at a leaf, walked into above.
    fn walk(&mut self, node: &Node, out: &mut [Option<Raw<'a>>]) -> Step {
        if let Some(field) = node.field {
            let start = self.i;
            let escaped = match self.peek() {
                Some(b'"') => self.string()?,
                _ => {
                    self.skip()?;
                    false
                }
            };
            if out[field].replace(Raw { text: &self.text[start..self.i], escaped }).is_some() {
                return Err(self.fail(Stop::Duplicate(field)));
            }
            return Ok(());
        }
        let got = match self.peek() {
            Some(b'{') => return self.object(node, out),
            Some(b'[') => return self.array(node, out),
            // `null` is an absent subtree.
            Some(b'n') => return self.literal(b"null"),
            Some(b'"') => "a string",
            Some(b't' | b'f') => "a boolean",
            _ => "a number",
        };
        // A scalar where the path goes deeper: the value must still be
        // JSON before the record is said to have the wrong shape.
        self.skip()?;
        Err(self.fail(node.shape(got)))
    }

    /// An array the walk descends into, at its `[`.
    fn array(&mut self, node: &Node, out: &mut [Option<Raw<'a>>]) -> Step {
        if self.enter(b']') {
            return Ok(());
        }
        if !node.has_indexes() {
            // `[]` for an empty object is a common encoder habit (PHP's
            // json_encode): handled above, as absent. Anything in it is
            // the wrong shape (once its first element is seen to be JSON).
            self.skip()?;
            return Err(self.fail(node.shape("an array")));
        }
        let mut index = 0;
        loop {
            match node.children.iter().find(|c| c.index == Some(index)) {
                Some(c) => self.walk(&c.node, out)?,
                None => self.skip()?,
            }
            if self.member_end(b']')? {
                return Ok(());
            }
            index += 1;
        }
    }
}
