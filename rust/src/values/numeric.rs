//! numeric: to an i128 at a decimal's scale, or to the exact text `numeric_out` prints.
//!
//! Text format (`numeric_out`): an optional `-`, the integer digits without leading zeros
//! (`0` when there are none), and, when the display scale is positive, a point and
//! exactly that many fraction digits; no exponent. Special values print as `NaN`,
//! `Infinity` and `-Infinity` (the infinities since PostgreSQL 14).
//!
//! Binary format (`numeric_send`):
//! ```text
//! Int16  ndigits   number of base-10000 digits that follow
//! Int16  weight    base-10000 exponent of the first digit
//! UInt16 sign      0x0000 +, 0x4000 -, 0xC000 NaN, 0xD000 +Infinity, 0xF000 -Infinity
//! UInt16 dscale    display scale: decimal digits after the point
//! Int16[ndigits]   digits, each 0..=9999, most significant first
//! ```
//! The value is `Σ digit[i] × 10000^(weight − i)`. Digits below the display scale are
//! dropped, as `numeric_recv` + `numeric_out` would drop them.

use super::error::{ValueError, ValueErrorKind};
use super::scan::{plain_decimal, PlainDecimal};
use super::types::Decimal128Spec;

const TY: &str = "numeric";

const SIGN_POS: u16 = 0x0000;
const SIGN_NEG: u16 = 0x4000;
const SIGN_NAN: u16 = 0xC000;
const SIGN_PINF: u16 = 0xD000;
const SIGN_NINF: u16 = 0xF000;
/// `NUMERIC_DSCALE_MASK`: the largest display scale a numeric can carry.
const DSCALE_MAX: u16 = 0x3FFF;
const NBASE: u16 = 10_000;

fn err(kind: ValueErrorKind) -> ValueError {
    ValueError::new(TY, kind)
}

/// 10^0 to 10^38.
#[rustfmt::skip]
#[allow(clippy::unreadable_literal)]
pub(crate) const POW10: [u128; 39] = [
    1,
    10,
    100,
    1000,
    10000,
    100000,
    1000000,
    10000000,
    100000000,
    1000000000,
    10000000000,
    100000000000,
    1000000000000,
    10000000000000,
    100000000000000,
    1000000000000000,
    10000000000000000,
    100000000000000000,
    1000000000000000000,
    10000000000000000000,
    100000000000000000000,
    1000000000000000000000,
    10000000000000000000000,
    100000000000000000000000,
    1000000000000000000000000,
    10000000000000000000000000,
    100000000000000000000000000,
    1000000000000000000000000000,
    10000000000000000000000000000,
    100000000000000000000000000000,
    1000000000000000000000000000000,
    10000000000000000000000000000000,
    100000000000000000000000000000000,
    1000000000000000000000000000000000,
    10000000000000000000000000000000000,
    100000000000000000000000000000000000,
    1000000000000000000000000000000000000,
    10000000000000000000000000000000000000,
    100000000000000000000000000000000000000,
];

