//! The fixed-width scalars (bool, the integers, oid/xid/cid, float4, float8) and the
//! text-like types: text and binary give the same value, floats keep their exact bits,
//! NaN and the infinities, and malformed input is an error, never a panic.

use super::{both, unhex};
use crate::values::{Raw, ValueErrorKind};

/// `SELECT format('%s', v::bool), boolsend(v::bool)`
#[test]
fn bool_text_and_binary() {
    for (text, hex, expected) in [("t", "01", true), ("f", "00", false)] {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.bool().unwrap(), expected, "{raw:?}");
        }
    }
}

#[test]
fn bool_accepts_every_boolin_spelling() {
    let accepted = [
        ("true", true),
        ("TRUE", true),
        ("tr", true),
        ("yes", true),
        ("y", true),
        ("on", true),
        ("1", true),
        ("  t  ", true),
        ("false", false),
        ("fal", false),
        ("no", false),
        ("n", false),
        ("off", false),
        ("of", false),
        ("0", false),
    ];
    for (text, expected) in accepted {
        assert_eq!(Raw::Text(text).bool().unwrap(), expected, "{text:?}");
    }
    for bad in ["", "o", "truee", "2", "yess", "t f"] {
        let err = Raw::Text(bad).bool().unwrap_err();
        assert_eq!(err.kind, ValueErrorKind::Malformed, "{bad:?}");
    }
    // boolrecv takes any non-zero byte as true; a bool is exactly one byte.
    assert!(Raw::Binary(&[2]).bool().unwrap());
    assert!(Raw::Binary(&[]).bool().is_err());
    assert!(Raw::Binary(&[0, 1]).bool().is_err());
}

/// `SELECT format('%s', v::int2), int2send(v::int2)` (and int4send, int8send)
#[test]
fn integers_text_and_binary() {
    let int2 = [
        ("0", "0000"),
        ("1", "0001"),
        ("-1", "ffff"),
        ("32767", "7fff"),
        ("-32768", "8000"),
        ("12345", "3039"),
    ];
    for (text, hex) in int2 {
        let bin = unhex(hex);
        let expected: i16 = text.parse().unwrap();
        for raw in both(text, &bin) {
            assert_eq!(raw.int2().unwrap(), expected);
        }
    }
    let int4 = [
        ("0", "00000000"),
        ("42", "0000002a"),
        ("-42", "ffffffd6"),
        ("2147483647", "7fffffff"),
        ("-2147483648", "80000000"),
    ];
    for (text, hex) in int4 {
        let bin = unhex(hex);
        let expected: i32 = text.parse().unwrap();
        for raw in both(text, &bin) {
            assert_eq!(raw.int4().unwrap(), expected);
        }
    }
    let int8 = [
        ("0", "0000000000000000"),
        ("-1", "ffffffffffffffff"),
        ("9223372036854775807", "7fffffffffffffff"),
        ("-9223372036854775808", "8000000000000000"),
        ("1234567890123", "0000011f71fb04cb"),
    ];
    for (text, hex) in int8 {
        let bin = unhex(hex);
        let expected: i64 = text.parse().unwrap();
        for raw in both(text, &bin) {
            assert_eq!(raw.int8().unwrap(), expected);
        }
    }
}

#[test]
fn integers_reject_bad_input() {
    for bad in ["", " 1", "1 ", "1.0", "32768", "-32769", "0x10", "1e3"] {
        assert!(Raw::Text(bad).int2().is_err(), "{bad:?}");
    }
    assert!(Raw::Text("2147483648").int4().is_err());
    assert!(Raw::Text("9223372036854775808").int8().is_err());
    assert!(Raw::Binary(&[0; 3]).int4().is_err());
    assert!(Raw::Binary(&[0; 5]).int4().is_err());
    assert!(Raw::Binary(&[0; 4]).int8().is_err());
    assert!(Raw::Binary(&[0; 1]).int2().is_err());
}

