//! A compact binary form for an item's non-key attributes (one BLOB column).
//!
//! Per attribute: name length (u16 BE), name, type tag, value —
//! `S`/`B`: u32 BE length + bytes; `N`: rust_decimal's exact 16-byte form;
//! `Bool`: one byte.

use rust_decimal::Decimal;
use std::collections::BTreeMap;
use zigzag_core::table::AttrValue;

const TAG_S: u8 = 1;
const TAG_N: u8 = 2;
const TAG_B: u8 = 3;
const TAG_BOOL: u8 = 4;

pub fn encode(attrs: &BTreeMap<String, AttrValue>) -> Vec<u8> {
    let mut out = Vec::with_capacity(attrs.len() * 16);
    for (name, value) in attrs {
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        match value {
            AttrValue::S(s) => {
                out.push(TAG_S);
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            AttrValue::B(b) => {
                out.push(TAG_B);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(b);
            }
            AttrValue::N(n) => {
                out.push(TAG_N);
                out.extend_from_slice(&n.serialize());
            }
            AttrValue::Bool(b) => {
                out.push(TAG_BOOL);
                out.push(*b as u8);
            }
        }
    }
    out
}

/// Why a stored attribute blob could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("corrupt attribute blob at byte {at}: {why}")]
pub struct CorruptAttributes {
    pub at: usize,
    pub why: &'static str,
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CorruptAttributes> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(CorruptAttributes { at: self.at, why: "truncated" })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn len(&mut self, width: usize) -> Result<usize, CorruptAttributes> {
        let b = self.take(width)?;
        Ok(b.iter().fold(0usize, |acc, &x| acc << 8 | x as usize))
    }

    fn text(&mut self, n: usize) -> Result<String, CorruptAttributes> {
        let at = self.at;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| CorruptAttributes { at, why: "not UTF-8" })
    }
}

pub fn decode(buf: &[u8]) -> Result<BTreeMap<String, AttrValue>, CorruptAttributes> {
    let mut c = Cursor { buf, at: 0 };
    let mut out = BTreeMap::new();
    while c.at < buf.len() {
        let n = c.len(2)?;
        let name = c.text(n)?;
        let tag_at = c.at;
        let value = match c.take(1)?[0] {
            TAG_S => {
                let n = c.len(4)?;
                AttrValue::S(c.text(n)?)
            }
            TAG_B => {
                let n = c.len(4)?;
                AttrValue::B(c.take(n)?.to_vec())
            }
            TAG_N => {
                let raw: [u8; 16] = c.take(16)?.try_into().expect("16 bytes");
                AttrValue::N(Decimal::deserialize(raw))
            }
            TAG_BOOL => AttrValue::Bool(c.take(1)?[0] != 0),
            _ => return Err(CorruptAttributes { at: tag_at, why: "unknown type tag" }),
        };
        out.insert(name, value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn round_trip() {
        let mut a = BTreeMap::new();
        a.insert("s".to_string(), AttrValue::S("héllo".into()));
        a.insert("n".to_string(), AttrValue::N(Decimal::from_str("-12.3400").unwrap()));
        a.insert("b".to_string(), AttrValue::B(vec![0, 255, 7]));
        a.insert("t".to_string(), AttrValue::Bool(true));
        a.insert("".to_string(), AttrValue::S(String::new()));
        let blob = encode(&a);
        assert_eq!(decode(&blob).unwrap(), a);
        for cut in 0..blob.len() {
            // Every strict prefix that splits an attribute is rejected, never misread.
            if let Ok(partial) = decode(&blob[..cut]) {
                assert!(partial.len() < a.len());
            }
        }
        assert!(decode(&[0, 1, b'x', 99]).is_err());
    }
}
