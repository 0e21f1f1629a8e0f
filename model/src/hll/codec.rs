//! The sketch's bytes: a version byte, the precision, the form; sparse
//! entries as varint deltas, dense registers packed 6 bits each. Equal
//! registers give equal bytes whatever the form in memory.

use super::*;

impl Hll {
    pub fn to_bytes(&self) -> Vec<u8> {
        let c = self.canonical();
        let mut out = Vec::with_capacity(c.serialized_len());
        match &c.repr {
            Repr::Sparse { entries, .. } => {
                out.extend_from_slice(&[VERSION, self.p, TAG_SPARSE]);
                put_varint(&mut out, entries.len() as u32);
                let mut prev = 0;
                for &e in entries {
                    put_varint(&mut out, e - prev);
                    prev = e;
                }
            }
            Repr::Dense(regs) => {
                out.extend_from_slice(&[VERSION, self.p, TAG_DENSE]);
                for q in regs.chunks_exact(4) {
                    let v = u32::from(q[0]) | u32::from(q[1]) << 6 | u32::from(q[2]) << 12 | u32::from(q[3]) << 18;
                    out.extend_from_slice(&v.to_le_bytes()[..3]);
                }
            }
        }
        out
    }

    /// Reads [`Hll::to_bytes`] output. Any input gives a sketch or an error,
    /// never a panic; a valid sketch in the other form than its registers
    /// call for is accepted and converted.
    pub fn from_bytes(bytes: &[u8]) -> Result<Hll, HllError> {
        let mut input = bytes;
        let [version, p, tag] = take(&mut input, HEADER_LEN)? else { unreachable!("took 3 bytes") };
        if *version != VERSION {
            return Err(HllError::Version(*version));
        }
        let mut hll = Hll::new(*p)?;
        let (p, m, max) = (*p, 1u32 << *p, max_rho(*p));
        match *tag {
            TAG_SPARSE => {
                let count = get_varint(&mut input)?;
                if count > m {
                    return Err(HllError::TooManyEntries { count, registers: m });
                }
                let mut entries = Vec::with_capacity((count as usize).min(input.len()));
                let mut prev: Option<u64> = None;
                for _ in 0..count {
                    let e = prev.unwrap_or(0) + u64::from(get_varint(&mut input)?);
                    let index = e >> 6;
                    if index >= u64::from(m) {
                        return Err(HllError::IndexOutOfRange { index, registers: m });
                    }
                    if prev.is_some_and(|prev| prev >> 6 >= index) {
                        return Err(HllError::Unsorted);
                    }
                    let rho = (e & 63) as u8;
                    if rho == 0 || rho > max {
                        return Err(HllError::RhoOutOfRange { index: index as u32, rho, max });
                    }
                    entries.push(e as u32);
                    prev = Some(e);
                }
                if !input.is_empty() {
                    return Err(HllError::TrailingBytes(input.len()));
                }
                if entries.len() > sparse_limit(p) {
                    hll.repr = Repr::Dense(to_registers(p, &entries));
                } else {
                    hll.repr = Repr::Sparse { encoded_len: sparse_encoded_len(&entries), entries, buf: Vec::new() };
                }
            }
            TAG_DENSE => {
                let packed = take(&mut input, m as usize / 4 * 3)?;
                if !input.is_empty() {
                    return Err(HllError::TrailingBytes(input.len()));
                }
                let mut regs = Vec::with_capacity(m as usize);
                for b in packed.chunks_exact(3) {
                    let v = u32::from_le_bytes([b[0], b[1], b[2], 0]);
                    regs.extend((0..4).map(|i| (v >> (6 * i) & 63) as u8));
                }
                if let Some(index) = regs.iter().position(|&r| r > max) {
                    return Err(HllError::RhoOutOfRange { index: index as u32, rho: regs[index], max });
                }
                if regs.iter().filter(|&&r| r != 0).count() > sparse_limit(p) {
                    hll.repr = Repr::Dense(regs);
                } else {
                    let entries: Vec<u32> =
                        (0..m).zip(&regs).filter(|(_, &r)| r != 0).map(|(i, &r)| i << 6 | u32::from(r)).collect();
                    hll.repr = Repr::Sparse { encoded_len: sparse_encoded_len(&entries), entries, buf: Vec::new() };
                }
            }
            tag => return Err(HllError::Tag(tag)),
        }
        Ok(hll)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// LEB128, at most 32 bits, minimal encodings only (so bytes are canonical).
fn get_varint(input: &mut &[u8]) -> Result<u32, HllError> {
    let mut v = 0u32;
    for i in 0..5 {
        let [b] = take(input, 1)? else { unreachable!("took 1 byte") };
        if (i == 4 && *b > 0x0f) || (i > 0 && *b == 0) {
            return Err(HllError::Varint);
        }
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(HllError::Varint)
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], HllError> {
    if input.len() < n {
        return Err(HllError::Truncated);
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

/// As its serialized bytes; in text formats (a ground truth file) as
/// base64 text, a third the size of JSON's array of numbers.
impl serde::Serialize for Hll {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        if s.is_human_readable() {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.to_bytes()))
        } else {
            s.serialize_bytes(&self.to_bytes())
        }
    }
}

impl<'de> serde::Deserialize<'de> for Hll {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Hll, D::Error> {
        use base64::Engine;
        use serde::de::Error;
        let bytes = if d.is_human_readable() {
            let text = String::deserialize(d)?;
            base64::engine::general_purpose::STANDARD.decode(text).map_err(D::Error::custom)?
        } else {
            <Vec<u8>>::deserialize(d)?
        };
        Hll::from_bytes(&bytes).map_err(D::Error::custom)
    }
}
