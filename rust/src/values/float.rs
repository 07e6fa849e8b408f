//! float8 text read into the nearest double without the general parser, for the forms
//! `float8out` prints: `-?digits(.digits)?` and `-?d(.digits)?e±dd` (PostgreSQL 12+ prints
//! the shortest digits that read back, at most 17 of them, in exponent form below 1e-4
//! and from 1e15 up; PostgreSQL docs, "Floating-Point Types", and the server's
//! `float8out_internal`).
//!
//! The value `w × 10^q` (`w` the digits as an integer, up to 19 digits) becomes a double
//! in one of two exact ways:
//!
//! * Clinger's fast path: `w ≤ 2^53` and `|q| ≤ 22`, so `w` and `10^|q|` are both exact
//!   doubles and one multiplication or division (one correctly rounded operation) gives
//!   the correctly rounded result;
//! * otherwise the method of Eisel and Lemire (D. Lemire, "Number Parsing at a Gigabyte
//!   per Second", Software: Practice and Experience 51(8), 2021, sections 5 to 7): `w`
//!   times a 128-bit approximation of `5^q`, whose top 54 bits are the mantissa and its
//!   rounding bit. For `0 ≤ q ≤ 55` the approximation is `5^q` itself, so the 192-bit
//!   product is exact and rounds exactly (ties to even). For `q < 0` it is within one
//!   unit of `2^k / 5^-q`, so the product is within `2^64` of the true one; the rounding
//!   is certain unless the bits below the rounding bit lie that close to a multiple of
//!   the rounding unit (a chance of about 2^-73), and then `None` is returned.
//!
//! Anything else (more digits, exponents beyond the table, words such as `NaN`) is `None`:
//! the caller then uses the standard library's parser, which is correctly rounded too. So
//! both give the same double for every text this module reads.

/// The smallest and largest decimal exponent `q` of the table. `5^55 < 2^128`, so every
/// positive power in the table is exact; `5^54 < 2^126`, so the division that makes the
/// negative ones fits `u128` arithmetic. With 17 digits that is values from about 1e-38
/// to 1e71.
const Q_MIN: i32 = -54;
const Q_MAX: i32 = 55;
const TABLE_LEN: usize = (Q_MAX - Q_MIN + 1) as usize;

use super::scan::digit_run;

/// One power of five, normalised: `5^q ≈ mantissa × 2^(exponent − 127)`, with the top bit
/// of `mantissa` set.
#[derive(Clone, Copy)]
struct Pow5 {
    mantissa: u128,
    /// `⌊log2 5^q⌋`.
    exponent: i32,
}

/// `5^q` for `q` in `Q_MIN..=Q_MAX`, at index `q − Q_MIN`; computed at compile time.
static POW5: [Pow5; TABLE_LEN] = pow5_table();

/// Builds [`POW5`]: for `q ≥ 0`, `5^q` shifted up to 128 bits (exact); for `q < 0`,
/// `⌊2^b / 5^−q⌋ + 1` for the `b` that gives 128 bits, that is `2^b / 5^−q` rounded up
/// (Lemire's paper, section 5: below `5^−q < 2^64` the rounding up keeps exact products
/// recognisable; above, the quotient is computed with `b` larger by `z + 1` and the
/// rounded-up value truncated to 128 bits, still within one unit).
#[allow(clippy::indexing_slicing)] // constant evaluation: out of range would not compile
const fn pow5_table() -> [Pow5; TABLE_LEN] {
    let mut table = [Pow5 {
        mantissa: 0,
        exponent: 0,
    }; TABLE_LEN];
    let mut index = 0;
    while index < TABLE_LEN {
        let q = Q_MIN + index as i32;
        table[index] = if q >= 0 {
            let power = 5_u128.pow(q as u32);
            Pow5 {
                mantissa: power << power.leading_zeros(),
                exponent: 127 - power.leading_zeros() as i32,
            }
        } else {
            let divisor = 5_u128.pow((-q) as u32);
            // 2^(z−1) < 5^−q < 2^z: five's powers are never powers of two.
            let z = 128 - divisor.leading_zeros();
            let b = if q >= -27 { z + 127 } else { 2 * z + 128 };
            Pow5 {
                mantissa: rounded_up_quotient(b, divisor, z),
                exponent: -(z as i32),
            }
        };
        index += 1;
    }
    table
}

