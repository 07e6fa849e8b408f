//! numeric: text and binary give the same i128 at a decimal's scale or the same
//! `numeric_out` text; NaN, the infinities, overflow and digits beyond the scale are
//! distinct errors rather than rounded values; typmods decode to precision and scale.

use super::{both, unhex};
use crate::values::types::{Decimal128Spec, NumericMod};
use crate::values::{Raw, ValueErrorKind};

fn spec(precision: u8, scale: i8) -> Decimal128Spec {
    Decimal128Spec { precision, scale }
}

/// `SELECT format('%s', v::numeric(p,s)), numeric_send(v::numeric(p,s))`: the column's
/// typmod fixes the display scale, so text has exactly `s` fraction digits.
const DECIMALS: [((u8, i8), &str, &str, i128); 20] = [
    ((10, 2), "-12.30", "0002000040000002000c0bb8", -1230),
    ((10, 2), "0.00", "0000000000000002", 0),
    (
        (10, 2),
        "12345678.99",
        "000300010000000204d2162e26ac",
        1234567899,
    ),
    ((10, 2), "-0.01", "0001ffff400000020064", -1),
    ((10, 2), "0.50", "0001ffff000000021388", 50),
    (
        (38, 0),
        "99999999999999999999999999999999999999",
        "000a0009000000000063270f270f270f270f270f270f270f270f270f",
        99999999999999999999999999999999999999,
    ),
    (
        (38, 0),
        "-99999999999999999999999999999999999999",
        "000a0009400000000063270f270f270f270f270f270f270f270f270f",
        -99999999999999999999999999999999999999,
    ),
    (
        (38, 38),
        "0.12345678901234567890123456789012345678",
        "000affff0000002604d2162e23340d801ed204d2162e23340d801e78",
        12345678901234567890123456789012345678,
    ),
    (
        (38, 38),
        "-0.00000000000000000000000000000000000001",
        "0001fff6400000260064",
        -1,
    ),
    // numeric(5,-2) (PostgreSQL 15+): '12345' is stored rounded to hundreds.
    ((5, -2), "12300", "0002000100000000000108fc", 123),
    ((5, -2), "-99900", "0002000140000000000926ac", -999),
    ((20, 4), "0.0001", "0001ffff000000040001", 1),
    (
        (12, 6),
        "123456.000001",
        "0004000100000006000c0d8000000064",
        123456000001,
    ),
    (
        (18, 3),
        "-1000000.500",
        "0003000140000003006400001388",
        -1000000500,
    ),
    ((4, 0), "9999", "0001000000000000270f", 9999),
    (
        (38, 10),
        "1234567890123456789012345678.0123456789",
        "000a00060000000a04d2162e23340d801ed204d2162e007b11d722c4",
        12345678901234567890123456780123456789,
    ),
    ((1, 0), "-9", "00010000400000000009", -9),
    ((10, 4), "10000.0000", "00010001000000040001", 100000000),
    (
        (30, 0),
        "100000000000000000000",
        "00010005000000000001",
        100000000000000000000,
    ),
    ((5, 3), "1.200", "0002000000000003000107d0", 1200),
];

#[test]
fn decimal_text_and_binary_agree() {
    for ((p, s), text, hex, expected) in DECIMALS {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(
                raw.numeric_decimal(spec(p, s)).unwrap(),
                expected,
                "{raw:?} at ({p},{s})"
            );
        }
    }
}

