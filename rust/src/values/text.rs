//! Text format (the types' output functions) for the types whose text is a number, a
//! boolean or the value itself. pgoutput has already checked it is UTF-8.

use super::error::ValueError;
use super::float::read_f64;

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

/// float8 text: the usual forms read exactly without the general parser
/// ([`super::float`]); NaN, the infinities and unusual forms by [`float`].
pub fn float8(s: &str) -> Result<f64, ValueError> {
    match read_f64(s.as_bytes()) {
        Some(v) => Ok(v),
        None => float(s, "float8"),
    }
}

#[cfg(test)]
mod float_tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Doubles as float8out prints them (the shortest text that reads back) read back
        /// bit for bit, whichever parser reads them.
        #[test]
        fn printed_doubles_read_back(bits in any::<u64>(), scale in 0_i32..8) {
            let x = f64::from_bits(bits);
            let x = if x.is_finite() { x.fract() * 10_f64.powi(scale) } else { 0.5 };
            for text in [format!("{x}"), format!("{x:e}")] {
                prop_assert_eq!(float8(&text).map(f64::to_bits), Ok(x.to_bits()), "{}", text);
            }
        }
    }

    #[test]
    fn float8_words() {
        assert!(float8("NaN").is_ok_and(f64::is_nan));
        assert_eq!(float8("Infinity"), Ok(f64::INFINITY));
        assert_eq!(float8("-Infinity"), Ok(f64::NEG_INFINITY));
        assert_eq!(float8("-0").map(f64::to_bits), Ok((-0.0_f64).to_bits()));
        for text in ["inf", "nan", "-nan", "infinity", "1x", "", "."] {
            assert!(float8(text).is_err(), "{text}");
        }
    }
}