/// 10^0 to 10^19, the powers of ten a u64 holds.
#[allow(clippy::indexing_slicing)] // constant evaluation: out of range would not compile
const POW10_U64: [u64; 20] = {
    let mut table = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// Collects decimal digits, most significant first, into an unscaled magnitude at a
/// fixed scale, refusing to round or overflow.
struct Unscaled {
    magnitude: u128,
    /// Exponent of the last digit taken (or of the units digit before any).
    last_exp: i32,
    /// Exponent of the decimal's last digit: `-scale`.
    min_exp: i32,
}

impl Unscaled {
    fn new(scale: i8) -> Self {
        Self {
            magnitude: 0,
            last_exp: 0,
            min_exp: -i32::from(scale),
        }
    }

    /// Takes the digit `d` standing for `d × 10^exp`; exponents only decrease.
    fn push(&mut self, d: u8, exp: i32) -> Result<(), ValueError> {
        if exp < self.min_exp {
            return if d == 0 {
                Ok(())
            } else {
                Err(err(ValueErrorKind::InexactScale))
            };
        }
        self.magnitude = self
            .magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(d)))
            .ok_or(err(ValueErrorKind::NumericOverflow))?;
        self.last_exp = exp;
        Ok(())
    }

    fn finish(self, spec: Decimal128Spec, negative: bool) -> Result<i128, ValueError> {
        let mut magnitude = self.magnitude;
        // Digits ended above the decimal's last place: pad with zeros.
        if magnitude != 0 && self.last_exp > self.min_exp {
            let shift = u32::try_from(self.last_exp - self.min_exp)
                .map_err(|_| err(ValueErrorKind::NumericOverflow))?;
            magnitude = 10_u128
                .checked_pow(shift)
                .and_then(|p| magnitude.checked_mul(p))
                .ok_or(err(ValueErrorKind::NumericOverflow))?;
        }
        let limit = 10_u128.pow(u32::from(spec.precision.min(38)));
        if magnitude >= limit {
            return Err(err(ValueErrorKind::NumericOverflow));
        }
        // Below 10^38 < 2^127: fits.
        let value = i128::try_from(magnitude).map_err(|_| err(ValueErrorKind::NumericOverflow))?;
        Ok(if negative { -value } else { value })
    }
}

/// Splits numeric text into (negative, integer digits, fraction digits), or reports a
/// special value. Accepts exactly what `numeric_out` prints.
fn split_text(s: &str) -> Result<(bool, &[u8], &[u8]), ValueError> {
    match s {
        "NaN" => return Err(err(ValueErrorKind::NumericNaN)),
        "Infinity" => return Err(err(ValueErrorKind::Infinite { negative: false })),
        "-Infinity" => return Err(err(ValueErrorKind::Infinite { negative: true })),
        _ => {}
    }
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int, frac) = match body.split_once('.') {
        Some((int, frac)) if !frac.is_empty() => (int, frac),
        Some(_) => return Err(ValueError::malformed(TY)),
        None => (body, ""),
    };
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !all_digits(int) || !all_digits(frac) {
        return Err(ValueError::malformed(TY));
    }
    Ok((negative, int.as_bytes(), frac.as_bytes()))
}

/// numeric text -> unscaled i128 at `spec.scale` (`-12.30` at scale 2 is -1230).
pub fn text_to_decimal(s: &str, spec: Decimal128Spec) -> Result<i128, ValueError> {
    if let Some(result) = text_to_decimal_fast(s, spec) {
        return result;
    }
    text_to_decimal_by_digits(s, spec)
}

/// The common case in one pass: `-?digits(.digits)?` with at most 19 digits (a u64) and
/// no more fraction digits than the scale, so the value is exact and only overflow can
/// fail. `None` for anything else, left to [`text_to_decimal_by_digits`].
fn text_to_decimal_fast(s: &str, spec: Decimal128Spec) -> Option<Result<i128, ValueError>> {
    let bytes = s.as_bytes();
    let (negative, body) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    // Up to 19 digits fit a u64; longer numbers take the digit-by-digit path.
    let PlainDecimal {
        mantissa: magnitude,
        fraction_digits: frac_len,
    } = plain_decimal(body)?;
    let scale = usize::try_from(spec.scale).ok()?;
    let shift = scale.checked_sub(frac_len)?;
    let limit = POW10
        .get(usize::from(spec.precision.min(38)))
        .copied()
        .unwrap_or(u128::MAX);
    let overflow = || err(ValueErrorKind::NumericOverflow);
    // Mostly a u64 product; the u128 one only when that overflows.
    let scaled = match POW10.get(shift) {
        Some(&p) => match u64::try_from(p).ok().and_then(|p| magnitude.checked_mul(p)) {
            Some(m) => Some(u128::from(m)),
            None => u128::from(magnitude).checked_mul(p),
        },
        None => None,
    };
    Some(
        scaled
            .filter(|&m| m < limit)
            .ok_or_else(overflow)
            .and_then(|m| i128::try_from(m).map_err(|_| overflow()))
            .map(|v| if negative { -v } else { v }),
    )
}