/// `SELECT format('%s', v::oid), oidsend(v::oid)` (and xidsend, cidsend): unsigned
/// 32-bit values, widened so 4294967295 stays positive.
#[test]
fn unsigned_32_bit_types() {
    let table = [
        ("0", "00000000", 0_i64),
        ("4294967295", "ffffffff", 4_294_967_295),
        ("16384", "00004000", 16384),
        ("731", "000002db", 731),
    ];
    for (text, hex, expected) in table {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.oid().unwrap(), expected);
            assert_eq!(raw.xid().unwrap(), expected);
            assert_eq!(raw.cid().unwrap(), expected);
        }
    }
    assert!(Raw::Text("4294967296").oid().is_err());
    assert!(Raw::Text("-1").xid().is_err());
    assert_eq!(Raw::Text("x").cid().unwrap_err().type_name, "cid");
}

/// `SELECT format('%s', v::float4), float4send(v::float4)` with extra_float_digits=3:
/// shortest exact text. The bits must match exactly (NaN included).
#[test]
fn float4_text_and_binary_bits_agree() {
    let table = [
        ("0", "00000000"),
        ("-0", "80000000"),
        ("1.5", "3fc00000"),
        ("0.1", "3dcccccd"),
        ("3.4028235e+38", "7f7fffff"),
        ("-3.4028235e+38", "ff7fffff"),
        ("1.1754944e-38", "00800000"),
        ("1e-45", "00000001"),
        ("NaN", "7fc00000"),
        ("Infinity", "7f800000"),
        ("-Infinity", "ff800000"),
        ("123456.78", "47f12064"),
        ("1.234567e+06", "4996b438"),
        ("1e-05", "3727c5ac"),
        ("100000", "47c35000"),
    ];
    for (text, hex) in table {
        let bin = unhex(hex);
        let expected = u32::from_str_radix(hex, 16).unwrap();
        for raw in both(text, &bin) {
            assert_eq!(raw.float4().unwrap().to_bits(), expected, "{raw:?}");
        }
    }
}

/// `SELECT format('%s', v::float8), float8send(v::float8)` with extra_float_digits=3.
#[test]
fn float8_text_and_binary_bits_agree() {
    let table = [
        ("0", "0000000000000000"),
        ("-0", "8000000000000000"),
        ("0.1", "3fb999999999999a"),
        ("1e+20", "4415af1d78b58c40"),
        ("1.7976931348623157e+308", "7fefffffffffffff"),
        ("5e-324", "0000000000000001"),
        ("2.2250738585072014e-308", "0010000000000000"),
        ("NaN", "7ff8000000000000"),
        ("Infinity", "7ff0000000000000"),
        ("-Infinity", "fff0000000000000"),
        ("123456789012345.6", "42dc12218377de66"),
        ("1e+15", "430c6bf526340000"),
        ("1e-05", "3ee4f8b588e368f1"),
        ("0.30000000000000004", "3fd3333333333334"),
    ];
    for (text, hex) in table {
        let bin = unhex(hex);
        let expected = u64::from_str_radix(hex, 16).unwrap();
        for raw in both(text, &bin) {
            assert_eq!(raw.float8().unwrap().to_bits(), expected, "{raw:?}");
        }
    }
}

#[test]
fn floats_reject_spellings_postgres_never_prints() {
    for bad in [
        "inf", "-inf", "nan", "-NaN", "+NaN", "infinity", "", "1.0.0", "abc", "1e",
    ] {
        assert!(Raw::Text(bad).float8().is_err(), "{bad:?}");
        assert!(Raw::Text(bad).float4().is_err(), "{bad:?}");
    }
    assert!(Raw::Binary(&[0; 4]).float8().is_err());
    assert!(Raw::Binary(&[0; 8]).float4().is_err());
}

