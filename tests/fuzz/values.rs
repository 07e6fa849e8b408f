//! The value parsers, text and binary (send) format, of every type the value layer maps,
//! through the column builders of the change tables.

use arrow_array::Array;
use pgwire_cdc::arrow::column::ColumnBuilder;
use pgwire_cdc::arrow::Recycler;
use pgwire_cdc::protocol::Datum;
use pgwire_cdc::values::{PgType, RangeType, Raw, Scalar};
use proptest::prelude::*;

use crate::common;
use crate::harness::{apply, mutations, run, walk_capture, Walk};
use crate::pg_wire::cstrs;

/// Every type OID the value layer maps (scalars, their arrays, ranges, multiranges), found
/// by asking it, and a few it reads as unknown text.
fn type_oids() -> Vec<u32> {
    let mut oids: Vec<u32> = (0..10_000)
        .filter(|&oid| PgType::from_oid(oid, -1).is_known())
        .collect();
    for &oid in &oids {
        if let PgType::Scalar(scalar) = PgType::from_oid(oid, -1) {
            assert!(oids.contains(&scalar.array_oid()), "no array of {oid}");
        }
    }
    assert!(oids.len() >= 86, "only {} type OIDs", oids.len());
    // point, unknown, regconfig, a user type: text only.
    oids.extend([600, 705, 3734, 16_385]);
    oids
}

/// Appends `datum` to a new column of the type twice: through the general path, and
/// through the in-place path of the usual types first (`append_binary_fast`,
/// `append_text_fast`; the general path for what they leave), as the change tables do.
/// Both must succeed or fail alike and build the same array; the general path's result
/// and array are returned.
fn append_both_ways(oid: u32, typmod: i32, datum: &Datum<'_>) -> Result<Appended, TestCaseError> {
    let mut general = ColumnBuilder::new(oid, typmod);
    let result = general.append(datum);
    let mut fast = ColumnBuilder::new(oid, typmod);
    let fast_result = fast.append_in_place_first(datum);
    prop_assert_eq!(
        fast_result.is_ok(),
        result.is_ok(),
        "in-place path, type {} ({})",
        oid,
        typmod
    );
    let general = general.finish(&mut Recycler::default());
    let fast = fast.finish(&mut Recycler::default());
    if let (Ok(g), Ok(f)) = (&general, &fast) {
        prop_assert!(
            g.to_data() == f.to_data(),
            "in-place path, type {oid} ({typmod}): {g:?} != {f:?}"
        );
    } else {
        prop_assert_eq!(general.is_ok(), fast.is_ok());
    }
    Ok((result, general))
}

/// A value appended to a new column: the append's result and the finished array.
type Appended = (
    Result<(), pgwire_cdc::values::ValueError>,
    Result<arrow_array::ArrayRef, arrow_schema::ArrowError>,
);

/// The text fallback of a value (`Raw::to_text`), read back as text, must give the column
/// the same entry as the value itself: the same array, or an error of the same kind. For
/// a binary value this is the module's promise that both formats of a value agree.
fn check_text_form(oid: u32, typmod: i32, raw: Raw<'_>) -> Result<(), TestCaseError> {
    let datum = match raw {
        Raw::Text(s) => Datum::Text(s),
        Raw::Binary(b) => Datum::Binary(b),
    };
    let (first, direct) = append_both_ways(oid, typmod, &datum)?;
    prop_assert_eq!(direct.as_ref().map_or(0, arrow_array::Array::len), 1);
    let mut scratch = String::new();
    let Ok(text) = raw.to_text(PgType::from_oid(oid, typmod), &mut scratch) else {
        return Ok(());
    };
    let (second, again) = append_both_ways(oid, typmod, &Datum::Text(text))?;
    prop_assert_eq!(
        first.map_err(|e| e.kind),
        second.map_err(|e| e.kind),
        "text form {:?}",
        text
    );
    let (direct, again) = (direct.unwrap().to_data(), again.unwrap().to_data());
    prop_assert!(
        direct == again,
        "text form {text:?}: {direct:?} != {again:?}"
    );
    Ok(())
}

#[test]
fn fuzz_value_parsers() {
    let oids = type_oids();
    let typmods = prop_oneof![Just(-1), Just(655_366), Just(2_490_374), any::<i32>()];
    let strategy = (
        0..oids.len(),
        typmods,
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..64),
        prop_oneof![
            // Value-shaped text: digits, signs, separators, brackets, quotes, escapes.
            r#"[0-9a-fA-FxXnNiIyYmMsStTpPdDhHbBcCeE:.,+/ {}()\[\]"\\@-]{0,40}"#,
            "\\PC{0,24}",
        ],
    );
    run(
        "value_parsers",
        2_000,
        strategy,
        |(t, typmod, binary, bytes, text)| {
            let raw = if binary {
                Raw::Binary(&bytes)
            } else {
                Raw::Text(&text)
            };
            check_text_form(oids[t], typmod, raw)
        },
    );
}