/// `⌊2^b / d⌋ + 1`, shifted right to its top 128 bits, for `2^(z−1) < d < 2^z` and
/// `d < 2^126`. The quotient has `b − z + 1` bits; schoolbook binary division yields them
/// from the top, keeping the 128 wanted and noting whether those below are all ones (then
/// the `+ 1` carries into the kept bits).
const fn rounded_up_quotient(b: u32, d: u128, z: u32) -> u128 {
    let shift = b - z + 1 - 128;
    let mut remainder: u128 = 0;
    let mut kept: u128 = 0;
    let mut dropped_all_ones = true;
    let mut bit = b as i64;
    while bit >= 0 {
        // The dividend 2^b has a single one, at bit b. The remainder stays below d < 2^126.
        remainder = (remainder << 1) | (bit == b as i64) as u128;
        let one = remainder >= d;
        if one {
            remainder -= d;
        }
        if bit >= shift as i64 {
            // The bits above the quotient's top are zeros: shifting them out loses nothing.
            kept = (kept << 1) | one as u128;
        } else if !one {
            dropped_all_ones = false;
        }
        bit -= 1;
    }
    // `kept` is below 2^128 − 2^64 here (d > 2^(z−1) + 1), so the carry cannot overflow.
    if dropped_all_ones {
        kept + 1
    } else {
        kept
    }
}

/// 10^0 to 10^22: the powers of ten a double holds exactly.
const F64_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The double nearest to the float text `b` when it is `-?digits(.digits)?` with an
/// optional exponent `[eE][+-]?digits`, of at most 19 significant digits and within the
/// table's range; `None` for anything else, or when the result would not be certain.
#[inline]
pub(crate) fn read_f64(b: &[u8]) -> Option<f64> {
    let (negative, body) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let (w, q) = decimal(body)?;
    let magnitude = if w == 0 { 0.0 } else { nearest(w, q)? };
    Some(if negative { -magnitude } else { magnitude })
}

/// `digits(.digits)?([eE][+-]?digits)?` as `(w, q)`, the value `w × 10^q`: `None` when
/// the form differs, `w` overflows a u64 (leading zeros do not count) or `q` is far out of
/// any double's range.
#[inline]
fn decimal(b: &[u8]) -> Option<(u64, i32)> {
    let (w, int_end) = digit_run(0, b, 0)?;
    if int_end == 0 {
        return None;
    }
    let (w, end) = match b.get(int_end) {
        Some(b'.') => match digit_run(w, b, int_end + 1)? {
            (_, end) if end == int_end + 1 => return None,
            run => run,
        },
        _ => (w, int_end),
    };
    let fraction_digits = i32::try_from(end.saturating_sub(int_end + 1)).ok()?;
    let exponent = match b.get(end..)?.split_first() {
        None => 0,
        Some((b'e' | b'E', tail)) => exponent(tail)?,
        Some(_) => return None,
    };
    Some((w, exponent.checked_sub(fraction_digits)?))
}

/// The exponent after `e`: an optional sign and one to four digits (a double's exponents
/// need three; longer runs are left to the general parser).
#[inline]
fn exponent(b: &[u8]) -> Option<i32> {
    let (negative, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    let mut e: i32 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        e = e * 10 + i32::from(d);
    }
    Some(if negative { -e } else { e })
}

/// The double nearest to `w × 10^q`, `w > 0`; `None` outside the exact methods' reach.
#[inline]
fn nearest(w: u64, q: i32) -> Option<f64> {
    if w <= 1 << 53 {
        if let Some(&p) = F64_POW10.get(q.unsigned_abs() as usize) {
            // Exact operands, one rounding.
            #[allow(clippy::cast_precision_loss)]
            let w = w as f64;
            return Some(if q < 0 { w / p } else { w * p });
        }
    }
    eisel_lemire(w, q)
}

