//! JSON pointers (RFC 6901): `/geo/cc`, `/items/0/price`. A token made of
//! digits matches an array index or an object key of those digits; `~1` is
//! `/` and `~0` is `~` inside a token.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pointer {
    pub tokens: Vec<String>,
}

/// Deepest path a schema may declare (serde_json itself stops at 128
/// levels of nesting, which is a malformed record, not a schema).
pub const MAX_DEPTH: usize = 32;

impl Pointer {
    pub fn parse(text: &str) -> Result<Pointer, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err("a JSON pointer starts with `/`".into());
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    token.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => token.push('~'),
                    Some('1') => token.push('/'),
                    _ => return Err(format!("{raw:?}: `~` must be followed by 0 or 1")),
                }
            }
            tokens.push(token);
        }
        if tokens.len() > MAX_DEPTH {
            return Err(format!("{} levels deep; at most {MAX_DEPTH}", tokens.len()));
        }
        Ok(Pointer { tokens })
    }

    /// The token as an array index, if it is one (no leading zeros).
    pub fn index(token: &str) -> Option<usize> {
        let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        if !digits || (token.len() > 1 && token.starts_with('0')) {
            return None;
        }
        token.parse().ok()
    }
}

/// A token as written inside a pointer.
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tokens {
            write!(f, "/{}", escape(t))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_unescape_and_round_trip() {
        let p = Pointer::parse("/geo/cc").unwrap();
        assert_eq!(p.tokens, ["geo", "cc"]);
        let p = Pointer::parse("/a~1b/m~0n/0").unwrap();
        assert_eq!(p.tokens, ["a/b", "m~n", "0"]);
        assert_eq!(p.to_string(), "/a~1b/m~0n/0");
        assert_eq!(Pointer::parse("/").unwrap().tokens, [""]);
        assert!(Pointer::parse("geo").is_err());
        assert!(Pointer::parse("/a~2").is_err());
        assert!(Pointer::parse(&"/a".repeat(MAX_DEPTH + 1)).is_err());
    }

    #[test]
    fn indexes_are_canonical_digits() {
        assert_eq!(Pointer::index("0"), Some(0));
        assert_eq!(Pointer::index("12"), Some(12));
        assert_eq!(Pointer::index("012"), None);
        assert_eq!(Pointer::index("-1"), None);
        assert_eq!(Pointer::index(""), None);
    }
}
