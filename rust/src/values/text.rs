//! Text format (the types' output functions) for the types whose text is a number, a
//! boolean or the value itself. pgoutput has already checked it is UTF-8.

use super::error::ValueError;
use super::scan::{plain_decimal, PlainDecimal};

/// bool: `t`/`f` as `boolout` prints; every spelling `boolin` accepts is taken too
/// (`true`, `yes`, `on`, `1`, unique prefixes, any case, surrounding spaces).
pub fn bool(s: &str) -> Result<bool, ValueError> {
    // What `boolout` prints.
    match s {
        "t" => return Ok(true),
        "f" => return Ok(false),
        _ => {}
    }
    let word = s.trim_matches(|c: char| c.is_ascii_whitespace());
    if word.is_empty() || word.len() > "false".len() {
        return Err(ValueError::malformed("bool"));
    }
    let is_prefix_of = |full: &str, min: usize| {
        word.len() >= min
            && full
                .get(..word.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(word))
    };
    if is_prefix_of("true", 1) || is_prefix_of("yes", 1) || is_prefix_of("on", 2) || word == "1" {
        Ok(true)
    } else if is_prefix_of("false", 1)
        || is_prefix_of("no", 1)
        || is_prefix_of("off", 2)
        || word == "0"
    {
        Ok(false)
    } else {
        Err(ValueError::malformed("bool"))
    }
}

fn integer<T: std::str::FromStr>(s: &str, type_name: &'static str) -> Result<T, ValueError> {
    // `int2out`/`int4out`/`int8out` print an optional `-` and digits; Rust's parser takes
    // exactly that (and a `+`), and reports overflow.
    s.parse().map_err(|_| ValueError::malformed(type_name))
}

pub fn int2(s: &str) -> Result<i16, ValueError> {
    integer(s, "int2")
}

pub fn int4(s: &str) -> Result<i32, ValueError> {
    integer(s, "int4")
}

pub fn int8(s: &str) -> Result<i64, ValueError> {
    integer(s, "int8")
}

/// oid, xid, cid: unsigned 32-bit decimal, widened to i64.
pub fn uint32(s: &str, type_name: &'static str) -> Result<i64, ValueError> {
    integer::<u32>(s, type_name).map(i64::from)
}

/// Float text: `float4out`/`float8out` print the shortest exact decimal (PostgreSQL 12+
/// with extra_float_digits > 0), `1e+20`-style exponents, `NaN`, `Infinity`,
/// `-Infinity`. Rust's parser is correctly rounded and takes all of these.
fn float<T: std::str::FromStr + Float>(s: &str, type_name: &'static str) -> Result<T, ValueError> {
    // A finite result: Rust's parser took digits, a point, an exponent and signs only, no
    // word; nothing more to check.
    if let Ok(v) = s.parse::<T>() {
        if v.finite() {
            return Ok(v);
        }
    }
    // Rust also takes `inf`, `-nan` and the like; PostgreSQL's spellings are the only
    // words let through.
    let word = s
        .bytes()
        .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E');
    if word && !matches!(s, "NaN" | "Infinity" | "-Infinity") {
        return Err(ValueError::malformed(type_name));
    }
    s.parse().map_err(|_| ValueError::malformed(type_name))
}

/// What [`float`] needs of a float type.
trait Float: Copy {
    fn finite(self) -> bool;
}

impl Float for f32 {
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Float for f64 {
    fn finite(self) -> bool {
        self.is_finite()
    }
}

pub fn float4(s: &str) -> Result<f32, ValueError> {
    float(s, "float4")
}

pub fn float8(s: &str) -> Result<f64, ValueError> {
    match float8_exact(s.as_bytes()) {
        Some(v) => Ok(v),
        None => float(s, "float8"),
    }
}

/// 10^0 to 10^22: the powers of ten a double holds exactly.
#[allow(clippy::unreadable_literal)]
const F64_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The usual float8 text, `-?digits(.digits)?` of at most 19 digits, read exactly.
///
/// Digits making an integer below 2^53: that integer and the power of ten are both exact
/// doubles, so one division (one correctly rounded operation) gives the correctly
/// rounded value, as Rust's parser would (Clinger's fast path). Larger integers (the
/// shortest text of many doubles has 17 digits) are divided in integer arithmetic
/// ([`divide_rounded`]). `None` for anything else (exponents, more digits, words).
fn float8_exact(b: &[u8]) -> Option<f64> {
    let (negative, body) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let PlainDecimal {
        mantissa,
        fraction_digits,
    } = plain_decimal(body)?;
    let value = if mantissa < 1 << 53 {
        // Below 2^53: exact as a double.
        #[allow(clippy::cast_precision_loss)]
        let m = mantissa as f64;
        m / F64_POW10.get(fraction_digits)?
    } else {
        divide_rounded(mantissa, fraction_digits)?
    };
    Some(if negative { -value } else { value })
}

/// `m / 10^k` rounded to the nearest double (ties to even), for `m` from 2^53 and `k` up
/// to 22: scaled by a power of two so that the integer quotient has 53 or 54 bits, the
/// quotient is rounded with the remainder, then scaled back (exactly: by a power of two,
/// far from the subnormal and infinite ranges).
// The names of the arithmetic above: m / 10^k = q + r / den, with e the binary exponent.
#[allow(clippy::many_single_char_names)]
fn divide_rounded(m: u64, k: usize) -> Option<f64> {
    let d = *super::numeric::POW10.get(k).filter(|_| k <= 22)?;
    let m = u128::from(m);
    let bits = |x: u128| 128 - x.leading_zeros() as i32;
    // The quotient of two numbers of a and b bits has a - b or a - b + 1 bits: 53 or 54.
    // m < 2^64 and d < 2^74, so the scaled m stays below 2^127.
    let mut e = 53 + bits(d) - bits(m);
    let (n, den) = if e >= 0 { (m << e, d) } else { (m, d << -e) };
    let q = n / den;
    let r = n - q * den;
    let (q, up) = if q >> 53 == 0 {
        let twice = r << 1;
        (q, twice > den || (twice == den && q & 1 == 1))
    } else {
        // 54 bits: the last one goes to the rounding, the scale halves.
        let (half, dropped) = (q >> 1, q & 1);
        e -= 1;
        (half, dropped == 1 && (r != 0 || half & 1 == 1))
    };
    // At most 2^53: exact as a double.
    let q = u64::try_from(q + u128::from(up)).ok()?;
    // 2^-e as a double: e is between -11 and 127 here.
    let scale = f64::from_bits(u64::try_from(1023 - e).ok()? << 52);
    #[allow(clippy::cast_precision_loss)]
    let q = q as f64;
    Some(q * scale)
}

#[cfg(test)]
mod float_tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The exact path reads what Rust's parser reads, whenever it answers.
        #[test]
        fn exact_float8_path_matches_the_parser(
            s in "-?[0-9]{0,18}(\\.[0-9]{0,18})?",
        ) {
            if let Some(v) = float8_exact(s.as_bytes()) {
                prop_assert_eq!(Some(v.to_bits()), s.parse::<f64>().ok().map(f64::to_bits));
            }
        }

