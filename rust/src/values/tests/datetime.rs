//! date, time, timetz, timestamp and timestamptz: the text PostgreSQL prints with
//! DateStyle=ISO and the binary send format give the same value (days or microseconds
//! since 1970-01-01), infinities and `24:00:00` are distinct errors, and forms the server
//! never prints are refused.

use super::{both, unhex};
use crate::values::datetime::MICROS_PER_DAY;
use crate::values::types::{PgType, Scalar};
use crate::values::{Raw, ValueErrorKind};

/// `SELECT format('%s', v::date), date_send(v::date), v::date - '1970-01-01'`
const DATES: [(&str, &str, Option<i32>); 16] = [
    ("2020-01-31", "00001ca7", Some(18292)),
    ("1970-01-01", "ffffd533", Some(0)),
    ("1969-12-31", "ffffd532", Some(-1)),
    ("2000-01-01", "00000000", Some(10957)),
    ("0044-03-15 BC", "fff49d7b", Some(-735160)),
    ("0001-01-01 BC", "fff4da8b", Some(-719528)),
    ("0001-01-01", "fff4dbf9", Some(-719162)),
    ("4713-11-24 BC", "ffda9915", Some(-2440222)),
    ("12345-01-01", "0039a782", Some(3789391)),
    ("5874897-12-31", "7fda970c", Some(2145042905)),
    ("2000-02-29", "0000003b", Some(11016)),
    ("1900-03-01", "ffff718f", Some(-25508)),
    ("infinity", "7fffffff", None),
    ("-infinity", "80000000", None),
    ("9999-12-31", "002c95d3", Some(2932896)),
    ("10000-01-01", "002c95d4", Some(2932897)),
];

#[test]
fn dates_text_and_binary_agree() {
    let mut scratch = String::new();
    for (text, hex, expected) in DATES {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            match expected {
                Some(days) => assert_eq!(raw.date().unwrap(), days, "{raw:?}"),
                None => assert_eq!(
                    raw.date().unwrap_err().kind,
                    ValueErrorKind::Infinite {
                        negative: text.starts_with('-')
                    }
                ),
            }
            // The text fallback prints exactly what date_out prints.
            let ty = PgType::Scalar(Scalar::Date);
            assert_eq!(raw.to_text(ty, &mut scratch).unwrap(), text);
        }
    }
}