/// `(type OID, type modifier, send-format bytes)` of the binary values the binary captures'
/// inserts carry (the values exactly as a server sent them).
fn binary_value_seeds() -> Vec<(u32, i32, Vec<u8>)> {
    let mut out = Vec::new();
    for cap in common::captures().into_iter().filter(|c| c.binary) {
        walk_capture(&cap, |step| {
            let Walk::Insert(rel, new) = step else {
                return;
            };
            for (column, datum) in rel.columns.iter().zip(new) {
                let oid = column.base_type_oid;
                if let Datum::Binary(b) = datum {
                    if PgType::from_oid(oid, -1).is_known() && b.len() < 1024 {
                        out.push((oid, column.base_type_modifier, b.to_vec()));
                    }
                }
            }
        });
    }
    out.sort();
    out.dedup();
    out
}

fn be_i32(n: usize) -> [u8; 4] {
    (n as i32).to_be_bytes()
}

/// Send-format values of a scalar type, shaped as `typsend` writes them (lengths, counts
/// and headers right; the contents random, so many are still out of range).
fn scalar_send(scalar: Scalar) -> BoxedStrategy<Vec<u8>> {
    let fixed = |n: usize| proptest::collection::vec(any::<u8>(), n..=n).boxed();
    let text = || "\\PC{0,16}".prop_map(String::into_bytes).boxed();
    match scalar {
        Scalar::Bool => prop_oneof![Just(vec![0]), Just(vec![1]), fixed(1)].boxed(),
        Scalar::Int2 => fixed(2),
        Scalar::Int4 | Scalar::Oid | Scalar::Xid | Scalar::Cid | Scalar::Float4 => fixed(4),
        Scalar::Date => prop_oneof![
            (-2_451_545i32..2_500_000).prop_map(|d| d.to_be_bytes().to_vec()),
            fixed(4)
        ]
        .boxed(),
        Scalar::Int8 | Scalar::Float8 | Scalar::Money | Scalar::MacAddr8 => fixed(8),
        Scalar::Time => prop_oneof![
            (0i64..=86_400_000_000).prop_map(|t| t.to_be_bytes().to_vec()),
            fixed(8)
        ]
        .boxed(),
        Scalar::Timestamp | Scalar::TimestampTz => prop_oneof![
            (-211_813_488_000_000_000i64..9_000_000_000_000_000)
                .prop_map(|t| t.to_be_bytes().to_vec()),
            Just(i64::MAX.to_be_bytes().to_vec()),
            Just(i64::MIN.to_be_bytes().to_vec()),
            fixed(8)
        ]
        .boxed(),
        Scalar::TimeTz => (0i64..=86_400_000_000, -57_600i32..=57_600)
            .prop_map(|(t, z)| [&t.to_be_bytes()[..], &z.to_be_bytes()].concat())
            .boxed(),
        Scalar::Interval => prop_oneof![
            (any::<i64>(), -100_000i32..100_000, -10_000i32..10_000).prop_map(|(us, d, m)| [
                &us.to_be_bytes()[..],
                &d.to_be_bytes(),
                &m.to_be_bytes()
            ]
            .concat()),
            fixed(16)
        ]
        .boxed(),
        Scalar::Uuid => fixed(16),
        Scalar::MacAddr => fixed(6),
        Scalar::Numeric(_) => (
            proptest::collection::vec(0u16..10_000, 0..6),
            -8i16..8,
            prop::sample::select(vec![0u16, 0x4000, 0xC000, 0xD000, 0xF000, 0x1234]),
            0u16..16,
        )
            .prop_map(|(digits, weight, sign, dscale)| {
                let mut out = (digits.len() as u16).to_be_bytes().to_vec();
                out.extend(weight.to_be_bytes());
                out.extend(sign.to_be_bytes());
                out.extend(dscale.to_be_bytes());
                out.extend(digits.iter().flat_map(|d| d.to_be_bytes()));
                out
            })
            .boxed(),
        Scalar::Text
        | Scalar::Varchar
        | Scalar::Bpchar
        | Scalar::Name
        | Scalar::Xml
        | Scalar::Json => text(),
        Scalar::Jsonb => {
            r#"[\[\]{}":, 0-9a-z]{0,16}"#.prop_map(|t| [&[1u8][..], t.as_bytes()].concat()).boxed()
        }
        Scalar::Bytea => proptest::collection::vec(any::<u8>(), 0..16).boxed(),
        Scalar::Inet | Scalar::Cidr => (any::<bool>(), 0u8..=130, any::<bool>(), any::<[u8; 16]>())
            .prop_map(|(v6, bits, is_cidr, addr)| {
                let len = if v6 { 16 } else { 4 };
                let mut out = vec![if v6 { 3 } else { 2 }, bits, u8::from(is_cidr), len];
                out.extend(&addr[..usize::from(len)]);
                out
            })
            .boxed(),
        Scalar::TsVector => proptest::collection::vec(
            ("[a-z']{1,6}", proptest::collection::vec(any::<u16>(), 0..3)),
            0..4,
        )
        .prop_map(|lexemes| {
            let mut out = be_i32(lexemes.len()).to_vec();
            for (word, positions) in lexemes {
                out.extend(cstrs(&[&word]));
                out.extend((positions.len() as u16).to_be_bytes());
                out.extend(positions.iter().flat_map(|p| p.to_be_bytes()));
            }
            out
        })
        .boxed(),
        Scalar::Range(r) => range_send(r),
        Scalar::Multirange(r) => proptest::collection::vec(range_send(r), 0..3)
            .prop_map(|ranges| {
                let mut out = be_i32(ranges.len()).to_vec();
                for range in ranges {
                    out.extend(be_i32(range.len()));
                    out.extend(range);
                }
                out
            })
            .boxed(),
    }
}

