//! One pass over a record before the walk, 16 bytes at a time: where its
//! quotes are, whether it is all ASCII, and whether it holds a backslash
//! or a control byte anywhere.
//!
//! A record with neither (compact JSON lines nearly always) has strings
//! that end at the next quote, so the walk finds a string's end with one
//! bit scan instead of reading its bytes; and an ASCII record is UTF-8
//! without a second check. Any other record is walked byte by byte, as
//! before: the marks only ever take a shortcut to the same answer.

/// Records up to this size are marked (their quotes fit on the stack);
/// longer ones are walked without marks.
pub(super) const MAX_BYTES: usize = 1024;
const WORDS: usize = MAX_BYTES / 64;

#[derive(Debug, Clone)]
pub(crate) struct Marks {
    /// Bit `i % 64` of word `i / 64`: byte `i` is `"`.
    quotes: [u64; WORDS],
    words: usize,
    /// Every byte is below 0x80.
    pub ascii: bool,
    /// No `\` and no byte below 0x20 (not even whitespace between tokens).
    pub plain: bool,
}

impl Default for Marks {
    fn default() -> Self {
        Marks { quotes: [0; WORDS], words: 0, ascii: true, plain: true }
    }
}

impl Marks {
    /// The marks of a record of at most [`MAX_BYTES`] bytes (tests).
    #[cfg(test)]
    pub fn of(b: &[u8]) -> Option<Marks> {
        let mut m = Marks::default();
        m.set(b).then_some(m)
    }

    /// Marks record `b` here (in place: the caller's, not a copy); false
    /// when it is longer than [`MAX_BYTES`].
    #[inline]
    pub fn set(&mut self, b: &[u8]) -> bool {
        if b.len() > MAX_BYTES {
            return false;
        }
        mark(b, self);
        true
    }

    /// The first quote at or after byte `from`.
    #[inline]
    pub fn quote_from(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= self.words {
            return None;
        }
        let mut bits = self.quotes[w] & (u64::MAX << (from % 64));
        while bits == 0 {
            w += 1;
            if w >= self.words {
                return None;
            }
            bits = self.quotes[w];
        }
        Some(w * 64 + bits.trailing_zeros() as usize)
    }
}

/// Bytes past a record's end in its last block: a space is no quote, no
/// control byte and ASCII, so it changes none of the marks.
const PAD: u8 = b' ';

#[cfg(target_arch = "x86_64")]
fn mark(b: &[u8], m: &mut Marks) {
    // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
    unsafe { sse2::mark(b, m) }
}

#[cfg(not(target_arch = "x86_64"))]
fn mark(b: &[u8], m: &mut Marks) {
    mark_bytewise(b, m)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{Marks, PAD};
    use std::arch::x86_64::*;

    /// 64 bytes: the bit mask of their quotes; `special` and `any` take in
    /// their lanes that are `\` or a control byte, and their bits.
    #[target_feature(enable = "sse2")]
    fn block(b: &[u8; 64], special: &mut __m128i, any: &mut __m128i) -> u64 {
        let (quote, backslash, below_space) =
            (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8), _mm_set1_epi8(0x1f));
        let mut quotes = 0;
        for k in 0..4 {
            // SAFETY: bytes 16k..16k + 16 of a 64-byte array; an unaligned
            // load reads exactly them.
            let x = unsafe { _mm_loadu_si128(b.as_ptr().add(16 * k).cast()) };
            quotes |= (_mm_movemask_epi8(_mm_cmpeq_epi8(x, quote)) as u16 as u64) << (16 * k);
            // min(x, 0x1f) == x: the byte is at most 0x1f, unsigned.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x);
            *special = _mm_or_si128(*special, _mm_or_si128(control, _mm_cmpeq_epi8(x, backslash)));
            *any = _mm_or_si128(*any, x);
        }
        quotes
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn mark(b: &[u8], m: &mut Marks) {
        m.words = b.len().div_ceil(64);
        let (mut special, mut any) = (_mm_setzero_si128(), _mm_setzero_si128());
        let mut blocks = b.chunks_exact(64);
        let mut k = 0;
        for chunk in &mut blocks {
            m.quotes[k] = block(chunk.try_into().unwrap_or(&[PAD; 64]), &mut special, &mut any);
            k += 1;
        }
        let rest = blocks.remainder().len();
        if rest > 0 && b.len() >= 64 {
            // The last 64 bytes, some marked already: their quotes shifted
            // down to the first of the rest (the flags need no care).
            let last = b[b.len() - 64..].try_into().unwrap_or(&[PAD; 64]);
            m.quotes[k] = block(last, &mut special, &mut any) >> (64 - rest);
        } else if rest > 0 {
            let mut last = [PAD; 64];
            last[..rest].copy_from_slice(blocks.remainder());
            m.quotes[k] = block(&last, &mut special, &mut any);
        }
        m.plain = _mm_movemask_epi8(special) == 0;
        m.ascii = _mm_movemask_epi8(any) == 0;
    }
}

/// The same marks, a byte at a time: other targets' way, and the oracle
/// the vector pass is tested against.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn mark_bytewise(b: &[u8], m: &mut Marks) {
    *m = Marks { quotes: [0; WORDS], words: b.len().div_ceil(64), ascii: true, plain: true };
    for (i, &c) in b.iter().enumerate() {
        if c == b'"' {
            m.quotes[i / 64] |= 1 << (i % 64);
        }
        m.plain &= c != b'\\' && c >= 0x20;
        m.ascii &= c < 0x80;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes drawn mostly from the ones the marks are about.
    fn record() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => Just(b'"'),
            1 => Just(b'\\'),
            1 => 0u8..0x20,
            1 => Just(0x1fu8),
            1 => Just(0x20u8),
            1 => 0x80u8..=0xff,
            8 => 0x20u8..0x80,
        ];
        proptest::collection::vec(byte, 0..=MAX_BYTES)
    }

    proptest! {
        #[test]
        fn the_vector_pass_marks_exactly_what_a_byte_at_a_time_does(b in record()) {
            // Over marks of another record: nothing of it may remain.
            let (mut vector, mut bytewise) = (Marks::of(&[b'"'; MAX_BYTES]).expect("marked"), Marks::default());
            mark(&b, &mut vector);
            mark_bytewise(&b, &mut bytewise);
            prop_assert_eq!(vector.words, bytewise.words);
            prop_assert_eq!(&vector.quotes[..vector.words], &bytewise.quotes[..bytewise.words]);
            prop_assert_eq!((vector.ascii, vector.plain), (bytewise.ascii, bytewise.plain));
        }

        #[test]
        fn quote_from_finds_the_next_quote_at_or_after(b in record(), from in 0usize..=MAX_BYTES + 70) {
            let m = Marks::of(&b).expect("within the limit");
            let expected = b.iter().enumerate().skip(from).find(|(_, &c)| c == b'"').map(|(i, _)| i);
            prop_assert_eq!(m.quote_from(from), expected);
        }
    }

    #[test]
    fn flags_name_what_the_record_holds() {
        let m = Marks::of(br#"{"a":"b"}"#).unwrap();
        assert!(m.ascii && m.plain);
        assert!(!Marks::of(b"{\"a\":\"\\n\"}").unwrap().plain, "a backslash");
        assert!(!Marks::of(b"{\"a\":\n1}").unwrap().plain, "a newline between tokens");
        assert!(!Marks::of("{\"a\":\"é\"}".as_bytes()).unwrap().ascii);
        assert!(Marks::of(&[b' '; MAX_BYTES + 1]).is_none(), "too long to mark");
    }
}