/// Eisel and Lemire's method (see the module docs), `w > 0`.
#[inline]
fn eisel_lemire(w: u64, q: i32) -> Option<f64> {
    let pow5 = *POW5.get(usize::try_from(q.checked_sub(Q_MIN)?).ok()?)?;
    let w0 = w;
    let lz = w.leading_zeros();
    let w = u128::from(w << lz);
    // The 192-bit product w × mantissa as (high, middle, low) words.
    let upper = w * (pow5.mantissa >> 64);
    let lower = w * (pow5.mantissa & u128::from(u64::MAX));
    let (middle, carry) = (upper as u64).overflowing_add((lower >> 64) as u64);
    let high = ((upper >> 64) as u64) + u64::from(carry);
    let low = lower as u64;
    // The product is at least 2^190: `high` has 63 or 64 bits, of which the top 54 are the
    // mantissa and its rounding bit.
    let upper_bit = (high >> 63) as u32;
    let cut = 9 + upper_bit;
    let below = high & ((1 << cut) - 1);
    let bits54 = high >> cut;
    let exact = q >= 0;
    let round_up = if exact {
        // Round half to even on the exact product.
        let sticky = below != 0 || middle != 0 || low != 0;
        bits54 & 1 == 1 && (sticky || bits54 & 2 == 2)
    } else {
        // Within 2^64 of the true product: certain only away from the cut's multiples,
        // where the true bits below the rounding bit are not all zero (no tie either).
        let near_down = below == 0 && middle == 0;
        let near_up = below == (1 << cut) - 1 && middle == u64::MAX;
        if near_down || near_up {
            return exact_quotient(w0, q);
        }
        bits54 & 1 == 1
    };
    // 53 bits, or 2^53 when rounding carried out: the addition below then moves into the
    // exponent field, which is what the carry means.
    let mantissa = (bits54 >> 1) + u64::from(round_up);
    // value = high × 2^(128 + e5 − 127 + q − lz) and high = bits54 × 2^cut, so the value
    // is mantissa × 2^(cut + 1 + 1 + e5 + q − lz), the mantissa's top bit being 2^52.
    let e2 = i64::from(cut) + 2 + i64::from(pow5.exponent) + i64::from(q) - i64::from(lz);
    // The table's range keeps the biased exponent well inside 1..2047.
    let biased = u64::try_from(e2 + 52 + 1023).ok()?;
    Some(f64::from_bits((biased << 52) + mantissa - (1 << 52)))
}

