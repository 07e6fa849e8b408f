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

/// The usual float8 text, `-?digits(.digits)?` whose digits make an integer below 2^53:
/// that integer and the power of ten are both exact doubles, so one division (one
/// correctly rounded operation) gives the correctly rounded value, as Rust's parser would
/// (Clinger's fast path). `None` for anything else (exponents, more digits, words).
fn float8_exact(b: &[u8]) -> Option<f64> {
    let (negative, body) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    // More than 16 digits never fit 2^53.
    if body.len() > 17 {
        return None;
    }
    let PlainDecimal {
        mantissa,
        fraction_digits,
    } = plain_decimal(body)?;
    if mantissa >= 1 << 53 {
        return None;
    }
    // Below 2^53: exact as a double.
    #[allow(clippy::cast_precision_loss)]
    let value = mantissa as f64 / F64_POW10.get(fraction_digits)?;
    Some(if negative { -value } else { value })
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

    #[test]
    fn usual_float8_text() {
        for (text, expected) in [
            ("523.4567812345678", Some(523.4567812345678)),
            ("-0.5", Some(-0.5)),
            ("0", Some(0.0)),
            ("-0", Some(-0.0)),
            ("9007199254740991", Some(9_007_199_254_740_991.0)),
            ("9007199254740992", None),
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