/// numeric text -> unscaled i128 at `spec.scale`, a decimal digit at a time.
fn text_to_decimal_by_digits(s: &str, spec: Decimal128Spec) -> Result<i128, ValueError> {
    let (negative, int, frac) = split_text(s)?;
    let mut acc = Unscaled::new(spec.scale);
    let int_len = i32::try_from(int.len()).map_err(|_| err(ValueErrorKind::NumericOverflow))?;
    for (i, &b) in int.iter().enumerate() {
        acc.push(b - b'0', int_len - 1 - i as i32)?;
    }
    for (i, &b) in frac.iter().enumerate() {
        let exp = i32::try_from(i)
            .map(|i| -1 - i)
            .map_err(|_| err(ValueErrorKind::InexactScale))?;
        acc.push(b - b'0', exp)?;
    }
    acc.finish(spec, negative)
}

/// numeric text in a string column: checked to be `numeric_out`'s form, passed through.
pub fn text_to_str(s: &str) -> Result<&str, ValueError> {
    match split_text(s) {
        Err(e) if e.kind == ValueErrorKind::Malformed => Err(e),
        // A number, or NaN and the infinities: values of a string column.
        Ok(_) | Err(_) => Ok(s),
    }
}

/// A checked view of `numeric_send` bytes.
struct Binary<'a> {
    weight: i16,
    sign: u16,
    dscale: u16,
    /// `ndigits` big-endian i16 pairs, each checked to be 0..=9999.
    digits: &'a [u8],
}