/// A range: flags, then each finite bound as a length and a subtype value.
fn range_send(r: RangeType) -> BoxedStrategy<Vec<u8>> {
    let subtype = match PgType::from_oid(r.subtype_oid(), -1) {
        PgType::Scalar(s) => s,
        other => panic!("range subtype {other:?}"),
    };
    let flags = prop_oneof![Just(0x01u8), 0u8..0x20, any::<u8>()];
    (flags, scalar_send(subtype), scalar_send(subtype))
        .prop_map(|(flags, lower, upper)| {
            let mut out = vec![flags];
            if flags & 0x01 == 0 {
                for (infinite, bound) in [(0x08, lower), (0x10, upper)] {
                    if flags & infinite == 0 {
                        out.extend(be_i32(bound.len()));
                        out.extend(bound);
                    }
                }
            }
            out
        })
        .boxed()
}

/// A send-format value of a type: scalar, or an array of it (one dimension mostly).
fn send_format(oid: u32) -> BoxedStrategy<Vec<u8>> {
    match PgType::from_oid(oid, -1) {
        PgType::Scalar(s) => scalar_send(s),
        PgType::Array(s) => (
            proptest::collection::vec(proptest::option::weighted(0.8, scalar_send(s)), 0..4),
            prop_oneof![8 => Just(1), 1 => 0..3i32],
            -2i32..3,
        )
            .prop_map(move |(elements, ndim, lower)| {
                let mut out = ndim.to_be_bytes().to_vec();
                out.extend(i32::from(elements.iter().any(Option::is_none)).to_be_bytes());
                out.extend(s.oid().to_be_bytes());
                for _ in 0..ndim {
                    out.extend(be_i32(elements.len()));
                    out.extend(lower.to_be_bytes());
                }
                for e in &elements {
                    match e {
                        Some(b) => {
                            out.extend(be_i32(b.len()));
                            out.extend(b);
                        }
                        None => out.extend((-1i32).to_be_bytes()),
                    }
                }
                out
            })
            .boxed(),
        PgType::Unknown(_) => proptest::collection::vec(any::<u8>(), 0..16).boxed(),
    }
}

/// Send-format values: of every mapped type, generated in shape, and the captures' real
/// ones; sometimes mutated. Their text form (`to_text`) must read back to the same entry.
#[test]
fn fuzz_value_formats() {
    let captured = binary_value_seeds();
    let oids: Vec<u32> = type_oids()
        .into_iter()
        .filter(|&oid| PgType::from_oid(oid, -1).is_known())
        .collect();
    let typmods = prop_oneof![Just(-1), Just(655_366), Just(2_490_374), Just(393_220)];
    let generated = prop::sample::select(oids)
        .prop_flat_map(move |oid| (Just(oid), typmods.clone(), send_format(oid)));
    let captured = prop::sample::select(captured);
    let strategy = (
        prop_oneof![3 => generated, 1 => captured],
        proptest::option::weighted(0.3, mutations()),
    );
    run(
        "value_formats",
        2_000,
        strategy,
        |((oid, typmod, seed), muts)| {
            let bytes = match &muts {
                Some(m) => apply(seed.clone(), m),
                None => seed,
            };
            check_text_form(oid, typmod, Raw::Binary(&bytes))
        },
    );
}
