//! interval: one stored value printed in each IntervalStyle and sent in binary gives the
//! same (months, days, microseconds); binary prints like `interval_out` under
//! IntervalStyle=postgres, and PostgreSQL 17's infinite intervals are an `Infinite` error
//! from both formats that the text fallback prints as `infinity` / `-infinity`.

use super::unhex;
use crate::values::interval::Interval;
use crate::values::types::{PgType, Scalar};
use crate::values::{Raw, ValueErrorKind};

/// (months, days, µs)
type Fields = (i32, i32, i64);
/// (texts per IntervalStyle, binary, fields)
type Row = ([&'static str; 4], &'static str, Fields);

/// The same stored interval printed in each IntervalStyle — postgres, postgres_verbose,
/// iso_8601, sql_standard — and its binary form, with the fields (months, days, µs)
/// decoded independently from the binary:
/// `INSERT INTO iv VALUES (v::interval)` (under IntervalStyle=postgres), then per style
/// `SET IntervalStyle = ...; SELECT format('%s', v), interval_send(v) FROM iv`.
#[rustfmt::skip]
const INTERVALS: [Row; 30] = [
    (["1 year 2 mons 3 days 04:05:06.789", "@ 1 year 2 mons 3 days 4 hours 5 mins 6.789 secs", "P1Y2M3DT4H5M6.789S", "+1-2 +3 +4:05:06.789"], "000000036c97ca88000000030000000e", (14, 3, 14706789000)),
    (["-1 years -2 mons +3 days -04:05:06", "@ 1 year 2 mons -3 days 4 hours 5 mins 6 secs ago", "P-1Y-2M3DT-4H-5M-6S", "-1-2 +3 -4:05:06"], "fffffffc93743f8000000003fffffff2", (-14, 3, -14706000000)),
    (["00:00:00", "@ 0", "PT0S", "0"], "00000000000000000000000000000000", (0, 0, 0)),
    (["-00:00:01", "@ 1 sec ago", "PT-1S", "-0:00:01"], "fffffffffff0bdc00000000000000000", (0, 0, -1000000)),
    (["178000000 years", "@ 178000000 years", "P178000000Y", "178000000-0"], "0000000000000000000000007f50c600", (2136000000, 0, 0)),
    (["1 day -00:00:01", "@ 1 day -1 sec", "P1DT-1S", "+0-0 +1 -0:00:01"], "fffffffffff0bdc00000000100000000", (0, 1, -1000000)),
    (["-1 days +00:00:01", "@ 1 day -1 sec ago", "P-1DT1S", "+0-0 -1 +0:00:01"], "00000000000f4240ffffffff00000000", (0, -1, 1000000)),
    (["2562047788:00:54.775807", "@ 2562047788 hours 54.775807 secs", "PT2562047788H54.775807S", "2562047788:00:54.775807"], "7fffffffffffffff0000000000000000", (0, 0, 9223372036854775807)),
    (["-2562047788:00:54.775808", "@ 2562047788 hours 54.775808 secs ago", "PT-2562047788H-54.775808S", "-2562047788:00:54.775808"], "80000000000000000000000000000000", (0, 0, -9223372036854775808)),
    (["1 mon", "@ 1 mon", "P1M", "0-1"], "00000000000000000000000000000001", (1, 0, 0)),
    (["-1 mons", "@ 1 mon ago", "P-1M", "-0-1"], "000000000000000000000000ffffffff", (-1, 0, 0)),
    (["1 year", "@ 1 year", "P1Y", "1-0"], "0000000000000000000000000000000c", (12, 0, 0)),
    (["-3 days", "@ 3 days ago", "P-3D", "-3 0:00:00"], "0000000000000000fffffffd00000000", (0, -3, 0)),
    (["11 mons", "@ 11 mons", "P11M", "0-11"], "0000000000000000000000000000000b", (11, 0, 0)),
    (["-11 mons", "@ 11 mons ago", "P-11M", "-0-11"], "000000000000000000000000fffffff5", (-11, 0, 0)),
    (["00:00:01.5", "@ 1.5 secs", "PT1.5S", "0:00:01.5"], "000000000016e3600000000000000000", (0, 0, 1500000)),
    (["-00:00:00.000001", "@ 0.000001 secs ago", "PT-0.000001S", "-0:00:00.000001"], "ffffffffffffffff0000000000000000", (0, 0, -1)),
    (["3 days 04:05:06", "@ 3 days 4 hours 5 mins 6 secs", "P3DT4H5M6S", "3 4:05:06"], "000000036c8bc0800000000300000000", (0, 3, 14706000000)),
    (["-3 days -04:05:06", "@ 3 days 4 hours 5 mins 6 secs ago", "P-3DT-4H-5M-6S", "-3 4:05:06"], "fffffffc93743f80fffffffd00000000", (0, -3, -14706000000)),
    (["1 year 2 mons", "@ 1 year 2 mons", "P1Y2M", "1-2"], "0000000000000000000000000000000e", (14, 0, 0)),
    (["-1 years -2 mons", "@ 1 year 2 mons ago", "P-1Y-2M", "-1-2"], "000000000000000000000000fffffff2", (-14, 0, 0)),
    (["1 year 1 mon", "@ 1 year 1 mon", "P1Y1M", "1-1"], "0000000000000000000000000000000d", (13, 0, 0)),
    (["1 day 25:00:00", "@ 1 day 25 hours", "P1DT25H", "1 25:00:00"], "00000014f46b04000000000100000000", (0, 1, 90000000000)),
    (["178956970 years 7 mons 2147483647 days 2562047788:00:54.775807", "@ 178956970 years 7 mons 2147483647 days 2562047788 hours 54.775807 secs", "P178956970Y7M2147483647DT2562047788H54.775807S", "+178956970-7 +2147483647 +2562047788:00:54.775807"], "7fffffffffffffff7fffffff7fffffff", (2147483647, 2147483647, 9223372036854775807)),
    (["-178956970 years -8 mons -2147483648 days -2562047788:00:54.775808", "@ 178956970 years 8 mons 2147483648 days 2562047788 hours 54.775808 secs ago", "P-178956970Y-8M-2147483648DT-2562047788H-54.775808S", "-178956970-8 -2147483648 -2562047788:00:54.775808"], "80000000000000008000000080000000", (-2147483648, -2147483648, -9223372036854775808)),
    (["00:00:01", "@ 1 sec", "PT1S", "0:00:01"], "00000000000f42400000000000000000", (0, 0, 1000000)),
    (["00:02:00", "@ 2 mins", "PT2M", "0:02:00"], "0000000007270e000000000000000000", (0, 0, 120000000)),
    (["01:00:01", "@ 1 hour 1 sec", "PT1H1S", "1:00:01"], "00000000d6a2e6400000000000000000", (0, 0, 3601000000)),
    (["-1 days -01:00:00", "@ 1 day 1 hour ago", "P-1DT-1H", "-1 1:00:00"], "ffffffff296c5c00ffffffff00000000", (0, -1, -3600000000)),
    (["1 year -2 days +03:00:00", "@ 1 year -2 days 3 hours", "P1Y-2DT3H", "+1-0 -2 +3:00:00"], "0000000283baec00fffffffe0000000c", (12, -2, 10800000000)),
];

fn expected(fields: Fields) -> Result<Interval, ValueErrorKind> {
    match fields {
        (i32::MAX, i32::MAX, i64::MAX) => Err(ValueErrorKind::Infinite { negative: false }),
        (i32::MIN, i32::MIN, i64::MIN) => Err(ValueErrorKind::Infinite { negative: true }),
        (months, days, microseconds) => Ok(Interval {
            months,
            days,
            microseconds,
        }),
    }
}

#[test]
fn every_interval_style_agrees_with_binary() {
    for (texts, hex, fields) in INTERVALS {
        let want = expected(fields);
        let bin = unhex(hex);
        assert_eq!(
            Raw::Binary(&bin).interval().map_err(|e| e.kind),
            want,
            "binary {hex}"
        );
        for text in texts {
            assert_eq!(
                Raw::Text(text).interval().map_err(|e| e.kind),
                want,
                "{text:?}"
            );
        }
    }
}

#[test]
fn binary_prints_like_interval_out() {
    let mut scratch = String::new();
    let ty = PgType::Scalar(Scalar::Interval);
    for ([postgres, ..], hex, fields) in INTERVALS {
        if expected(fields).is_err() {
            continue;
        }
        let bin = unhex(hex);
        assert_eq!(
            Raw::Binary(&bin).to_text(ty, &mut scratch).unwrap(),
            postgres
        );
    }
}

#[test]
fn infinity_postgres_17() {
    // PostgreSQL 17: SELECT interval_send('infinity'::interval) and '-infinity'.
    let cases = [
        ("infinity", "7fffffffffffffff7fffffff7fffffff", false),
        ("-infinity", "80000000000000008000000080000000", true),
    ];
    let mut scratch = String::new();
    let ty = PgType::Scalar(Scalar::Interval);
    for (text, hex, negative) in cases {
        let bin = unhex(hex);
        for raw in [Raw::Text(text), Raw::Binary(&bin)] {
            assert_eq!(
                raw.interval().unwrap_err().kind,
                ValueErrorKind::Infinite { negative }
            );
            assert_eq!(raw.to_text(ty, &mut scratch).unwrap(), text);
        }
    }
}

#[test]
fn interval_rejects_bad_input() {
    let bad = [
        "",
        "1 fortnight",
        "1 year 2",
        "year",
        "00:00",
        "00:60:00",
        "00:00:60",
        "00:00:00.1234567",
        "1 day 00:00:00 1 day",
        "@ 1 day ago 1 day",
        "ago",
        "1 day ago",
        "P",
        "PT",
        "P1S",
        "PT1Y",
        "P1M1Y",
        "P1Y1Y",
        "P1.5Y",
        "1-2-3",
        "1 2 3 4",
        "1 2",
        "x",
        "1-2 3",
    ];
    for text in bad {
        assert_eq!(
            Raw::Text(text).interval().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    let too_big = [
        "178956971 years",
        "2147483648 days",
        "-2147483649 days",
        "2562047789:00:00",
        "@ 2147483648 days",
        "P178956971Y",
    ];
    for text in too_big {
        assert_eq!(
            Raw::Text(text).interval().unwrap_err().kind,
            ValueErrorKind::OutOfRange,
            "{text:?}"
        );
    }
    assert!(Raw::Binary(&[0; 15]).interval().is_err());
}

#[test]
fn mixed_signs_follow_each_style() {
    let want = Interval {
        months: -14,
        days: 3,
        microseconds: -14_706_000_000,
    };
    // postgres: each unit its own sign.
    assert_eq!(
        Raw::Text("-1 years -2 mons +3 days -04:05:06")
            .interval()
            .unwrap(),
        want
    );
    // sql_standard: a leading sign covers unsigned later fields...
    assert_eq!(
        Raw::Text("-1 2:00:00").interval().unwrap(),
        Interval {
            months: 0,
            days: -1,
            microseconds: -7_200_000_000
        }
    );
    // ...and explicit signs win.
    assert_eq!(Raw::Text("-1-2 +3 -4:05:06").interval().unwrap(), want);
    // verbose: `ago` negates every field, including those printed negative.
    assert_eq!(
        Raw::Text("@ 1 year 2 mons -3 days 4 hours 5 mins 6 secs ago")
            .interval()
            .unwrap(),
        want
    );
}
