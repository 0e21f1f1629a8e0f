//! The lexical half of the scanner: a position in a record, whitespace,
//! strings (checked 8 bytes at a time), numbers, literals, and whole
//! values skipped however deep; every failure's reason kept beside the
//! position.

use super::marks::Marks;

/// Why a scan stopped.
#[derive(Debug)]
pub(super) enum Stop {
    /// Not JSON: what was expected, at which byte.
    Syntax { at: usize, message: &'static str },
    /// A captured key appears twice.
    Duplicate(usize),
    /// Where a path goes deeper, a value that cannot hold it (a string, a
    /// number, an array without the path's index): `field` is the first
    /// field below.
    Shape { field: usize, expected: &'static str, got: &'static str },
}

/// Which bytes end the plain run of a string: `"`, `\` and the control
/// characters JSON forbids unescaped.
pub(super) const STRING_STOP: [bool; 256] = {
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

/// A key as read: as it stands in the record (no escapes), or unescaped.
pub(super) enum Key {
    Plain,
    Unescaped(String),
}

pub(super) struct Scan<'a, 'm> {
    pub(super) text: &'a str,
    pub(super) b: &'a [u8],
    pub(super) i: usize,
    /// The record's quotes, when it holds no escape and no control byte:
    /// then a string ends at the next quote.
    pub(super) plain: Option<&'m Marks>,
    /// Why the scan failed, once it has (kept here so that every step
    /// returns a one-bit `Result` in a register).
    pub(super) stop: Option<Stop>,
}

/// A failed step: the reason is in [`Scan::stop`].
#[derive(Debug)]
pub(super) struct Fail;

pub(super) type Step<T = ()> = Result<T, Fail>;

impl<'a> Scan<'a, '_> {
    #[inline]
    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// At an object's `{` or an array's `[`: steps in, and past `close`
    /// too when it follows (then true: the container is empty).
    #[inline]
    pub(super) fn enter(&mut self, close: u8) -> bool {
        self.i += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return true;
        }
        false
    }

    #[cold]
    pub(super) fn fail(&mut self, stop: Stop) -> Fail {
        self.stop = Some(stop);
        Fail
    }

    #[cold]
    pub(super) fn syntax(&mut self, message: &'static str) -> Fail {
        self.fail(Stop::Syntax { at: self.i, message })
    }

    #[cold]
    pub(super) fn eof_or(&mut self, eof: &'static str, other: &'static str) -> Fail {
        self.syntax(if self.i >= self.b.len() { eof } else { other })
    }

    /// `:` and the whitespace around it.
    #[inline]
    pub(super) fn colon(&mut self) -> Step {
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.eof_or("EOF while parsing an object", "expected `:`"));
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    /// After a member of a walked object or array: `,` and the next one
    /// (true: none, the `close` bracket ends it), with the errors serde_json
    /// gives.
    #[inline]
    pub(super) fn member_end(&mut self, close: u8) -> Step<bool> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                self.ws();
                if self.peek() == Some(close) {
                    return Err(self.syntax("trailing comma"));
                }
                Ok(false)
            }
            Some(b) if b == close => {
                self.i += 1;
                Ok(true)
            }
            _ if close == b'}' => Err(self.eof_or("EOF while parsing an object", "expected `,` or `}`")),
            _ => Err(self.eof_or("EOF while parsing a list", "expected `,` or `]`")),
        }
    }

    /// An object key at its `"`.
    #[inline]
    pub(super) fn key(&mut self) -> Step<Key> {
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
    pub(super) fn string(&mut self) -> Step<bool> {
        self.i += 1;
        let Some(marks) = self.plain else { return self.string_bytewise() };
        // No escapes and no control bytes: the next quote closes it.
        match marks.quote_from(self.i) {
            Some(end) => {
                self.i = end + 1;
                Ok(false)
            }
            None => {
                self.i = self.b.len();
                Err(self.syntax("EOF while parsing a string"))
            }
        }
    }

    /// The rest of a string read byte by byte (a record with escapes or
    /// control bytes, or too long to mark).
    #[inline(never)]
    fn string_bytewise(&mut self) -> Step<bool> {
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
    pub(super) fn plain_run(&mut self) {
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
    pub(super) fn escape(&mut self) -> Step {
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
    pub(super) fn number(&mut self) -> Step {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.i += 1;
                // One leading zero only: `00` is not a number, nor its start.
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.syntax("invalid number"));
                }
            }
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
    pub(super) fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    pub(super) fn literal(&mut self, word: &'static [u8]) -> Step {
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
    pub(super) fn skip(&mut self) -> Step {
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
    pub(super) fn skip_nested(&mut self) -> Step {
        let mut open = BitStack::default();
        loop {
            // At a value.
            match self.peek() {
                Some(b'{') => {
                    if !self.enter(b'}') {
                        open.push(true);
                        self.skip_key()?;
                        continue;
                    }
                }
                Some(b'[') => {
                    if !self.enter(b']') {
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
    pub(super) fn skip_key(&mut self) -> Step {
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