impl Binary<'_> {
    fn parse(b: &[u8]) -> Result<Binary<'_>, ValueError> {
        let (header, digits) = b.split_at_checked(8).ok_or(ValueError::malformed(TY))?;
        let field = |i: usize| -> Result<[u8; 2], ValueError> {
            header
                .get(i..i + 2)
                .and_then(|p| <[u8; 2]>::try_from(p).ok())
                .ok_or(ValueError::malformed(TY))
        };
        let ndigits = i16::from_be_bytes(field(0)?);
        let weight = i16::from_be_bytes(field(2)?);
        let sign = u16::from_be_bytes(field(4)?);
        let dscale = u16::from_be_bytes(field(6)?);
        let ndigits = usize::try_from(ndigits).map_err(|_| ValueError::malformed(TY))?;
        if digits.len() != ndigits * 2 || dscale > DSCALE_MAX {
            return Err(ValueError::malformed(TY));
        }
        if !matches!(sign, SIGN_POS | SIGN_NEG | SIGN_NAN | SIGN_PINF | SIGN_NINF) {
            return Err(ValueError::malformed(TY));
        }
        let value = Binary {
            weight,
            sign,
            dscale,
            digits,
        };
        if value.base_digits().any(|d| d >= NBASE) {
            return Err(ValueError::malformed(TY));
        }
        Ok(value)
    }

    fn base_digits(&self) -> impl Iterator<Item = u16> + '_ {
        self.digits.chunks_exact(2).map(|pair| match *pair {
            [hi, lo] => u16::from_be_bytes([hi, lo]),
            _ => 0,
        })
    }

    /// Every decimal digit with its exponent, down to the display scale, most
    /// significant first.
    fn decimal_digits(&self) -> impl Iterator<Item = (u8, i32)> + '_ {
        let min_exp = -i32::from(self.dscale);
        let weight = i32::from(self.weight);
        self.base_digits()
            .enumerate()
            .flat_map(move |(i, d)| {
                let top = 4 * (weight - i as i32) + 3;
                [
                    ((d / 1000) as u8, top),
                    ((d / 100 % 10) as u8, top - 1),
                    ((d / 10 % 10) as u8, top - 2),
                    ((d % 10) as u8, top - 3),
                ]
            })
            .filter(move |&(_, exp)| exp >= min_exp)
    }

    /// The decimal at `spec.scale`, when that scale is at least the display scale: no
    /// digit kept can then fall below the decimal's last place, so the value is exact and
    /// the only possible failure is overflow. Works a base-10000 digit at a time; gives
    /// what [`Unscaled`] would, digit by digit.
    fn to_decimal_at_dscale(&self, spec: Decimal128Spec) -> Result<i128, ValueError> {
        let overflow = || err(ValueErrorKind::NumericOverflow);
        let dscale = i32::from(self.dscale);
        let weight = i32::from(self.weight);
        // The value truncated below 10^-dscale, times 10^dscale.
        let mut magnitude: u128 = 0;
        for (i, d) in self.base_digits().enumerate() {
            if d == 0 {
                continue;
            }
            let i = i32::try_from(i).map_err(|_| overflow())?;
            // Power of ten of this digit's last decimal place, counted from 10^-dscale.
            let exp = 4 * (weight - i) + dscale;
            let part = if exp >= 0 {
                // Past 10^38 every nonzero digit overflows.
                usize::try_from(exp)
                    .ok()
                    .and_then(|e| POW10.get(e))
                    .and_then(|p| p.checked_mul(u128::from(d)))
                    .ok_or_else(overflow)?
            } else {
                match -exp {
                    1 => u128::from(d / 10),
                    2 => u128::from(d / 100),
                    3 => u128::from(d / 1000),
                    _ => 0,
                }
            };
            magnitude = magnitude.checked_add(part).ok_or_else(overflow)?;
        }
        let shift = usize::try_from(i32::from(spec.scale) - dscale).map_err(|_| overflow())?;
        let magnitude = POW10
            .get(shift)
            .and_then(|&p| magnitude.checked_mul(p))
            .ok_or_else(overflow)?;
        let limit = POW10
            .get(usize::from(spec.precision.min(38)))
            .copied()
            .unwrap_or(u128::MAX);
        if magnitude >= limit {
            return Err(overflow());
        }
        // Below 10^38 < 2^127: fits.
        let value = i128::try_from(magnitude).map_err(|_| overflow())?;
        Ok(if self.sign == SIGN_NEG { -value } else { value })
    }

    /// The decimal at `spec.scale`, a decimal digit at a time (any scale).
    fn to_decimal_by_digits(&self, spec: Decimal128Spec) -> Result<i128, ValueError> {
        let mut acc = Unscaled::new(spec.scale);
        for (d, exp) in self.decimal_digits() {
            acc.push(d, exp)?;
        }
        acc.finish(spec, self.is_negative())
    }

    /// The special value's error, for decimal conversion.
    fn special(&self) -> Option<ValueError> {
        match self.sign {
            SIGN_NAN => Some(err(ValueErrorKind::NumericNaN)),
            SIGN_PINF => Some(err(ValueErrorKind::Infinite { negative: false })),
            SIGN_NINF => Some(err(ValueErrorKind::Infinite { negative: true })),
            _ => None,
        }
    }

    /// Negative, and not zero at display scale (PostgreSQL has no negative zero).
    fn is_negative(&self) -> bool {
        self.sign == SIGN_NEG && self.decimal_digits().any(|(d, _)| d != 0)
    }
}

/// numeric binary -> unscaled i128 at `spec.scale`.
pub fn binary_to_decimal(b: &[u8], spec: Decimal128Spec) -> Result<i128, ValueError> {
    if let Some(v) = binary_to_decimal_fast(b, spec) {
        return Ok(v);
    }
    let value = Binary::parse(b)?;
    if let Some(e) = value.special() {
        return Err(e);
    }
    if i32::from(value.dscale) <= i32::from(spec.scale) {
        return value.to_decimal_at_dscale(spec);
    }
    value.to_decimal_by_digits(spec)
}