        /// Doubles as float8out prints them (the shortest text that reads back): the
        /// exact path, when it answers, reads them back bit for bit.
        #[test]
        fn printed_doubles_read_back(bits in any::<u64>(), scale in 0_i32..8) {
            let x = f64::from_bits(bits);
            let x = if x.is_finite() { x.fract() * 10_f64.powi(scale) } else { 0.5 };
            let text = format!("{x}");
            if let Some(v) = float8_exact(text.as_bytes()) {
                prop_assert_eq!(v.to_bits(), x.to_bits(), "{}", text);
            }
            prop_assert_eq!(float8(&text).map(f64::to_bits), Ok(x.to_bits()));
        }
    }

    proptest! {
        /// Integer division with rounding gives what Rust's parser gives.
        #[test]
        fn divided_float8_matches_the_parser(
            m in (1_u64 << 53)..=u64::MAX,
            k in 0_usize..=22,
        ) {
            let text = decimal_text(m, k);
            let expected = text.parse::<f64>().ok().map(f64::to_bits);
            prop_assert_eq!(divide_rounded(m, k).map(f64::to_bits), expected, "{}", text);
        }

        /// Exact ties, the midpoint between two neighbouring doubles a * 2^s and
        /// (a + 1) * 2^s, and the decimals one unit in the last place either side.
        #[test]
        fn divided_float8_rounds_ties_like_the_parser(
            a in (1_u64 << 52)..(1 << 53),
            s in -4_i32..=10,
            extra_zeros in 0_u32..3,
            nudge in -1_i64..=1,
        ) {
            // The midpoint (2a + 1) * 2^(s - 1) as m / 10^k.
            let odd = 2 * u128::from(a) + 1;
            let (m, k) = if s >= 1 {
                (odd << (s - 1), 0)
            } else {
                let k = (1 - s) as u32;
                (odd * 5_u128.pow(k), k as usize)
            };
            let m = m * 10_u128.pow(extra_zeros);
            let k = k + extra_zeros as usize;
            if let Ok(m) = u64::try_from(m) {
                let m = m.saturating_add_signed(nudge);
                let text = decimal_text(m, k);
                let expected = text.parse::<f64>().ok().map(f64::to_bits);
                prop_assert_eq!(divide_rounded(m, k).map(f64::to_bits), expected, "{}", text);
            }
        }
    }

    /// `m / 10^k` as float8out would print it (without the trailing-zero trimming).
    fn decimal_text(m: u64, k: usize) -> String {
        let digits = m.to_string();
        if k == 0 {
            digits
        } else if k < digits.len() {
            let (int, frac) = digits.split_at(digits.len() - k);
            format!("{int}.{frac}")
        } else {
            format!("0.{}{digits}", "0".repeat(k - digits.len()))
        }
    }

    #[test]
    fn divided_float8_ties() {
        // 2^53 + 1 lies halfway between two doubles: ties to even (down); 2^53 + 3 up.
        for (m, k, text) in [
            (9_007_199_254_740_993, 0, "9007199254740993"),
            (9_007_199_254_740_995, 0, "9007199254740995"),
            (90_071_992_547_409_930, 1, "9007199254740993.0"),
            (18_446_744_073_709_551_615, 22, "0.0018446744073709551615"),
            (12_305_556_444_087_684, 14, "123.05556444087684"),
            (49_795_833_366_358_755, 14, "497.95833366358755"),
        ] {
            assert_eq!(
                divide_rounded(m, k).map(f64::to_bits),
                text.parse::<f64>().ok().map(f64::to_bits),
                "{text}"
            );
        }
    }

    #[test]
    fn usual_float8_text() {
        for (text, expected) in [
            ("523.4567812345678", Some(523.4567812345678)),
            ("-0.5", Some(-0.5)),
            ("0", Some(0.0)),
            ("-0", Some(-0.0)),
            ("9007199254740991", Some(9_007_199_254_740_991.0)),
            ("9007199254740992", Some(9_007_199_254_740_992.0)),
            ("123.05556444087684", Some(123.055_564_440_876_84)),
            ("12345678901234567890", None),
            ("1e+20", None),
            ("NaN", None),
            ("5.", None),
            (".5", None),
            ("1.2.3", None),
            ("", None),
        ] {
            assert_eq!(float8_exact(text.as_bytes()), expected, "{text}");
        }
    }
}