#[test]
fn dates_reject_what_postgres_never_prints() {
    let bad = [
        "2020-02-30",
        "2019-02-29",
        "2020-13-01",
        "2020-00-10",
        "2020-1-01",
        "2020-01-1",
        "0000-01-01",
        "2020-01-01 AD",
        "2020-01-01 bc",
        "2020-01-01 ",
        "Infinity",
        "",
        "-2020-01-01",
        "2020/01/01",
    ];
    for text in bad {
        assert_eq!(
            Raw::Text(text).date().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    // A year far beyond date32 is out of range, not malformed.
    assert_eq!(
        Raw::Text("999999999-01-01").date().unwrap_err().kind,
        ValueErrorKind::OutOfRange
    );
    assert_eq!(
        Raw::Text("1000000000-01-01").date().unwrap_err().kind,
        ValueErrorKind::OutOfRange
    );
    // Binary days that overflow i32 once moved to the 1970 epoch.
    let bin = (i32::MAX - 1).to_be_bytes();
    assert_eq!(
        Raw::Binary(&bin).date().unwrap_err().kind,
        ValueErrorKind::OutOfRange
    );
    assert!(Raw::Binary(&[0; 3]).date().is_err());
}

/// `SELECT format('%s', v::time), time_send(v::time)`; '23:59:59.9999995' is rounded
/// by PostgreSQL's input to 24:00:00.
const TIMES: [(&str, &str, i64); 8] = [
    ("00:00:00", "0000000000000000", 0),
    ("12:34:56.789", "0000000a8be62608", 45_296_789_000),
    ("23:59:59.999999", "000000141dd75fff", MICROS_PER_DAY - 1),
    ("24:00:00", "000000141dd76000", MICROS_PER_DAY),
    ("24:00:00", "000000141dd76000", MICROS_PER_DAY),
    ("00:00:00.000001", "0000000000000001", 1),
    ("04:05:06.1", "000000036c8d4720", 14_706_100_000),
    ("13:00:00.05", "0000000ae5801750", 46_800_050_000),
];

#[test]
fn times_text_and_binary_agree() {
    let mut scratch = String::new();
    for (text, hex, expected) in TIMES {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            if expected == MICROS_PER_DAY {
                assert_eq!(raw.time().unwrap_err().kind, ValueErrorKind::Time2400);
            } else {
                assert_eq!(raw.time().unwrap(), expected, "{raw:?}");
            }
            let ty = PgType::Scalar(Scalar::Time);
            assert_eq!(raw.to_text(ty, &mut scratch).unwrap(), text);
        }
    }
}

#[test]
fn times_reject_bad_input() {
    for text in [
        "24:00:00.000001",
        "24:00:01",
        "25:00:00",
        "12:60:00",
        "12:00:60",
        "1:00:00",
        "12:00",
        "12:00:00.",
        "12:00:00.1234567",
        "12:00:00+00",
        "",
    ] {
        assert_eq!(
            Raw::Text(text).time().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    for micros in [-1_i64, MICROS_PER_DAY + 1] {
        assert_eq!(
            Raw::Binary(&micros.to_be_bytes()).time().unwrap_err().kind,
            ValueErrorKind::Malformed
        );
    }
}

/// `SELECT format('%s', v::timetz), timetz_send(v::timetz)`: µs then the zone in seconds
/// west of UTC; binary must print as timetz_out does.
const TIMETZ: [(&str, &str); 9] = [
    ("04:05:06.789+05:30", "000000036c97ca88ffffb2a8"),
    ("04:05:06-08", "000000036c8bc08000007080"),
    ("04:05:06+00:19:32", "000000036c8bc080fffffb6c"),
    ("24:00:00-15:59:59", "000000141dd760000000e0ff"),
    ("00:00:00+15:59:59", "0000000000000000ffff1f01"),
    ("12:00:00+00", "0000000a0eebb00000000000"),
    ("23:59:59.999999-03:30", "000000141dd75fff00003138"),
    ("01:02:03.04+14", "00000000dde91500ffff3b20"),
    ("10:00:00-00:00:01", "0000000861c4680000000001"),
];

#[test]
fn timetz_binary_prints_like_timetz_out() {
    let mut scratch = String::new();
    for (text, hex) in TIMETZ {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.timetz(&mut scratch).unwrap(), text, "{raw:?}");
        }
    }
    for bad in [
        "04:05:06",
        "04:05:06+5",
        "04:05:06+16",
        "04:05:06+05:60",
        "25:00:00+00",
    ] {
        assert!(Raw::Text(bad).timetz(&mut scratch).is_err(), "{bad:?}");
    }
    // Zone offsets of 16 hours or more, times past 24:00:00, wrong length.
    for hex in [
        "0000000000000000ffff1f00",
        "00000000000000000000e100",
        "000000141dd7600100000000",
        "000000000000000000000000ff",
        // The smallest i32 (found by the value_formats fuzz target): its absolute value
        // overflowed, a panic in debug builds and, wrapped, an accepted zone in release.
        "000000000000000080000000",
    ] {
        assert!(
            Raw::Binary(&unhex(hex)).timetz(&mut scratch).is_err(),
            "{hex}"
        );
    }
}

/// `SELECT format('%s', v::timestamp), timestamp_send(v::timestamp),
///  (extract(epoch from v::timestamp) * 1000000)::int8`
/// '294276-12-31 23:59:59.999999' is PostgreSQL's last timestamp: beyond i64 µs since
/// 1970. '2020-12-31 23:59:59.9999999' is rounded up by PostgreSQL's input.
const TIMESTAMPS: [(&str, &str, Option<i64>); 14] = [
    (
        "2020-01-31 04:05:06.789",
        "0002406672976a88",
        Some(1580443506789000),
    ),
    ("1970-01-01 00:00:00", "fffca2fec4c82000", Some(0)),
    ("1969-12-31 23:59:59.999999", "fffca2fec4c81fff", Some(-1)),
    (
        "2000-01-01 00:00:00",
        "0000000000000000",
        Some(946684800000000),
    ),
    (
        "0044-03-15 12:00:00 BC",
        "ff1af9e8fb46d000",
        Some(-63517780800000000),
    ),
    (
        "0001-01-01 00:00:00 BC",
        "ff1fc63d1bb12000",
        Some(-62167219200000000),
    ),
    (
        "4713-11-24 00:00:00 BC",
        "fd0f9983eb0ae000",
        Some(-210835180800000000),
    ),
    (
        "12345-06-07 08:09:10.5",
        "0487db002981b6a0",
        Some(327416976550500000),
    ),
    ("294276-12-31 23:59:59.999999", "7fffff5bb3b29fff", None),
    (
        "2021-01-01 00:00:00",
        "00025aca30ada000",
        Some(1609459200000000),
    ),
    ("infinity", "7fffffffffffffff", None),
    ("-infinity", "8000000000000000", None),
    (
        "1900-02-28 12:00:00.000001",
        "fff4ce874dc2f001",
        Some(-2203934399999999),
    ),
    (
        "262143-12-31 23:59:59.999999",
        "71ed79e6cfaddfff",
        Some(8210298412799999999),
    ),
];

fn expected_error(text: &str) -> ValueErrorKind {
    match text {
        "infinity" => ValueErrorKind::Infinite { negative: false },
        "-infinity" => ValueErrorKind::Infinite { negative: true },
        _ => ValueErrorKind::OutOfRange,
    }
}

#[test]
fn timestamps_text_and_binary_agree() {
    let mut scratch = String::new();
    for (text, hex, expected) in TIMESTAMPS {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            match expected {
                Some(micros) => assert_eq!(raw.timestamp().unwrap(), micros, "{raw:?}"),
                None => assert_eq!(raw.timestamp().unwrap_err().kind, expected_error(text)),
            }
            let ty = PgType::Scalar(Scalar::Timestamp);
            assert_eq!(raw.to_text(ty, &mut scratch).unwrap(), text);
        }
    }
}