/// `SELECT format('%s', v::numeric), numeric_send(v::numeric)` (unconstrained): binary
/// must print exactly as numeric_out does, text passes through.
const TEXTS: [(&str, &str); 21] = [
    ("0", "0000000000000000"),
    ("0.000", "0000000000000003"),
    ("1.500", "000200000000000300011388"),
    ("-0.001", "0001ffff40000003000a"),
    ("0.0001", "0001ffff000000040001"),
    ("0.00001", "0001fffe0000000503e8"),
    ("12345678901234567890.123456789", "000800040000000904d2162e23340d801ed204d2162e2328"),
    ("100000000000000000000", "00010005000000000001"),
    ("-0.00000000000000000001", "0001fffb400000140001"),
    ("NaN", "00000000c0000000"),
    ("Infinity", "00000000d0000020"),
    ("-Infinity", "00000000f0000020"),
    ("9999", "0001000000000000270f"),
    ("10000", "00010001000000000001"),
    ("0.1", "0001ffff0000000103e8"),
    ("123.456", "0002000000000003007b11d0"),
    ("-1.0000000000000000000000000000000000000001", "000b00004000002800010000000000000000000000000000000000000001"),
    ("99999999999999999999999999999999999999999999", "000b000a00000000270f270f270f270f270f270f270f270f270f270f270f"),
    ("0.00000000000000000000000000000000000000000001", "0001fff50000002c0001"),
    ("10000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "00010019000000000001"),
    ("-123456.7890", "0003000140000004000c0d801ed2"),
];

#[test]
fn unconstrained_text_is_exact() {
    for (text, hex) in TEXTS {
        let bin = unhex(hex);
        let mut scratch = String::new();
        for raw in both(text, &bin) {
            assert_eq!(raw.numeric_str(&mut scratch).unwrap(), text, "{raw:?}");
        }
    }
}

#[test]
fn special_values_are_distinct_errors_for_decimals() {
    let cases = [
        ("NaN", "00000000c0000000", ValueErrorKind::NumericNaN),
        (
            "Infinity",
            "00000000d0000020",
            ValueErrorKind::Infinite { negative: false },
        ),
        (
            "-Infinity",
            "00000000f0000020",
            ValueErrorKind::Infinite { negative: true },
        ),
    ];
    for (text, hex, kind) in cases {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            let err = raw.numeric_decimal(spec(10, 2)).unwrap_err();
            assert_eq!(err.kind, kind, "{raw:?}");
            assert_eq!(err.type_name, "numeric");
        }
    }
}

#[test]
fn overflow_and_inexact_scale_are_errors_not_rounding() {
    let text_cases = [
        // 39 digits into 38.
        (
            "123456789012345678901234567890123456789",
            spec(38, 0),
            ValueErrorKind::NumericOverflow,
        ),
        // More digits than the column precision.
        ("12345678901", spec(10, 0), ValueErrorKind::NumericOverflow),
        ("1000.00", spec(5, 2), ValueErrorKind::NumericOverflow),
        // Non-zero digits beyond the scale.
        ("1.234", spec(10, 2), ValueErrorKind::InexactScale),
        ("12345", spec(5, -2), ValueErrorKind::InexactScale),
        (
            "0.00000000000000000000000000000000000000000001",
            spec(38, 38),
            ValueErrorKind::InexactScale,
        ),
    ];
    for (value, s, kind) in text_cases {
        let err = Raw::Text(value).numeric_decimal(s).unwrap_err();
        assert_eq!(err.kind, kind, "{value} at {s:?}");
    }
    // Binary forms, from `SELECT numeric_send(v::numeric)`:
    // 99999999999999999999999999999999999999999999 (44 digits)
    let bin = unhex("000b000a00000000270f270f270f270f270f270f270f270f270f270f270f");
    assert_eq!(
        Raw::Binary(&bin)
            .numeric_decimal(spec(38, 0))
            .unwrap_err()
            .kind,
        ValueErrorKind::NumericOverflow
    );
    // 10^100 at scale 0
    let bin = unhex("00010019000000000001");
    assert_eq!(
        Raw::Binary(&bin)
            .numeric_decimal(spec(38, 0))
            .unwrap_err()
            .kind,
        ValueErrorKind::NumericOverflow
    );
    // 123.456 at scale 2
    let bin = unhex("0002000000000003007b11d0");
    assert_eq!(
        Raw::Binary(&bin)
            .numeric_decimal(spec(10, 2))
            .unwrap_err()
            .kind,
        ValueErrorKind::InexactScale
    );
    // 0.00000000000000000000000000000000000000000001 at scale 38
    let bin = unhex("0001fff50000002c0001");
    assert_eq!(
        Raw::Binary(&bin)
            .numeric_decimal(spec(38, 38))
            .unwrap_err()
            .kind,
        ValueErrorKind::InexactScale
    );
    // Trailing zeros beyond the scale are exact: 1.500 at scale 1 is 15.
    let bin = unhex("000200000000000300011388");
    for raw in both("1.500", &bin) {
        assert_eq!(raw.numeric_decimal(spec(5, 1)).unwrap(), 15);
    }
}

#[test]
fn text_must_be_numeric_out_form() {
    let mut scratch = String::new();
    for bad in [
        "", "-", ".5", "1.", "1e5", "+1", " 1", "1 ", "nan", "inf", "1,5", "--1",
    ] {
        let err = Raw::Text(bad).numeric_str(&mut scratch).unwrap_err();
        assert_eq!(err.kind, ValueErrorKind::Malformed, "{bad:?}");
        let err = Raw::Text(bad).numeric_decimal(spec(10, 2)).unwrap_err();
        assert_eq!(err.kind, ValueErrorKind::Malformed, "{bad:?}");
    }
}

