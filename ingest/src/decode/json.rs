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

use super::DecodeError;
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

    /// The text of every field's value in `record` (None: not there).
    pub fn capture<'a>(&self, record: &'a str, out: &mut [Option<Raw<'a>>]) -> Result<(), DecodeError> {
        let mut scan = Scan { text: record, b: record.as_bytes(), i: 0, stop: None };
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

/// Why a scan stopped.
#[derive(Debug)]
enum Stop {
    /// Not JSON: what was expected, at which byte.
    Syntax { at: usize, message: &'static str },
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

/// Which bytes end the plain run of a string: `"`, `\` and the control
/// characters JSON forbids unescaped.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// A captured value's text as it stands in the record.
#[derive(Debug, Clone, Copy)]
pub struct Raw<'a> {
    pub text: &'a str,
    /// A string holding escapes (to be unescaped when typed).
    pub escaped: bool,
}

/// A key as read: as it stands in the record (no escapes), or unescaped.
enum Key {
    Plain,
    Unescaped(String),
}

struct Scan<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    /// Why the scan failed, once it has (kept here so that every step
    /// returns a one-bit `Result` in a register).
    stop: Option<Stop>,
}

/// A failed step: the reason is in [`Scan::stop`].
#[derive(Debug)]
struct Fail;

type Step<T = ()> = Result<T, Fail>;

impl<'a> Scan<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    #[cold]
    fn fail(&mut self, stop: Stop) -> Fail {
        self.stop = Some(stop);
        Fail
    }

    #[cold]
    fn syntax(&mut self, message: &'static str) -> Fail {
        self.fail(Stop::Syntax { at: self.i, message })
    }

    #[cold]
    fn eof_or(&mut self, eof: &'static str, other: &'static str) -> Fail {
        self.syntax(if self.i >= self.b.len() { eof } else { other })
    }

    /// An object the walk descends into, at its `{`: keys some path names
    /// are walked, the others' values skipped.
    fn object(&mut self, node: &Node, out: &mut [Option<Raw<'a>>]) -> Step {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
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
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        return Err(self.syntax("trailing comma"));
                    }
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.eof_or("EOF while parsing an object", "expected `,` or `}`")),
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

    /// `:` and the whitespace around it.
    #[inline]
    fn colon(&mut self) -> Step {
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.eof_or("EOF while parsing an object", "expected `:`"));
        }
        self.i += 1;
        self.ws();
        Ok(())
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
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
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
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        return Err(self.syntax("trailing comma"));
                    }
                }
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.eof_or("EOF while parsing a list", "expected `,` or `]`")),
            }
            index += 1;
        }
    }

    /// An object key at its `"`.
    #[inline]
    fn key(&mut self) -> Step<Key> {
        let start = self.i + 1;
        if !self.string()? {
            return Ok(Key::Plain);
        }
        // Keys with escapes are rare: unescaped by serde_json, which also
        // refuses escapes that name no text (a lone surrogate).
        match serde_json::from_str::<String>(&self.text[start - 1..self.i]) {
            Ok(s) => Ok(Key::Unescaped(s)),
            Err(_) => Err(self.fail(Stop::Syntax { at: start - 1, message: "invalid escape in a key" })),
        }
    }

    /// A string at its `"`, up to past its closing quote; whether it holds
    /// escapes. Escapes are checked for form (`\u` and four hex digits),
    /// not for naming text: the typing of a captured value does that.
    #[inline]
    fn string(&mut self) -> Step<bool> {
        self.i += 1;
        let mut escaped = false;
        loop {
            self.plain_run();
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                Some(_) => return Err(self.syntax("control character (\\u0000-\\u001F) found while parsing a string")),
                None => return Err(self.syntax("EOF while parsing a string")),
            }
        }
    }

    /// Past the bytes a string holds as they are, eight at a time.
    #[inline]
    fn plain_run(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            // Bytes below 0x20, equal to `"`, equal to `\`: the lowest one
            // flagged is exact (borrows only run upward from a true match).
            let control = w.wrapping_sub(ONES * 0x20) & !w;
            let quote = (w ^ (ONES * b'"' as u64)).wrapping_sub(ONES) & !(w ^ (ONES * b'"' as u64));
            let slash = (w ^ (ONES * b'\\' as u64)).wrapping_sub(ONES) & !(w ^ (ONES * b'\\' as u64));
            let stops = (control | quote | slash) & HIGH;
            if stops != 0 {
                self.i += stops.trailing_zeros() as usize / 8;
                return;
            }
            self.i += 8;
        }
        while let Some(&b) = self.b.get(self.i) {
            if STRING_STOP[b as usize] {
                return;
            }
            self.i += 1;
        }
    }

    /// An escape at its `\`.
    fn escape(&mut self) -> Step {
        self.i += 1;
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
            Some(b'u') => {
                self.i += 1;
                for _ in 0..4 {
                    match self.peek() {
                        Some(b) if b.is_ascii_hexdigit() => self.i += 1,
                        None => return Err(self.syntax("EOF while parsing a string")),
                        Some(_) => return Err(self.syntax("invalid escape")),
                    }
                }
            }
            None => return Err(self.syntax("EOF while parsing a string")),
            Some(_) => return Err(self.syntax("invalid escape")),
        }
        Ok(())
    }

    /// A number: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?
    fn number(&mut self) -> Step {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            None => return Err(self.syntax("EOF while parsing a value")),
            Some(_) => return Err(self.syntax("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.eof_or("EOF while parsing a value", "invalid number"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.eof_or("EOF while parsing a value", "invalid number"));
            }
            self.digits();
        }
        Ok(())
    }

    #[inline]
    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Step {
        let end = self.i + word.len();
        match self.b.get(self.i..end) {
            Some(bytes) if bytes == word => {
                self.i = end;
                Ok(())
            }
            Some(_) => Err(self.syntax("expected ident")),
            None => Err(self.syntax("EOF while parsing a value")),
        }
    }

    /// Any value, validated and passed over.
    #[inline]
    fn skip(&mut self) -> Step {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'{' | b'[') => self.skip_nested(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            None => Err(self.syntax("EOF while parsing a value")),
            Some(_) => Err(self.syntax("expected value")),
        }
    }

    /// An object or array passed over, however deep: the open brackets
    /// are a stack of bits (1 for an object), not a recursion.
    fn skip_nested(&mut self) -> Step {
        let mut open = BitStack::default();
        loop {
            // At a value.
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        open.push(true);
                        self.skip_key()?;
                        continue;
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        open.push(false);
                        continue;
                    }
                }
                _ => self.skip()?,
            }
            // After a value: close what it ends, or go on to the next.
            loop {
                let Some(object) = open.top() else { return Ok(()) };
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                        if object {
                            if self.peek() == Some(b'}') {
                                return Err(self.syntax("trailing comma"));
                            }
                            self.skip_key()?;
                        } else if self.peek() == Some(b']') {
                            return Err(self.syntax("trailing comma"));
                        }
                        break;
                    }
                    Some(b'}') if object => {
                        self.i += 1;
                        open.pop();
                    }
                    Some(b']') if !object => {
                        self.i += 1;
                        open.pop();
                    }
                    _ if object => return Err(self.eof_or("EOF while parsing an object", "expected `,` or `}`")),
                    _ => return Err(self.eof_or("EOF while parsing a list", "expected `,` or `]`")),
                }
            }
        }
    }

    /// A key of a skipped object and its `:`.
    fn skip_key(&mut self) -> Step {
        if self.peek() != Some(b'"') {
            return Err(self.eof_or("EOF while parsing an object", "key must be a string"));
        }
        self.string()?;
        self.colon()
    }
}

/// Open brackets of a skipped value, a bit each: the first 64 in a word,
/// deeper ones (rare, hostile) in a vector.
#[derive(Default)]
struct BitStack {
    low: u64,
    deeper: Vec<bool>,
    len: usize,
}

impl BitStack {
    #[inline]
    fn push(&mut self, bit: bool) {
        if self.len < 64 {
            self.low = (self.low & !(1 << self.len)) | (u64::from(bit) << self.len);
        } else {
            self.deeper.push(bit);
        }
        self.len += 1;
    }

    #[inline]
    fn top(&self) -> Option<bool> {
        match self.len {
            0 => None,
            n if n <= 64 => Some(self.low >> (n - 1) & 1 == 1),
            _ => self.deeper.last().copied(),
        }
    }

    #[inline]
    fn pop(&mut self) {
        if self.len > 64 {
            self.deeper.pop();
        }
        self.len = self.len.saturating_sub(1);
    }
}