/// `w × 10^q` for `q < 0` when `5^−q` divides `w`: then it is the integer `w / 5^−q` times
/// `2^q`, which `as` rounds once (to nearest, ties to even) and the power of two scales
/// exactly. Such values (binary fractions like `4458641684258620.5`, which float8out
/// prints as `4.4586416842586205e+15`) are the ones whose product with the rounded-up
/// power of five lands next to a rounding boundary. `None` otherwise.
#[cold]
fn exact_quotient(w: u64, q: i32) -> Option<f64> {
    let d = 5_u64.checked_pow((-q).try_into().ok()?)?;
    if w % d != 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let u = (w / d) as f64;
    // 2^q as a double: q is between -27 and -1 here.
    let scale = f64::from_bits(u64::try_from(1023 + i64::from(q)).ok()? << 52);
    Some(u * scale)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What the general parser reads, bit for bit.
    fn std_bits(text: &str) -> Option<u64> {
        text.parse::<f64>().ok().map(f64::to_bits)
    }

    #[test]
    fn table_matches_exact_powers() {
        // Positive powers: exact. Negative ones up to 5^27: against u128 arithmetic, the
        // quotient 2^(z+127) / 5^k computed as (2^(z+127) − 1) / 5^k rounded down then up.
        for (i, entry) in POW5.iter().enumerate() {
            let q = Q_MIN + i as i32;
            assert_eq!(entry.mantissa >> 127, 1, "q = {q}: not normalised");
            if q >= 0 {
                let p = 5_u128.pow(q as u32);
                assert_eq!(
                    entry.mantissa >> entry.mantissa.trailing_zeros(),
                    p >> p.trailing_zeros()
                );
                assert_eq!(entry.exponent, 127 - p.leading_zeros() as i32);
            }
        }
        // 5^-1 = 0.2 = 0.0011 0011 ... in binary: 1.1001 1001 ... × 2^-3, rounded up.
        let fifth = POW5.get((-1 - Q_MIN) as usize).copied();
        assert_eq!(fifth.map(|p| p.exponent), Some(-3));
        assert_eq!(
            fifth.map(|p| p.mantissa),
            Some(0xCCCC_CCCC_CCCC_CCCC_CCCC_CCCC_CCCC_CCCD)
        );
    }

    #[test]
    fn usual_float8_text() {
        for text in [
            "0",
            "-0",
            "1",
            "523.4567812345678",
            "0.8933170425576351",
            "1.2376957570551753e-06",
            "-630779633754.1511",
            "9007199254740993",
            "9007199254740995",
            "123.05556444087684",
            "497.95833366358755",
            "0.0018446744073709551615",
            "1e+15",
            "1.234567890123456e+15",
            "2.2250738585072014e-308",
            "1.7976931348623157e+308",
            "5e-324",
            "1e-38",
            "1E5",
            "1e5",
            "0.1",
            "0.30000000000000004",
            "12345678901234567890",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            let got = read_f64(text.as_bytes()).map(f64::to_bits);
            if let Some(bits) = got {
                assert_eq!(Some(bits), std_bits(text), "{text}");
            }
        }
        for text in [
            "",
            "-",
            ".5",
            "5.",
            "1.2.3",
            "1e",
            "1e+",
            "NaN",
            "Infinity",
            "-Infinity",
            "+1",
            "1x",
            "1e99999",
        ] {
            assert_eq!(read_f64(text.as_bytes()), None, "{text}");
        }
        // The forms float8out prints are read here, not left to the general parser.
        for text in [
            "0.8933170425576351",
            "1.2376957570551753e-06",
            "-630779633754.1511",
            "1e+15",
        ] {
            assert!(read_f64(text.as_bytes()).is_some(), "{text}");
        }
    }

    /// Doubles of the usual magnitudes (1e-30 to 1e60), printed the shortest way: all read
    /// back exactly, nearly all here (the rest, exact binary fractions such as
    /// `4458641684258620.5`, by the general parser).
    #[test]
    fn usual_magnitudes_are_read_here() {
        // A fixed linear congruential sequence: the same doubles every run.
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state
        };
        let (mut here, total) = (0, 100_000);
        for _ in 0..total {
            let m = 1.0 + (next() >> 11) as f64 / (1_u64 << 53) as f64 * 9.0;
            let e = (next() % 90) as i32 - 30;
            let x = m * 10_f64.powi(e);
            let text = float8out(x);
            assert_eq!(text.parse::<f64>().map(f64::to_bits), Ok(x.to_bits()));
            if let Some(v) = read_f64(text.as_bytes()) {
                assert_eq!(v.to_bits(), x.to_bits(), "{text}");
                here += 1;
            }
        }
        assert!(here * 1000 >= total * 999, "{here} of {total}");
    }

    /// `x` as float8out prints it: the shortest digits, in fixed notation from 1e-4 to
    /// below 1e15 and otherwise as `d.ddde±XX` (at least two exponent digits).
    fn float8out(x: f64) -> String {
        if x == 0.0 || (1e-4..1e15).contains(&x.abs()) {
            return format!("{x}");
        }
        let text = format!("{x:e}");
        match text.split_once('e') {
            Some((digits, exp)) => {
                let (sign, exp) = exp.strip_prefix('-').map_or(("+", exp), |e| ("-", e));
                format!("{digits}e{sign}{exp:0>2}")
            }
            None => text,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Every double, printed the shortest way in both notations: read back exactly
        /// when read here.
        #[test]
        fn shortest_text_reads_back(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assume!(x.is_finite());
            for text in [format!("{x}"), format!("{x:e}"), format!("{x:?}")] {
                if let Some(v) = read_f64(text.as_bytes()) {
                    prop_assert_eq!(v.to_bits(), x.to_bits(), "{}", text);
                }
            }
        }

        /// Any decimal text of the accepted form: what the general parser reads.
        #[test]
        fn decimal_text_matches_the_parser(
            text in "-?[0-9]{1,20}(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
        ) {
            if let Some(v) = read_f64(text.as_bytes()) {
                prop_assert_eq!(Some(v.to_bits()), std_bits(&text), "{}", text);
            }
        }

        /// Exact ties between two neighbouring doubles and the decimals one unit in the
        /// last place either side, as `m / 10^k` and `m × 10^k`.
        #[test]
        fn ties_round_like_the_parser(
            a in (1_u64 << 52)..(1 << 53),
            s in -60_i32..=60,
            nudge in -1_i64..=1,
        ) {
            // The midpoint (2a + 1) × 2^(s − 1) in decimal: exact, since 2^-n = 5^n / 10^n.
            let odd = 2 * u128::from(a) + 1;
            let (m, k) = if s >= 1 {
                (odd << (s - 1).min(20), 0)
            } else {
                let k = (1 - s).min(30) as u32;
                (odd.saturating_mul(5_u128.saturating_pow(k)), k as i32)
            };
            if let Ok(m) = u64::try_from(m) {
                let m = m.saturating_add_signed(nudge);
                let text = format!("{m}e-{k}");
                if let Some(v) = read_f64(text.as_bytes()) {
                    prop_assert_eq!(Some(v.to_bits()), std_bits(&text), "{}", text);
                }
            }
        }
    }
}
