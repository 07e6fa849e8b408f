//! Type resolution: every OID this layer decodes maps to its parser, array OIDs to arrays
//! of it, typmods reach numeric and its arrays, unknown OIDs stay unknown, and value
//! errors name the type, never the value.

use crate::values::types::{NumericMod, PgType, RangeType, Scalar};
use crate::values::{ValueError, ValueErrorKind};

/// `SELECT typname, oid, typarray FROM pg_type WHERE typname = ANY(...) ORDER BY oid`
/// on PostgreSQL 15: every type this layer decodes, with its array type.
#[rustfmt::skip]
const PG_TYPE: [(&str, u32, u32); 43] = [
    ("bool", 16, 1000),
    ("bytea", 17, 1001),
    ("name", 19, 1003),
    ("int8", 20, 1016),
    ("int2", 21, 1005),
    ("int4", 23, 1007),
    ("text", 25, 1009),
    ("oid", 26, 1028),
    ("xid", 28, 1011),
    ("cid", 29, 1012),
    ("json", 114, 199),
    ("xml", 142, 143),
    ("cidr", 650, 651),
    ("float4", 700, 1021),
    ("float8", 701, 1022),
    ("macaddr8", 774, 775),
    ("money", 790, 791),
    ("macaddr", 829, 1040),
    ("inet", 869, 1041),
    ("bpchar", 1042, 1014),
    ("varchar", 1043, 1015),
    ("date", 1082, 1182),
    ("time", 1083, 1183),
    ("timestamp", 1114, 1115),
    ("timestamptz", 1184, 1185),
    ("interval", 1186, 1187),
    ("timetz", 1266, 1270),
    ("numeric", 1700, 1231),
    ("uuid", 2950, 2951),
    ("tsvector", 3614, 3643),
    ("jsonb", 3802, 3807),
    ("int4range", 3904, 3905),
    ("numrange", 3906, 3907),
    ("tsrange", 3908, 3909),
    ("tstzrange", 3910, 3911),
    ("daterange", 3912, 3913),
    ("int8range", 3926, 3927),
    ("int4multirange", 4451, 6150),
    ("nummultirange", 4532, 6151),
    ("tsmultirange", 4533, 6152),
    ("tstzmultirange", 4534, 6153),
    ("datemultirange", 4535, 6155),
    ("int8multirange", 4536, 6157),
];

#[test]
fn oids_match_pg_type() {
    for (name, oid, array_oid) in PG_TYPE {
        let scalar = Scalar::from_oid(oid, -1).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(scalar.name(), name);
        assert_eq!(scalar.oid(), oid, "{name}");
        assert_eq!(scalar.array_oid(), array_oid, "{name}");
        assert_eq!(PgType::from_oid(oid, -1), PgType::Scalar(scalar));
        assert_eq!(
            PgType::from_oid(array_oid, -1),
            PgType::Array(scalar),
            "{name}[]"
        );
        assert_eq!(PgType::from_oid(oid, -1).name(), name);
    }
}

#[test]
fn typmod_reaches_numeric_and_its_arrays() {
    // numeric(10,2): atttypmod 655366
    let numeric = Scalar::Numeric(NumericMod::Constrained {
        precision: 10,
        scale: 2,
    });
    assert_eq!(PgType::from_oid(1700, 655_366), PgType::Scalar(numeric));
    assert_eq!(PgType::from_oid(1231, 655_366), PgType::Array(numeric));
    assert_eq!(
        PgType::from_oid(1700, -1),
        PgType::Scalar(Scalar::Numeric(NumericMod::Unconstrained))
    );
    // Other types ignore their typmod (varchar(20), timestamp(3)).
    assert_eq!(PgType::from_oid(1043, 24), PgType::Scalar(Scalar::Varchar));
    assert_eq!(PgType::from_oid(1114, 3), PgType::Scalar(Scalar::Timestamp));
}

#[test]
fn unknown_oids() {
    // "char" (18), point (600), bit (1560), a user type.
    for oid in [18, 600, 1560, 16_384, 0] {
        assert_eq!(PgType::from_oid(oid, -1), PgType::Unknown(oid));
    }
    assert_eq!(PgType::Unknown(16_384).name(), "unknown");
    assert_eq!(
        PgType::Scalar(Scalar::Range(RangeType::Date)).name(),
        "daterange"
    );
}

#[test]
fn errors_name_the_type_and_never_the_value() {
    let err = crate::values::Raw::Text("2020-13-45 secret")
        .date()
        .unwrap_err();
    assert_eq!(err, ValueError::new("date", ValueErrorKind::Malformed));
    let shown = err.to_string();
    assert_eq!(shown, "date: malformed value");
    assert!(!shown.contains("secret"));
    let cases = [
        (ValueErrorKind::Malformed, "malformed value"),
        (ValueErrorKind::InvalidUtf8, "value is not valid UTF-8"),
        (
            ValueErrorKind::NumericNaN,
            "not-a-number has no decimal representation",
        ),
        (
            ValueErrorKind::Infinite { negative: true },
            "infinite value has no representation",
        ),
        (
            ValueErrorKind::NumericOverflow,
            "value has more digits than the decimal precision",
        ),
        (
            ValueErrorKind::InexactScale,
            "value has more fractional digits than the decimal scale",
        ),
        (
            ValueErrorKind::OutOfRange,
            "value is out of the representable range",
        ),
        (
            ValueErrorKind::Time2400,
            "the end-of-day time does not fit time64",
        ),
        (
            ValueErrorKind::MultiDimensionalArray,
            "multi-dimensional array does not fit a list",
        ),
        (
            ValueErrorKind::Unsupported,
            "format not supported for this type",
        ),
    ];
    for (kind, text) in cases {
        assert_eq!(ValueError::new("t", kind).to_string(), format!("t: {text}"));
    }
}