/// As TIMESTAMPS for timestamptz, printed under several TimeZone settings (binary is
/// always UTC): `SET TimeZone = ...; SELECT format('%s', v::timestamptz),
/// timestamptz_send(v::timestamptz), (extract(epoch from v) * 1000000)::int8`.
/// (text, binary, µs since 1970 UTC, whether the text is in UTC)
const TIMESTAMPTZ: [(&str, &str, Option<i64>, bool); 15] = [
    (
        "2020-01-31 04:05:06.789+00",
        "0002406672976a88",
        Some(1580443506789000),
        true,
    ),
    (
        "0044-03-15 12:00:00+00 BC",
        "ff1af9e8fb46d000",
        Some(-63517780800000000),
        true,
    ),
    (
        "12345-06-07 08:09:10.5+00",
        "0487db002981b6a0",
        Some(327416976550500000),
        true,
    ),
    ("infinity", "7fffffffffffffff", None, true),
    ("-infinity", "8000000000000000", None, true),
    (
        "1969-12-31 23:59:59.999999+00",
        "fffca2fec4c81fff",
        Some(-1),
        true,
    ),
    // Asia/Kolkata
    (
        "2020-01-31 09:35:06.789+05:30",
        "0002406672976a88",
        Some(1580443506789000),
        false,
    ),
    (
        "1941-10-01 06:30:00+06:30",
        "fff9781fe8518000",
        Some(-891561600000000),
        false,
    ),
    // America/St_Johns
    (
        "2020-01-31 00:35:06.789-03:30",
        "0002406672976a88",
        Some(1580443506789000),
        false,
    ),
    (
        "2020-07-01 09:30:00-02:30",
        "00024c5ecccc5000",
        Some(1593604800000000),
        false,
    ),
    // Europe/Amsterdam: local mean time before 1937, an offset with seconds.
    (
        "1900-01-01 00:19:32+00:19:32",
        "fff4c9ee7c0b8000",
        Some(-2208988800000000),
        false,
    ),
    (
        "0044-03-15 12:19:32+00:19:32 BC",
        "ff1af9e8fb46d000",
        Some(-63517780800000000),
        false,
    ),
    // America/Sao_Paulo
    (
        "1900-01-01 08:53:32-03:06:28",
        "fff4c9f88af73000",
        Some(-2208945600000000),
        false,
    ),
    // Constructed: PostgreSQL's largest timestamptz is past i64 µs since 1970.
    (
        "294276-12-31 23:59:59.999999+00",
        "7fffff5bb3b29fff",
        None,
        true,
    ),
    (
        "2020-01-31 04:05:06.789+00",
        "0002406672976a88",
        Some(1580443506789000),
        true,
    ),
];

#[test]
fn timestamptz_text_and_binary_agree() {
    let mut scratch = String::new();
    for (text, hex, expected, utc) in TIMESTAMPTZ {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            match expected {
                Some(micros) => assert_eq!(raw.timestamptz().unwrap(), micros, "{raw:?}"),
                None => assert_eq!(raw.timestamptz().unwrap_err().kind, expected_error(text)),
            }
        }
        if utc {
            let ty = PgType::Scalar(Scalar::TimestampTz);
            assert_eq!(Raw::Binary(&bin).to_text(ty, &mut scratch).unwrap(), text);
        }
    }
}

#[test]
fn timestamps_reject_bad_input() {
    let bad_plain = [
        "2020-01-31",
        "2020-01-31 24:00:00",
        "2020-01-31 04:05",
        "2020-01-31 04:05:06+00",
        "2020-01-31  04:05:06",
        "2020-02-30 00:00:00",
        "2020-01-31 04:05:06.1234567",
        "2020-01-31 04:05:06 BC ",
    ];
    for text in bad_plain {
        assert_eq!(
            Raw::Text(text).timestamp().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    let bad_tz = [
        "2020-01-31 04:05:06",
        "2020-01-31 04:05:06+5",
        "2020-01-31 04:05:06+05:3",
        "2020-01-31 04:05:06+16",
        "2020-01-31 04:05:06 UTC",
        "2020-01-31 04:05:06 BC+00",
    ];
    for text in bad_tz {
        assert_eq!(
            Raw::Text(text).timestamptz().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    // An ISO 'T' separator is read too.
    assert_eq!(
        Raw::Text("2020-01-31T04:05:06.789+00")
            .timestamptz()
            .unwrap(),
        1_580_443_506_789_000
    );
}
