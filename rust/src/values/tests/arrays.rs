//! One-dimensional arrays in both formats: the same elements from text and binary,
//! elements handed to the element type's parser, the `array_in` forms beyond what
//! `array_out` prints, multi-dimensional and malformed arrays as errors, and binary
//! arrays of any dimension printed like `array_out` for the text fallback.

use super::unhex;
use crate::values::array::{BinaryArray, TextArray};
use crate::values::types::{NumericMod, PgType, RangeType, Scalar};
use crate::values::{Array, Raw, ValueErrorKind};

/// `SELECT format('%s', v::T[]), array_send(v::T[]), format('%s', x) FROM unnest(v::T[]) x`:
/// (element type, text, binary, each element's own text or NULL).
#[rustfmt::skip]
const ARRAYS: &[(Scalar, &str, &str, &[Option<&str>])] = &[
    (Scalar::Int4, "{1,2,NULL}", "000000010000000100000017000000030000000100000004000000010000000400000002ffffffff", &[Some("1"), Some("2"), None]),
    (Scalar::Int4, "{}", "000000000000000000000017", &[]),
    (Scalar::Int4, "[0:2]={1,2,3}", "0000000100000000000000170000000300000000000000040000000100000004000000020000000400000003", &[Some("1"), Some("2"), Some("3")]),
    (Scalar::Int4, "{-2147483648}", "00000001000000000000001700000001000000010000000480000000", &[Some("-2147483648")]),
    (Scalar::Text, "{\"a,b\",\"quo\\\"te\",\"\",\"NULL\",\"back\\\\slash\",\" sp \",\"{x}\",é,NULL,plain,\"a b\",\"null\",\"tab\there\",\"x}\"}", "0000000100000001000000190000000e0000000100000003612c620000000671756f22746500000000000000044e554c4c0000000a6261636b5c736c6173680000000420737020000000037b787d00000002c3a9ffffffff00000005706c61696e00000003612062000000046e756c6c00000008746162096865726500000002787d", &[Some("a,b"), Some(r#"quo"te"#), Some(""), Some("NULL"), Some(r"back\slash"), Some(" sp "), Some("{x}"), Some("é"), None, Some("plain"), Some("a b"), Some("null"), Some("tab\there"), Some("x}")]),
    (Scalar::Numeric(NumericMod::Constrained { precision: 10, scale: 2 }), "{1.50,-2.00,NULL}", "0000000100000001000006a400000003000000010000000c0002000000000002000113880000000a00010000400000020002ffffffff", &[Some("1.50"), Some("-2.00"), None]),
    (Scalar::Date, r#"{2020-01-01,infinity,"0044-03-15 BC"}"#, "00000001000000000000043a00000003000000010000000400001c89000000047fffffff00000004fff49d7b", &[Some("2020-01-01"), Some("infinity"), Some("0044-03-15 BC")]),
    (Scalar::TimestampTz, r#"{"2020-01-01 00:00:00+00",-infinity}"#, "0000000100000000000004a000000002000000010000000800023e0786c26000000000088000000000000000", &[Some("2020-01-01 00:00:00+00"), Some("-infinity")]),
    (Scalar::Bool, "{t,f,NULL}", "000000010000000100000010000000030000000100000001010000000100ffffffff", &[Some("t"), Some("f"), None]),
    (Scalar::Bytea, r#"{"\\x00ff",NULL,"\\x"}"#, "00000001000000010000001100000003000000010000000200ffffffffff00000000", &[Some(r"\x00ff"), None, Some(r"\x")]),
    (Scalar::Uuid, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "000000010000000000000b86000000010000000100000010a0eebc999c0b4ef8bb6d6bb9bd380a11", &[Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")]),
    (Scalar::Inet, "{10.0.0.1,::1/64}", "000000010000000000000365000000020000000100000008022000040a000001000000140340001000000000000000000000000000000001", &[Some("10.0.0.1"), Some("::1/64")]),
    (Scalar::Range(RangeType::Int4), r#"{"[1,3)",empty,"(,)"}"#, "000000010000000000000f40000000030000000100000011020000000400000001000000040000000300000001010000000118", &[Some("[1,3)"), Some("empty"), Some("(,)")]),
    (Scalar::Interval, r#"{"1 day",NULL,-00:00:01}"#, "0000000100000001000004a200000003000000010000001000000000000000000000000100000000ffffffff00000010fffffffffff0bdc00000000000000000", &[Some("1 day"), None, Some("-00:00:01")]),
    (Scalar::Jsonb, r#"{"{\"a\": 1}",[]}"#, "000000010000000000000eda000000020000000100000009017b2261223a20317d00000003015b5d", &[Some(r#"{"a": 1}"#), Some("[]")]),
    (Scalar::Float8, "{NaN,Infinity,-0,1.5}", "0000000100000000000002bd0000000400000001000000087ff8000000000000000000087ff0000000000000000000088000000000000000000000083ff8000000000000", &[Some("NaN"), Some("Infinity"), Some("-0"), Some("1.5")]),
    (Scalar::Varchar, r#"{☃,"\\","\""}"#, "000000010000000000000413000000030000000100000003e29883000000015c0000000122", &[Some("☃"), Some(r"\"), Some(r#"""#)]),
    (Scalar::Range(RangeType::Timestamp), r#"{"[\"2020-01-01 00:00:00\",)"}"#, "000000010000000000000f4400000001000000010000000d120000000800023e0786c26000", &[Some(r#"["2020-01-01 00:00:00",)"#)]),
];

#[test]
fn text_and_binary_arrays_give_the_same_elements() {
    let mut scratch = String::new();
    let mut formatted = String::new();
    for &(scalar, text, hex, expected) in ARRAYS {
        let bin = unhex(hex);
        let text_array = TextArray::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let bin_array = BinaryArray::parse(&bin).unwrap();
        assert_eq!(text_array.len(), expected.len(), "{text}");
        assert_eq!(bin_array.len(), expected.len(), "{text}");
        assert_eq!(text_array.lower_bound(), bin_array.lower_bound(), "{text}");
        assert_eq!(bin_array.has_nulls(), expected.contains(&None), "{text}");
        assert_eq!(bin_array.element_oid(), scalar.oid(), "{text}");
        for ((t, b), want) in text_array.iter().zip(bin_array.iter()).zip(expected) {
            match (t, b, want) {
                (None, None, None) => {}
                (Some(t), Some(b), Some(want)) => {
                    assert_eq!(t.get(&mut scratch), *want, "{text}");
                    if scalar == Scalar::Float8 {
                        let from_text = Raw::Text(want).float8().unwrap();
                        let from_binary = Raw::Binary(b).float8().unwrap();
                        assert_eq!(from_text.to_bits(), from_binary.to_bits());
                    } else {
                        let ty = PgType::Scalar(scalar);
                        let got = Raw::Binary(b).to_text(ty, &mut formatted).unwrap();
                        assert_eq!(got, *want, "{text}");
                    }
                }
                other => panic!("{text}: NULLs differ: {other:?}"),
            }
        }
    }
}

#[test]
fn elements_feed_the_element_parsers() {
    // SELECT format('%s', v::date[]), array_send(v::date[]) for
    // '{2020-01-01,infinity,"0044-03-15 BC"}'
    let text = r#"{2020-01-01,infinity,"0044-03-15 BC"}"#;
    let bin = unhex(
        "00000001000000000000043a00000003000000010000000400001c89000000047fffffff00000004fff49d7b",
    );
    let want = [
        Ok(18262),
        Err(ValueErrorKind::Infinite { negative: false }),
        Ok(-735_160),
    ];
    for raw in [Raw::Text(text), Raw::Binary(&bin)] {
        let array: Array<'_> = raw.array().unwrap();
        assert_eq!(array.len(), 3);
        assert_eq!(array.lower_bound(), 1);
        let mut scratch = String::new();
        let got: Vec<_> = array
            .iter()
            .map(|e| e.unwrap().raw(&mut scratch).date().map_err(|e| e.kind))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn unescaped_elements_borrow_the_input() {
    let array = TextArray::parse(r#"{plain,"quoted",with\\escape}"#).unwrap();
    let flags: Vec<bool> = array.iter().map(|e| e.unwrap().is_escaped()).collect();
    assert_eq!(flags, [false, true, true]);
    let text = "{abc}";
    let array = TextArray::parse(text).unwrap();
    let element = array.iter().next().unwrap().unwrap();
    let mut scratch = String::new();
    let got = element.get(&mut scratch);
    // Borrowed from the input, not copied into the scratch buffer.
    assert_eq!(got.as_ptr(), text[1..].as_ptr());
}

#[test]
fn array_in_forms_beyond_array_out() {
    let mut scratch = String::new();
    let cases: &[(&str, &[Option<&str>])] = &[
        // White space around elements and braces is dropped, inside kept.
        (
            "  { a b ,  c\t ,\"d\"  }  ",
            &[Some("a b"), Some("c"), Some("d")],
        ),
        // Backslash escapes outside quotes; an escaped trailing space is kept.
        (
            r"{a\,b,c\ ,\N\ULL}",
            &[Some("a,b"), Some("c "), Some("NULL")],
        ),
        // Unquoted NULL in any case is NULL; quoted it is a string.
        (r#"{null,NuLl,"null"}"#, &[None, None, Some("null")]),
        // Dimension decorations.
        ("[1:1]={x}", &[Some("x")]),
        ("[2]={x,y}", &[Some("x"), Some("y")]),
        ("[-5:-4] = {x,y}", &[Some("x"), Some("y")]),
        ("{ }", &[]),
        ("{\"\"}", &[Some("")]),
    ];
    for (text, want) in cases {
        let array = TextArray::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let got: Vec<Option<String>> = array
            .iter()
            .map(|e| e.map(|e| e.get(&mut scratch).to_owned()))
            .collect();
        let want: Vec<Option<String>> = want.iter().map(|w| w.map(str::to_owned)).collect();
        assert_eq!(got, want, "{text:?}");
    }
    assert_eq!(TextArray::parse("[-5:-4]={x,y}").unwrap().lower_bound(), -5);
}

#[test]
fn multi_dimensional_arrays_are_a_distinct_error() {
    // SELECT format('%s', v::int4[]), array_send(v::int4[]) for '{{1,2},{3,4}}',
    // '[0:1][1:2]={{1,2},{3,4}}', and for '{{a}}'::text[]
    let cases = [
        ("{{1,2},{3,4}}", "000000020000000000000017000000020000000100000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        ("[0:1][1:2]={{1,2},{3,4}}", "000000020000000000000017000000020000000000000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        ("{{a}}", "000000020000000000000019000000010000000100000001000000010000000161"),
    ];
    for (text, hex) in cases {
        let bin = unhex(hex);
        for raw in [Raw::Text(text), Raw::Binary(&bin)] {
            assert_eq!(
                raw.array().unwrap_err().kind,
                ValueErrorKind::MultiDimensionalArray,
                "{raw:?}"
            );
        }
    }
    assert_eq!(
        TextArray::parse("{ {1}}").unwrap_err().kind,
        ValueErrorKind::MultiDimensionalArray
    );
}

/// Found by the value_formats fuzz target: a two-dimensional header with no elements was
/// a multi-dimensional array to the list parser but `{}` to the text fallback.
/// PostgreSQL's array_recv makes it the empty array, and so do both now.
#[test]
fn dimensions_without_elements_are_the_empty_array() {
    // xml[]: ndim 2, no null flag, element type 142, dimensions 0 x 0 (lower bounds 0).
    let bin = unhex("00000002000000000000008e00000000000000000000000000000000");
    assert_eq!(Raw::Binary(&bin).array().unwrap().iter().count(), 0);
    let mut scratch = String::new();
    let xml_array = PgType::from_oid(143, -1);
    assert_eq!(
        Raw::Binary(&bin).to_text(xml_array, &mut scratch).unwrap(),
        "{}"
    );
    // int4[]: one empty dimension among three is enough.
    let three = unhex("000000030000000000000017000000020000000100000000000000010000000300000001");
    assert_eq!(Raw::Binary(&three).array().unwrap().iter().count(), 0);
    // A negative size is malformed; bytes after an empty array's header are too.
    let negative = unhex("000000020000000000000017ffffffff000000010000000000000001");
    assert_eq!(
        Raw::Binary(&negative).array().unwrap_err().kind,
        ValueErrorKind::Malformed
    );
    let trailing = [&bin[..], &[0, 0, 0, 1, 7]].concat();
    assert!(Raw::Binary(&trailing).array().is_err());
}

/// Found by the value_formats fuzz target (a timestamp[] from 2147483647): a binary array
/// whose upper bound (lower bound plus size minus one) is beyond int4 was read, while its
/// text form `[2147483647:2147483648]={...}` is malformed; PostgreSQL's array_recv
/// refuses it too.
#[test]
fn upper_bounds_beyond_int4_are_malformed() {
    // int4[]: ndim 1, no nulls, element type 23, 2 elements from 2147483647: 1 and 2.
    let two = unhex(
        "00000001000000000000001700000002\
                     7fffffff000000040000000100000004\
                     00000002",
    );
    assert_eq!(
        Raw::Binary(&two).array().unwrap_err().kind,
        ValueErrorKind::Malformed
    );
    let mut scratch = String::new();
    let int4_array = PgType::from_oid(1007, -1);
    assert_eq!(
        Raw::Binary(&two)
            .to_text(int4_array, &mut scratch)
            .unwrap_err()
            .kind,
        ValueErrorKind::Malformed
    );
    // One element at 2147483647 ends there: fine in both forms.
    let one = unhex("000000010000000000000017000000017fffffff0000000400000001");
    assert_eq!(Raw::Binary(&one).array().unwrap().lower_bound(), i32::MAX);
    assert_eq!(
        Raw::Binary(&one).to_text(int4_array, &mut scratch).unwrap(),
        "[2147483647:2147483647]={1}"
    );
    assert_eq!(
        TextArray::parse("[2147483647:2147483647]={1}")
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn malformed_arrays() {
    let bad_text = [
        "",
        "{",
        "}",
        "{1,2",
        "{1,,2}",
        "{1,}",
        "{,1}",
        "{\"a}",
        "{a\\}",
        "{1}x",
        // PostgreSQL: "Unexpected array element."
        r#"{a"b c"d}"#,
        r#"{"a"b}"#,
        "{1}}",
        "{1{2}}",
        "[0:1]={1}",
        "[0:1]{1,2}",
        "[x]={1}",
        "1,2",
    ];
    for text in bad_text {
        assert_eq!(
            TextArray::parse(text).unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{text:?}"
        );
    }
    let bad_binary = [
        "",
        "00000001",
        "000000010000000000000017", // no dimension
        "00000001000000000000001700000002000000010000000100000001", // 2 elements, 1 present
        "ffffffff0000000000000017", // negative ndim
        "0000000100000002000000170000000000000001", // flags 2
        "00000001000000000000001700000001000000010000000500000001", // length beyond the bytes
        "00000001000000000000001700000001000000010000000400000001ff", // trailing byte
        "000000010000000000000017ffffffff00000001", // negative size
        "000000000000000000000017ff", // empty array, trailing byte
        "0000000100000000000000170000000100000001fffffffe", // length -2
    ];
    for hex in bad_binary {
        assert_eq!(
            BinaryArray::parse(&unhex(hex)).unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{hex}"
        );
    }
    // A huge declared size with no data fails without allocating for it.
    let bin = unhex("0000000100000000000000177fffffff00000001");
    assert!(BinaryArray::parse(&bin).is_err());
}

#[test]
fn binary_arrays_print_like_array_out() {
    let mut scratch = String::new();
    for &(scalar, text, hex, _) in ARRAYS {
        let ty = PgType::Array(scalar);
        let bin = unhex(hex);
        if scalar == Scalar::Float8 {
            // Float text from binary is not offered (see the module docs).
            assert_eq!(
                Raw::Binary(&bin)
                    .to_text(ty, &mut scratch)
                    .unwrap_err()
                    .kind,
                ValueErrorKind::Unsupported
            );
            continue;
        }
        assert_eq!(Raw::Binary(&bin).to_text(ty, &mut scratch).unwrap(), text);
        assert_eq!(Raw::Text(text).to_text(ty, &mut scratch).unwrap(), text);
    }
    // Multi-dimensional arrays, the reason for a text fallback:
    // SELECT format('%s', v::T[]), array_send(v::T[])
    let multi = [
        (Scalar::Int4, "{{1,2},{3,4}}", "000000020000000000000017000000020000000100000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        (Scalar::Int4, "[0:1][1:2]={{1,2},{3,4}}", "000000020000000000000017000000020000000000000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        (Scalar::Text, "{{a}}", "000000020000000000000019000000010000000100000001000000010000000161"),
        (Scalar::Text, r#"{{"a b",NULL},{"",c}}"#, "0000000200000001000000190000000200000001000000020000000100000003612062ffffffff000000000000000163"),
        (Scalar::Int4, "{{{1},{2}},{{3},{4}}}", "0000000300000000000000170000000200000001000000020000000100000001000000010000000400000001000000040000000200000004000000030000000400000004"),
        (Scalar::Int4, "[2:3]={7,8}", "000000010000000000000017000000020000000200000004000000070000000400000008"),
        (Scalar::Int4, "[0:1][-1:0]={{1,2},{3,4}}", "000000020000000000000017000000020000000000000002ffffffff0000000400000001000000040000000200000004000000030000000400000004"),
        (Scalar::TimestampTz, r#"{{"2020-01-01 00:00:00+00",infinity}}"#, "0000000200000000000004a0000000010000000100000002000000010000000800023e0786c26000000000087fffffffffffffff"),
        (Scalar::Numeric(NumericMod::Unconstrained), "{{NaN}}", "0000000200000000000006a4000000010000000100000001000000010000000800000000c0000000"),
    ];
    for (scalar, text, hex) in multi {
        let bin = unhex(hex);
        let got = Raw::Binary(&bin).to_text(PgType::Array(scalar), &mut scratch);
        assert_eq!(got.unwrap(), text);
    }
    // Seven dimensions, a count that the bytes do not hold, trailing bytes.
    for hex in [
        "000000070000000000000017",
        "0000000100000000000000170000000500000001",
        "000000000000000000000017ff",
    ] {
        let ty = PgType::Array(Scalar::Int4);
        assert!(
            Raw::Binary(&unhex(hex)).to_text(ty, &mut scratch).is_err(),
            "{hex}"
        );
    }
}