/// `SELECT textsend(v)`, `varcharsend`, `bpcharsend`, `namesend`, `json_send`,
/// `xml_send`, `jsonb_send`: the UTF-8 bytes (jsonb after a version byte 1).
#[test]
fn text_like_types() {
    // SELECT textsend('héllo, wörld ☃')
    let bin = unhex("68c3a96c6c6f2c2077c3b6726c6420e29883");
    for raw in both("héllo, wörld ☃", &bin) {
        assert_eq!(raw.text_str("text").unwrap(), "héllo, wörld ☃");
    }
    // SELECT bpcharsend('ab'::char(4)): the padding is part of the value.
    let bin = unhex("61622020");
    for raw in both("ab  ", &bin) {
        assert_eq!(raw.text_str("bpchar").unwrap(), "ab  ");
    }
    // SELECT xml_send('<a>b</a>'::xml)
    let bin = unhex("3c613e623c2f613e");
    for raw in both("<a>b</a>", &bin) {
        assert_eq!(raw.text_str("xml").unwrap(), "<a>b</a>");
    }
    // SELECT format('%s', '{"b": [1, 2.50], "a": null}'::jsonb), jsonb_send(...)
    let text = r#"{"a": null, "b": [1, 2.50]}"#;
    let bin = unhex("017b2261223a206e756c6c2c202262223a205b312c20322e35305d7d");
    for raw in both(text, &bin) {
        assert_eq!(raw.jsonb().unwrap(), text);
    }
    // SELECT json_send('{"b":1,  "a":2}'::json): json keeps its text as is.
    let text = r#"{"b":1,  "a":2}"#;
    let bin = unhex("7b2262223a312c20202261223a327d");
    for raw in both(text, &bin) {
        assert_eq!(raw.text_str("json").unwrap(), text);
    }
    let err = Raw::Binary(&[0x68, 0xff]).text_str("varchar").unwrap_err();
    assert_eq!(err.kind, ValueErrorKind::InvalidUtf8);
    assert_eq!(err.type_name, "varchar");
    assert_eq!(
        Raw::Binary(&[2, b'{', b'}']).jsonb().unwrap_err().kind,
        ValueErrorKind::Unsupported
    );
    assert_eq!(
        Raw::Binary(&[]).jsonb().unwrap_err().kind,
        ValueErrorKind::Malformed
    );
}
/// Random bit patterns (seeded) printed by PostgreSQL 15: `SELECT format('%s', x::float8)` for
/// the exact double `x` (and `::float4` for exact singles); the text must read back to
/// exactly those bits. 5994 such values were checked while writing this table.
#[rustfmt::skip]
const RANDOM_FLOATS: &[(&str, &str)] = &[
    ("f2a74de452e6b438", "-1.989032661366619e+244"),
    ("6513270e269e0d37", "7.761117632285041e+178"),
    ("0c5c7fd0a6a3a450", "3.980498358697587e-249"),
    ("d23f0824128b2f33", "-1.5432835417340557e+88"),
    ("1818e811892f902b", "1.3647584518757569e-192"),
    ("9531985d5d9dc9f8", "-1.3701135617873088e-206"),
    ("e8e25d940ed90475", "-1.7160537630466207e+197"),
    ("36f675cc81e74ef5", "6.294675241195386e-44"),
    ("1600a35a099950d8", "1.0613447212142254e-202"),
    ("6b0d549b6f03675a", "4.708325160387546e+207"),
    ("3d9c172411e20b8f", "6.387016158513563e-12"),
    ("8d116ece1738f7d9", "-9.973130378568733e-246"),
    ("6080fc6a", "7.435536e+19"),
    ("fdb2fa42", "-2.973775e+37"),
    ("3da293e2", "0.07938363"),
    ("d3579eb4", "-9.2608057e+11"),
    ("32cbb279", "2.371347e-08"),
    ("a9d6587c", "-9.518859e-14"),
    ("1dbd03e2", "5.00319e-21"),
    ("16396351", "1.497552e-25"),
    ("d7d29ac4", "-4.631243e+14"),
    ("9eeee2fe", "-2.5293112e-20"),
    ("c8b215ac", "-364717.38"),
    ("089d77b3", "9.477235e-34"),
    ("43678856d867c466", "5.2990648348713776e+16"),
    ("4d6a215a", "2.4550339e+08"),
    ("4a5b1dc5", "3.5900012e+06"),
];

#[test]
fn random_floats_read_back_exactly() {
    for &(hex, text) in RANDOM_FLOATS {
        let bin = unhex(hex);
        if bin.len() == 8 {
            let want = u64::from_str_radix(hex, 16).unwrap();
            for raw in both(text, &bin) {
                assert_eq!(raw.float8().unwrap().to_bits(), want, "{text}");
            }
        } else {
            let want = u32::from_str_radix(hex, 16).unwrap();
            for raw in both(text, &bin) {
                assert_eq!(raw.float4().unwrap().to_bits(), want, "{text}");
            }
        }
    }
}
