//! Exact decimal text ↔ an i64 count of 10^-scale units: parsed from the
//! literal's digits, never through a float; more digits than the scale,
//! or a value beyond i64, is refused, not rounded.

use super::ValueError;

/// A decimal literal (`-12.5`, `3e2`, `0.000001`) as a count of 10^-scale
/// units, exactly: more digits than the scale, or a value beyond i64, is
/// an error.
pub fn decimal_units(text: &str, scale: u32) -> Result<i64, ValueError> {
    match plain_units(text, scale) {
        Some(v) => Ok(v),
        None => any_units(text, scale),
    }
}

/// [`decimal_units`] for any text: exponents, signs, surplus zeros,
/// overflow, and every error.
fn any_units(text: &str, scale: u32) -> Result<i64, ValueError> {
    let bad = || ValueError::BadNumber { value: text.to_string() };
    let range = || ValueError::OutOfRange {
        value: text.to_string(),
        min: format_units(i64::MIN as i128, scale),
        max: format_units(i64::MAX as i128, scale),
    };
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().map_err(|_| bad())?),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.bytes().chain(frac_part.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // value = digits * 10^(exponent - frac_len); in units: * 10^scale.
    let shift = exponent as i64 - frac_part.len() as i64 + scale as i64;
    let digits = || int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0');
    let n = int_part.len() + frac_part.len();
    // The last -shift digits are below one unit: they must be zeros
    // (checked first: too precise is the error, whatever the size).
    let kept = if shift < 0 { n.saturating_sub(shift.unsigned_abs().min(n as u64) as usize) } else { n };
    if digits().skip(kept).any(|d| d != 0) {
        return Err(ValueError::TooPrecise { value: text.to_string(), scale });
    }
    let mut v: i128 = 0;
    for d in digits().take(kept) {
        // At most i64::MAX + 1 before: never past i128.
        v = v * 10 + d as i128;
        if v > i64::MAX as i128 + 1 {
            return Err(range());
        }
    }
    if v == 0 {
        // Also ends `0e999999999` here, before a billion multiplications.
        return Ok(0);
    }
    for _ in 0..shift.max(0) {
        v *= 10;
        if v > i64::MAX as i128 + 1 {
            return Err(range());
        }
    }
    let v = if negative { -v } else { v };
    i64::try_from(v).map_err(|_| range())
}

/// The common case of [`decimal_units`] (tested against [`any_units`]), in one pass: an optional `-`,
/// 1 to 18 digits (under 10^18: no overflow), and optionally a point and
/// at most `scale` digits. None for anything else, which the general
/// rules then read (or refuse).
#[inline]
fn plain_units(text: &str, scale: u32) -> Option<i64> {
    let (negative, body) = match text.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        body => (false, body),
    };
    let (mut v, mut digits, mut frac) = (0i64, 0u32, None::<u32>);
    for &b in body {
        match b {
            b'0'..=b'9' => {
                if digits == 18 {
                    return None;
                }
                v = v * 10 + i64::from(b - b'0');
                digits += 1;
                if let Some(f) = frac.as_mut() {
                    *f += 1;
                }
            }
            b'.' if frac.is_none() => frac = Some(0),
            _ => return None,
        }
    }
    let frac = frac.unwrap_or(0);
    let int_digits = digits - frac;
    if int_digits == 0 || (frac == 0 && body.last() == Some(&b'.')) || frac > scale {
        return None;
    }
    let v = v.checked_mul(10i64.checked_pow(scale - frac)?)?;
    Some(if negative { -v } else { v })
}

/// Text of `v` units of 10^-scale, shortest form (`12.5`, `7`).
/// `v` units of 10^-scale as exact decimal text, without trailing zeros
/// (`1500` at scale 3 is `1.5`), for any i128.
pub fn format_units(v: i128, scale: u32) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    match frac.trim_end_matches('0') {
        "" => format!("{sign}{int}"),
        frac => format!("{sign}{int}.{frac}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Wherever the one-pass reading answers, the general one agrees.
        #[test]
        fn plain_units_agree_with_the_general_rules(text in "-?[0-9]{0,21}(\\.[0-9]{0,8})?", scale in 0u32..10) {
            if let Some(v) = plain_units(&text, scale) {
                prop_assert_eq!(Ok(v), any_units(&text, scale), "{} at scale {}", text, scale);
            }
            prop_assert_eq!(decimal_units(&text, scale), any_units(&text, scale));
        }
    }
}