/// The usual value of a numeric(p, s) column with p up to 18: at most four base-10000
/// digits (below 10^16), a plain sign, a display scale no larger than the decimal's, a
/// result below 10^p. Read in u64 arithmetic: the digits as one integer, cut below the
/// display scale (as [`Binary::to_decimal_at_dscale`] cuts them), then scaled. `None`
/// for anything else, including every malformed or overflowing value: the checked path
/// reads those and says what is wrong.
fn binary_to_decimal_fast(b: &[u8], spec: Decimal128Spec) -> Option<i128> {
    let (header, digits) = b.split_first_chunk::<8>()?;
    let [n0, n1, w0, w1, s0, s1, d0, d1] = *header;
    let ndigits = u16::from_be_bytes([n0, n1]);
    let weight = i32::from(i16::from_be_bytes([w0, w1]));
    let sign = u16::from_be_bytes([s0, s1]);
    let dscale = i32::from(u16::from_be_bytes([d0, d1]));
    if ndigits > 4
        || digits.len() != usize::from(ndigits) * 2
        || !matches!(sign, SIGN_POS | SIGN_NEG)
        || dscale > i32::from(spec.scale)
    {
        return None;
    }
    let mut n: u64 = 0;
    for pair in digits.chunks_exact(2) {
        let d = match *pair {
            [hi, lo] => u16::from_be_bytes([hi, lo]),
            _ => return None,
        };
        if d >= NBASE {
            return None;
        }
        n = n * u64::from(NBASE) + u64::from(d);
    }
    let pow10 = |e: i32| -> Option<u64> { POW10_U64.get(usize::try_from(e).ok()?).copied() };
    // Power of ten of the last digit's units, counted from 10^-dscale.
    let exp = 4 * (weight - i32::from(ndigits) + 1) + dscale;
    let at_dscale = if exp >= 0 {
        n.checked_mul(pow10(exp)?)?
    } else {
        div_pow10(n, -exp)
    };
    let magnitude = at_dscale.checked_mul(pow10(i32::from(spec.scale) - dscale)?)?;
    let limit = POW10.get(usize::from(spec.precision.min(38)))?;
    if u128::from(magnitude) >= *limit {
        return None;
    }
    let value = i128::from(magnitude);
    Some(if sign == SIGN_NEG { -value } else { value })
}

/// `n / 10^e` for `n` below 10^16 and `e` from 1, each divisor a constant (the compiler
/// makes a multiplication of it: a division by a variable costs tens of cycles, on every
/// numeric value with digits below its display scale, such as 123.45).
fn div_pow10(n: u64, e: i32) -> u64 {
    debug_assert!(e >= 1, "div_pow10 cuts at least one place");
    match e {
        1 => n / 10,
        2 => n / 100,
        3 => n / 1_000,
        4 => n / 10_000,
        5 => n / 100_000,
        6 => n / 1_000_000,
        7 => n / 10_000_000,
        8 => n / 100_000_000,
        9 => n / 1_000_000_000,
        10 => n / 10_000_000_000,
        11 => n / 100_000_000_000,
        12 => n / 1_000_000_000_000,
        13 => n / 10_000_000_000_000,
        14 => n / 100_000_000_000_000,
        15 => n / 1_000_000_000_000_000,
        16 => n / 10_000_000_000_000_000,
        // n < 10^16: cutting 17 places or more leaves nothing.
        _ => 0,
    }
}

/// numeric binary -> the text `numeric_out` prints, into `out` (cleared first).
pub fn binary_to_text(b: &[u8], out: &mut String) -> Result<(), ValueError> {
    out.clear();
    write_binary(b, out)
}