#[test]
fn binary_is_checked() {
    let mut scratch = String::new();
    let bad = [
        "",                         // no header
        "00010000000000",           // short header
        "0001000000000000",         // ndigits 1, no digit
        "000100000000000027100000", // digit 10000, trailing bytes
        "00010000000000002710",     // digit 10000 (base is 10000)
        "ffff000000000000",         // negative ndigits
        "0000000012340000",         // unknown sign word
        "000000000000ffff",         // dscale beyond 0x3FFF
        "0001000000000000270f00",   // trailing byte
    ];
    for hex in bad {
        let bin = unhex(hex);
        let err = Raw::Binary(&bin).numeric_str(&mut scratch).unwrap_err();
        assert_eq!(err.kind, ValueErrorKind::Malformed, "{hex}");
        assert!(Raw::Binary(&bin).numeric_decimal(spec(38, 0)).is_err());
    }
}

#[test]
fn binary_normalises_like_numeric_recv() {
    let mut scratch = String::new();
    // Negative zero (sign 0x4000, no digits) prints as 0: PostgreSQL has no -0.
    let bin = unhex("0000000040000002");
    assert_eq!(Raw::Binary(&bin).numeric_str(&mut scratch).unwrap(), "0.00");
    assert_eq!(Raw::Binary(&bin).numeric_decimal(spec(10, 2)).unwrap(), 0);
    // Digits below the display scale are dropped (numeric_recv truncates them):
    // 1.5 with dscale 0 prints as 1, and -0.5 with dscale 0 as 0.
    let bin = unhex("000200000000000000011388");
    assert_eq!(Raw::Binary(&bin).numeric_str(&mut scratch).unwrap(), "1");
    assert_eq!(Raw::Binary(&bin).numeric_decimal(spec(10, 0)).unwrap(), 1);
    let bin = unhex("0001ffff400000001388");
    assert_eq!(Raw::Binary(&bin).numeric_str(&mut scratch).unwrap(), "0");
    // A leading zero digit and a weight above the digits: 0, 12 with weight 2 is
    // 0 * 10000^2 + 12 * 10000^1 = 120000.
    let bin = unhex("00020002000000000000000c");
    assert_eq!(
        Raw::Binary(&bin).numeric_str(&mut scratch).unwrap(),
        "120000"
    );
    assert_eq!(
        Raw::Binary(&bin).numeric_decimal(spec(10, 0)).unwrap(),
        120_000
    );
}

#[test]
fn typmod_decoding() {
    // atttypmod of numeric(p,s) is ((p << 16) | (s & 0x7ff)) + 4.
    let typmod = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
    assert_eq!(NumericMod::from_typmod(-1), NumericMod::Unconstrained);
    assert_eq!(NumericMod::from_typmod(3), NumericMod::Unconstrained);
    let cases = [
        (10, 2),
        (38, 0),
        (38, 38),
        (5, -2),
        (1000, 1000),
        (3, 5),
        (39, 2),
        (10, -1000),
    ];
    for (p, s) in cases {
        assert_eq!(
            NumericMod::from_typmod(typmod(p, s)),
            NumericMod::Constrained {
                precision: p as u16,
                scale: s as i16
            },
            "({p},{s})"
        );
    }
    // Arrow decimal128 holds p <= 38 with a scale Arrow accepts.
    let dec = |p, s| NumericMod::from_typmod(typmod(p, s)).decimal128();
    assert_eq!(dec(10, 2), Some(spec(10, 2)));
    assert_eq!(dec(38, 38), Some(spec(38, 38)));
    assert_eq!(dec(5, -2), Some(spec(5, -2)));
    assert_eq!(dec(39, 2), None);
    assert_eq!(dec(3, 5), None);
    assert_eq!(dec(10, -200), None);
    assert_eq!(NumericMod::Unconstrained.decimal128(), None);
    // pg_attribute.atttypmod from PostgreSQL 15 for numeric(10,2), numeric(5,-2),
    // numeric(3,5), numeric(38,38), numeric(1000,1000), numeric(10,-1000).
    let server = [
        (655_366, 10, 2),
        (329_730, 5, -2),
        (196_617, 3, 5),
        (2_490_410, 38, 38),
        (65_537_004, 1000, 1000),
        (656_412, 10, -1000),
    ];
    for (typmod, precision, scale) in server {
        assert_eq!(
            NumericMod::from_typmod(typmod),
            NumericMod::Constrained { precision, scale }
        );
    }
}
