//! Ranges and multiranges: binary values print exactly as `range_out` and
//! `multirange_out` print them (bounds through the subtype's output function, quoted as
//! the server quotes them), and text that the server could not have printed is refused.

use super::{both, unhex};
use crate::values::types::{PgType, RangeType, Scalar};
use crate::values::{Raw, ValueErrorKind};

/// `SELECT format('%s', v::R), range_send(v::R)` (TimeZone=UTC): binary bounds printed
/// with the subtype's output function and quoted as range_out quotes them. Discrete
/// ranges come back canonical (`(,5]` is `(,6)`).
#[rustfmt::skip]
const RANGES: &[(RangeType, &str, &str)] = &[
    (RangeType::Int4, "[1,10)", "020000000400000001000000040000000a"),
    (RangeType::Int4, "empty", "01"),
    (RangeType::Int4, "(,6)", "080000000400000006"),
    (RangeType::Int4, "[3,)", "120000000400000003"),
    (RangeType::Int4, "(,)", "18"),
    (RangeType::Int4, "[-2147483648,0)", "0200000004800000000000000400000000"),
    (RangeType::Int4, "[5,6)", "0200000004000000050000000400000006"),
    (RangeType::Int8, "[1,9223372036854775807)", "02000000080000000000000001000000087fffffffffffffff"),
    (RangeType::Int8, "(,-1)", "0800000008ffffffffffffffff"),
    (RangeType::Numeric, "[1.5,)", "120000000c000200000000000100011388"),
    (RangeType::Numeric, "(0.001,1000.000]", "040000000a0001ffff00000003000a0000000a000100000000000303e8"),
    (RangeType::Numeric, "[-Infinity,Infinity]", "060000000800000000f00000200000000800000000d0000020"),
    (RangeType::Numeric, "empty", "01"),
    (RangeType::Numeric, "[0,0]", "06000000080000000000000000000000080000000000000000"),
    (RangeType::Timestamp, r#"["2020-01-01 00:00:00","2021-01-01 00:00:00.5")"#, "020000000800023e0786c260000000000800025aca30b54120"),
    (RangeType::Timestamp, r#"(,"0044-03-15 12:00:00 BC"]"#, "0c00000008ff1af9e8fb46d000"),
    (RangeType::Timestamp, "[-infinity,infinity)", "02000000088000000000000000000000087fffffffffffffff"),
    (RangeType::TimestampTz, r#"["2020-01-01 00:00:00+00","2021-01-01 00:00:00+00")"#, "020000000800023e0786c260000000000800025aca30ada000"),
    (RangeType::TimestampTz, r#"("2020-06-01 07:00:00+00",)"#, "1000000008000249ff1cacdc00"),
    (RangeType::Date, "[2020-01-01,infinity)", "020000000400001c89000000047fffffff"),
    (RangeType::Date, "[2020-01-01,2020-02-02)", "020000000400001c890000000400001ca9"),
    (RangeType::Date, r#"(,"0044-03-15 BC")"#, "0800000004fff49d7b"),
    (RangeType::Date, "empty", "01"),
    (RangeType::Date, "[-infinity,2020-01-01)", "0200000004800000000000000400001c89"),
];

/// `SELECT format('%s', v::M), multirange_send(v::M)`
#[rustfmt::skip]
const MULTIRANGES: &[(RangeType, &str, &str)] = &[
    (RangeType::Int4, "{[1,3),[5,7)}", "00000002000000110200000004000000010000000400000003000000110200000004000000050000000400000007"),
    (RangeType::Int4, "{}", "00000000"),
    (RangeType::Int4, "{(,1),[5,)}", "000000020000000908000000040000000100000009120000000400000005"),
    (RangeType::Date, "{[2020-01-01,2020-02-01),[2021-01-01,infinity)}", "0000000200000011020000000400001c890000000400001ca800000011020000000400001df7000000047fffffff"),
    (RangeType::Timestamp, r#"{["2020-01-01 00:00:00","2020-01-02 00:00:00")}"#, "0000000100000019020000000800023e0786c260000000000800023e1ba499c000"),
    (RangeType::Numeric, "{[1.50,2.5],(3,)}", "0000000200000021060000000c0002000000000002000113880000000c0002000000000001000213880000000f100000000a00010000000000000003"),
    (RangeType::Int8, "{[1,2)}", "000000010000001902000000080000000000000001000000080000000000000002"),
    (RangeType::TimestampTz, r#"{["2020-01-01 00:00:00+00",)}"#, "000000010000000d120000000800023e0786c26000"),
];

#[test]
fn ranges_print_like_range_out() {
    let mut scratch = String::new();
    let mut fallback = String::new();
    for &(ty, text, hex) in RANGES {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.range(ty, &mut scratch).unwrap(), text, "{raw:?}");
            let pg = PgType::Scalar(Scalar::Range(ty));
            assert_eq!(raw.to_text(pg, &mut fallback).unwrap(), text);
        }
    }
}

#[test]
fn multiranges_print_like_multirange_out() {
    let mut scratch = String::new();
    for &(ty, text, hex) in MULTIRANGES {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.multirange(ty, &mut scratch).unwrap(), text, "{raw:?}");
        }
    }
}

#[test]
fn range_text_is_checked() {
    let mut scratch = String::new();
    let good = ["EMPTY", r#"["a\"b",)"#, r#"("x""y",]"#, r"[a\,b,c)"];
    for text in good {
        assert_eq!(
            Raw::Text(text)
                .range(RangeType::Int4, &mut scratch)
                .unwrap(),
            text
        );
    }
    let bad = [
        "",
        "[1,2",
        "1,2)",
        "[1;2)",
        "[1,2)x",
        "[1,2,3)",
        r#"["1,2)"#,
        "emptyx",
        "{[1,2)}",
    ];
    for text in bad {
        assert_eq!(
            Raw::Text(text)
                .range(RangeType::Int4, &mut scratch)
                .unwrap_err()
                .kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    for text in ["{", "{[1,2)", "{[1,2),}", "{[1,2)[3,4)}", "[1,2)"] {
        assert!(
            Raw::Text(text)
                .multirange(RangeType::Int4, &mut scratch)
                .is_err(),
            "{text:?}"
        );
    }
}

#[test]
fn range_binary_is_checked() {
    let mut scratch = String::new();
    let bad = [
        "",                                   // no flags
        "0100",                               // empty with trailing byte
        "02000000040000000100000004",         // upper bound missing its bytes
        "020000000300000001000000040000000a", // int4 bound of 3 bytes
        "12ffffffff",                         // NULL bound
        "18ff",                               // trailing byte
    ];
    for hex in bad {
        assert!(
            Raw::Binary(&unhex(hex))
                .range(RangeType::Int4, &mut scratch)
                .is_err(),
            "{hex}"
        );
    }
    for hex in ["", "ffffffff", "00000001", "0000000100000001"] {
        assert!(
            Raw::Binary(&unhex(hex))
                .multirange(RangeType::Int4, &mut scratch)
                .is_err(),
            "{hex}"
        );
    }
}