/// Appends the `numeric_out` text of numeric binary to `out`.
pub(crate) fn write_binary(b: &[u8], out: &mut String) -> Result<(), ValueError> {
    let value = Binary::parse(b)?;
    match value.sign {
        SIGN_NAN => {
            out.push_str("NaN");
            return Ok(());
        }
        SIGN_PINF => {
            out.push_str("Infinity");
            return Ok(());
        }
        SIGN_NINF => {
            out.push_str("-Infinity");
            return Ok(());
        }
        _ => {}
    }
    if value.is_negative() {
        out.push('-');
    }
    let mut digits = value.decimal_digits().peekable();
    // Integer part: exponents 4*weight+3 down to 0; leading zeros suppressed.
    let top = 4 * i32::from(value.weight) + 3;
    let mut printed_any = false;
    for exp in (0..=top).rev() {
        let d = match digits.peek() {
            Some(&(d, e)) if e == exp => {
                digits.next();
                d
            }
            _ => 0,
        };
        if d != 0 || printed_any || exp == 0 {
            out.push(char::from(b'0' + d));
            printed_any = true;
        }
    }
    if top < 0 {
        out.push('0');
    }
    // Fraction: exactly dscale digits, zero-filled past the stored digits.
    if value.dscale > 0 {
        out.push('.');
        for k in 1..=i32::from(value.dscale) {
            let d = match digits.peek() {
                Some(&(d, e)) if e == -k => {
                    digits.next();
                    d
                }
                _ => 0,
            };
            out.push(char::from(b'0' + d));
        }
    }
    Ok(())
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(ndigits: &[u16], weight: i16, sign: u16, dscale: u16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&i16::try_from(ndigits.len()).unwrap_or(0).to_be_bytes());
        b.extend_from_slice(&weight.to_be_bytes());
        b.extend_from_slice(&sign.to_be_bytes());
        b.extend_from_slice(&dscale.to_be_bytes());
        for d in ndigits {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b
    }

    /// What `numeric_send` writes for `unscaled` × 10^-`scale` at display scale `scale`:
    /// base-10000 digits aligned on the point, without leading or trailing zero digits.
    fn numeric_send(unscaled: i64, scale: u8) -> Vec<u8> {
        let frac_base_digits = i16::from(scale.div_ceil(4));
        let mut m = u128::from(unscaled.unsigned_abs())
            * 10_u128.pow(4 * u32::from(scale.div_ceil(4)) - u32::from(scale));
        let mut digits = Vec::new();
        while m > 0 {
            digits.push(u16::try_from(m % 10_000).unwrap_or(0));
            m /= 10_000;
        }
        digits.reverse();
        let weight = i16::try_from(digits.len()).unwrap_or(0) - 1 - frac_base_digits;
        while digits.last() == Some(&0) {
            digits.pop();
        }
        let (weight, sign) = match (digits.is_empty(), unscaled < 0) {
            (true, _) => (0, SIGN_POS),
            (false, true) => (weight, SIGN_NEG),
            (false, false) => (weight, SIGN_POS),
        };
        encode(&digits, weight, sign, u16::from(scale))
    }

    #[test]
    fn numeric_send_encoder() {
        // From `SELECT numeric_send(v::numeric(12,2))`.
        assert_eq!(
            numeric_send(12_345, 2),
            encode(&[123, 4500], 0, SIGN_POS, 2)
        );
        assert_eq!(numeric_send(-100, 2), encode(&[1], 0, SIGN_NEG, 2));
        assert_eq!(numeric_send(5, 2), encode(&[500], -1, SIGN_POS, 2));
        assert_eq!(numeric_send(0, 2), encode(&[], 0, SIGN_POS, 2));
        assert_eq!(
            numeric_send(123_456_789, 0),
            encode(&[1, 2345, 6789], 2, SIGN_POS, 0)
        );
    }

    #[test]
    fn pow10_table() {
        for (i, p) in (0_u32..).zip(POW10) {
            assert_eq!(p, 10_u128.pow(i));
        }
        for (i, p) in (0_u32..).zip(POW10_U64) {
            assert_eq!(p, 10_u64.pow(i));
        }
    }

    proptest! {
        #[test]
        fn text_fast_path_matches_digit_path(
            s in "-?[0-9.]{0,41}",
            // Only the specs a column can have (`NumericMod::decimal128`): the scale at most
            // the precision. (numeric(1,39), say, is exact text, never a decimal.)
            (precision, scale) in (1_u8..=38).prop_flat_map(|p| (Just(p), -3..=p as i8)),
        ) {
            let spec = Decimal128Spec { precision, scale };
            if let Some(fast) = text_to_decimal_fast(&s, spec) {
                prop_assert_eq!(fast, text_to_decimal_by_digits(&s, spec));
            }
        }

        #[test]
        fn text_fast_path_matches_digit_path_on_numbers(
            int in "-?[0-9]{1,20}",
            frac in proptest::option::of("[0-9]{1,20}"),
            precision in 1_u8..=38,
            scale in 0_i8..25,
        ) {
            let s = match frac {
                Some(f) => format!("{int}.{f}"),
                None => int,
            };
            let spec = Decimal128Spec { precision, scale };
            prop_assert_eq!(text_to_decimal(&s, spec), text_to_decimal_by_digits(&s, spec));
        }

        #[test]
        fn base_digit_path_matches_digit_path(
            digits in proptest::collection::vec(prop_oneof![0_u16..10, 0_u16..10_000, Just(0_u16), Just(9999_u16)], 0..12),
            weight in -12_i16..12,
            negative in any::<bool>(),
            dscale in 0_u16..20,
            precision in 1_u8..=38,
            extra in 0_i8..10,
        ) {
            let sign = if negative { SIGN_NEG } else { SIGN_POS };
            let bytes = encode(&digits, weight, sign, dscale);
            let value = Binary::parse(&bytes);
            prop_assert!(value.is_ok());
            if let Ok(value) = value {
                let scale = i8::try_from(dscale).unwrap_or(0).saturating_add(extra);
                let spec = Decimal128Spec { precision, scale };
                prop_assert_eq!(value.to_decimal_at_dscale(spec), value.to_decimal_by_digits(spec));
            }
        }

        /// The u64 path gives what the checked path gives, whenever it answers; it
        /// answers for the usual numeric(p, s) values.
        #[test]
        fn binary_fast_path_matches_checked_path(
            digits in proptest::collection::vec(prop_oneof![0_u16..10, 0_u16..10_000, Just(0_u16), Just(9999_u16), 10_000_u16..], 0..7),
            weight in -8_i16..8,
            sign in prop_oneof![Just(SIGN_POS), Just(SIGN_NEG), Just(SIGN_NAN), Just(SIGN_PINF), any::<u16>()],
            dscale in prop_oneof![0_u16..20, any::<u16>()],
            precision in 1_u8..=38,
            scale in -3_i8..40,
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let mut bytes = encode(&digits, weight, sign, dscale);
            if let Some(at) = cut {
                bytes.truncate(at.index(bytes.len() + 1));
            }
            let spec = Decimal128Spec { precision, scale };
            let checked = Binary::parse(&bytes).and_then(|value| match value.special() {
                Some(e) => Err(e),
                None if i32::from(value.dscale) <= i32::from(spec.scale) => {
                    value.to_decimal_at_dscale(spec)
                }
                None => value.to_decimal_by_digits(spec),
            });
            if let Some(fast) = binary_to_decimal_fast(&bytes, spec) {
                prop_assert_eq!(Ok(fast), checked);
            }
            prop_assert_eq!(binary_to_decimal(&bytes, spec), checked);
        }

        /// numeric(p, s) values as numeric_send writes them take the u64 path.
        #[test]
        fn usual_binary_values_take_the_fast_path(
            unscaled in -999_999_999_999_i64..=999_999_999_999,
            precision in 12_u8..=18,
            scale in 0_i8..=6,
        ) {
            let spec = Decimal128Spec { precision, scale };
            let bytes = numeric_send(unscaled, scale.unsigned_abs());
            prop_assert_eq!(binary_to_decimal_fast(&bytes, spec), Some(i128::from(unscaled)));
        }
    }
}
