//! The COPY decoder against hand-built streams: framing at every split point, the errors,
//! the metadata of read rows, and agreement with the streaming path for the same values.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use proptest::prelude::*;

use super::frame::SIGNATURE;
use super::{select_list, CopyBinaryDecoder, SnapshotError, SnapshotMeta};
use crate::arrow::{change_table_schema, ArrowSink};
use crate::error::{CopyProblem, DecodeError, MessageKind, Reason};
use crate::protocol::Datum;
use crate::relation::{Column, Relation};
use crate::sink::{EventMeta, EventRef, EventSink};

const META: SnapshotMeta = SnapshotMeta {
    consistent_point: 0x16B_3748,
    first_ordinal: 1000,
};

fn column(name: &str, type_oid: u32, type_modifier: i32) -> Column {
    Column {
        name: name.to_owned(),
        type_oid,
        base_type_oid: type_oid,
        type_modifier,
        base_type_modifier: type_modifier,
        is_key: name == "id",
    }
}

/// id int8, name text, amount numeric(12,2), tags int4[], day date, mood (an enum: a type
/// the value layer does not know, selected as ::text).
fn relation() -> Arc<Relation> {
    Arc::new(Relation::from_catalog(
        16384,
        "public",
        "t",
        b'd',
        vec![
            column("id", 20, -1),
            column("name", 25, -1),
            column("amount", 1700, ((12 << 16) | 2) + 4),
            column("tags", 1007, -1),
            column("day", 1082, -1),
            column("mood", 70_000, -1),
        ],
    ))
}

/// numeric's send format of `units` hundredths (|units| < 10^8), or NaN.
fn numeric(units: Option<i64>) -> Vec<u8> {
    let mut out = Vec::new();
    let Some(units) = units else {
        for v in [0u16, 0, 0xC000, 0] {
            out.extend(v.to_be_bytes());
        }
        return out;
    };
    let (whole, cents) = (units.abs() / 100, units.abs() % 100);
    let digits: Vec<u16> = match whole {
        0 => vec![0, (cents * 100) as u16],
        w if w < 10_000 => vec![w as u16, (cents * 100) as u16],
        w => vec![
            (w / 10_000) as u16,
            (w % 10_000) as u16,
            (cents * 100) as u16,
        ],
    };
    let weight = digits.len() as u16 - 2;
    let sign: u16 = if units < 0 { 0x4000 } else { 0 };
    for v in [digits.len() as u16, weight, sign, 2] {
        out.extend(v.to_be_bytes());
    }
    for d in digits {
        out.extend(d.to_be_bytes());
    }
    out
}

fn int4_array(items: &[Option<i32>]) -> Vec<u8> {
    let mut out = Vec::new();
    let has_null = items.iter().any(Option::is_none);
    if items.is_empty() {
        // PostgreSQL sends an empty array with no dimensions.
        for v in [0i32, 0, 23] {
            out.extend(v.to_be_bytes());
        }
        return out;
    }
    for v in [1, i32::from(has_null), 23, items.len() as i32, 1] {
        out.extend(v.to_be_bytes());
    }
    for item in items {
        match item {
            Some(v) => {
                out.extend(4i32.to_be_bytes());
                out.extend(v.to_be_bytes());
            }
            None => out.extend((-1i32).to_be_bytes()),
        }
    }
    out
}

/// The fields of row `i`, in send format (None = NULL). Row 3 has numeric NaN if `nan`.
fn fields(i: i64, nan: bool) -> Vec<Option<Vec<u8>>> {
    vec![
        Some(i.to_be_bytes().to_vec()),
        (i % 4 != 1).then(|| "ü".repeat(i as usize % 5).into_bytes()),
        Some(numeric(if nan && i == 3 {
            None
        } else {
            Some((i - 3) * 123_456 + 7)
        })),
        (i % 3 != 2).then(|| int4_array(&[Some(i as i32), None, Some(-1)][..(i % 4) as usize])),
        Some((8_000 + i as i32).to_be_bytes().to_vec()),
        Some(if i % 2 == 0 {
            b"sad".to_vec()
        } else {
            b"ok".to_vec()
        }),
    ]
}

fn header() -> Vec<u8> {
    let mut out = SIGNATURE.to_vec();
    out.extend(0u32.to_be_bytes());
    out.extend(0u32.to_be_bytes());
    out
}

fn tuple(fields: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut out = (fields.len() as i16).to_be_bytes().to_vec();
    for f in fields {
        match f {
            Some(bytes) => {
                out.extend((bytes.len() as i32).to_be_bytes());
                out.extend(bytes);
            }
            None => out.extend((-1i32).to_be_bytes()),
        }
    }
    out
}

const TRAILER: [u8; 2] = [0xff, 0xff];

/// A whole stream of `n` rows, as PostgreSQL sends it: one chunk per CopyData message.
fn chunks(n: i64, nan: bool) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..n).map(|i| tuple(&fields(i, nan))).collect();
    match out.first_mut() {
        Some(first) => first.splice(0..0, header()).for_each(drop),
        None => out.push(header()),
    }
    out.push(TRAILER.to_vec());
    out
}

fn decode(chunks: &[&[u8]]) -> Result<RecordBatch, SnapshotError> {
    let mut dec = CopyBinaryDecoder::new(relation(), META);
    for c in chunks {
        dec.feed(c).map_err(SnapshotError::Decode)?;
    }
    dec.finish()
}

fn decode_error(result: Result<RecordBatch, SnapshotError>) -> DecodeError {
    match result {
        Err(SnapshotError::Decode(e)) => e,
        other => panic!("expected a DecodeError, got {other:?}"),
    }
}

fn copy_problem(e: &DecodeError) -> (usize, CopyProblem) {
    assert_eq!(e.kind, MessageKind::CopyData);
    match &e.reason {
        Reason::Copy { table, problem } => {
            assert_eq!(table, "public.t");
            (e.offset, problem.clone())
        }
        other => panic!("expected a COPY framing error, got {other:?}"),
    }
}

fn whole(n: i64) -> Vec<u8> {
    chunks(n, false).concat()
}

#[test]
fn select_list_casts_the_columns_read_as_text() {
    assert_eq!(
        select_list(&relation()),
        r#""id", "name", "amount", "tags", "day", "mood"::text"#
    );
    let odd = Relation::from_catalog(1, "s", "t", b'f', vec![column(r#"we"ird"#, 20, -1)]);
    assert_eq!(select_list(&odd), r#""we""ird""#);
}

#[test]
fn rows_have_the_read_metadata() -> Result<(), SnapshotError> {
    let stream = chunks(5, false);
    let refs: Vec<&[u8]> = stream.iter().map(Vec::as_slice).collect();
    let batch = decode(&refs)?;
    assert_eq!(batch.schema(), change_table_schema(&relation()));
    assert_eq!(batch.num_rows(), 5);
    let col = |name: &str| batch.column_by_name(name).cloned();
    let strings = |name: &str| -> Vec<Option<String>> {
        col(name)
            .map(|a| {
                a.as_string::<i32>()
                    .iter()
                    .map(|s| s.map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ints = |name: &str| -> Vec<Option<i64>> {
        col(name)
            .map(|a| a.as_primitive::<Int64Type>().iter().collect())
            .unwrap_or_default()
    };
    assert_eq!(strings("_change_type"), vec![Some("read".to_owned()); 5]);
    let cp = Some(META.consistent_point as i64);
    assert_eq!(ints("_lsn"), vec![cp; 5]);
    assert_eq!(ints("_commit_lsn"), vec![cp; 5]);
    assert_eq!(
        ints("_tx_ordinal"),
        (1000..1005).map(Some).collect::<Vec<_>>()
    );
    assert_eq!(ints("_xid"), vec![None; 5]);
    let commit_ts = col("_commit_ts").map(|a| {
        a.as_primitive::<TimestampMicrosecondType>()
            .iter()
            .collect::<Vec<_>>()
    });
    assert_eq!(commit_ts, Some(vec![None; 5]));
    assert_eq!(col("_before").map(|a| a.null_count()), Some(5));
    assert_eq!(strings("_before_kind"), vec![None; 5]);
    let unchanged = col("_unchanged").map(|a| {
        let list = a.as_list::<i32>();
        (list.null_count(), list.values().len())
    });
    assert_eq!(unchanged, Some((0, 0)));
    assert_eq!(ints("id"), (0..5).map(Some).collect::<Vec<_>>());
    let amounts: Option<Vec<Option<i128>>> =
        col("amount").map(|a| a.as_primitive::<Decimal128Type>().iter().collect());
    let expected: Vec<Option<i128>> = (0..5)
        .map(|i| Some(i128::from((i - 3) * 123_456 + 7)))
        .collect();
    assert_eq!(amounts, Some(expected));
    // tags: row i has the first i % 4 of [i, NULL, -1]; NULL when i % 3 == 2.
    let tags = col("tags").map(|a| {
        let list = a.as_list::<i32>();
        (0..5)
            .map(|r| {
                list.is_valid(r).then(|| {
                    let v = list.value(r);
                    let v = v.as_primitive::<Int32Type>();
                    v.iter().collect::<Vec<_>>()
                })
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(
        tags,
        Some(vec![
            Some(vec![]),
            Some(vec![Some(1)]),
            None,
            Some(vec![Some(3), None, Some(-1)]),
            Some(vec![]),
        ])
    );
    assert_eq!(strings("name").get(1), Some(&None));
    assert_eq!(strings("name").get(3), Some(&Some("ü".repeat(3))));
    // The enum column was read as its text.
    assert_eq!(
        strings("mood"),
        ["sad", "ok", "sad", "ok", "sad"]
            .map(|s| Some(s.to_owned()))
            .to_vec()
    );
    Ok(())
}

/// The data columns equal what the streaming path builds from the same values sent as
/// pgoutput binary tuples (the enum as text, as the text-format stream sends it).
#[test]
fn data_columns_equal_the_streaming_path() -> Result<(), SnapshotError> {
    let rel = relation();
    let batch = decode(&[&whole(7)])?;
    let mut sink = ArrowSink::new(true);
    for i in 0..7 {
        let values = fields(i, false);
        let mood = values
            .get(5)
            .and_then(|v| v.as_deref())
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default();
        let row: Vec<Datum<'_>> = values
            .iter()
            .take(5)
            .map(|v| v.as_deref().map_or(Datum::Null, Datum::Binary))
            .chain([Datum::Text(mood)])
            .collect();
        let meta = EventMeta {
            start_lsn: 1,
            commit_lsn: Some(2),
            tx_ordinal: i as u64,
            xid: Some(3),
            commit_timestamp: Some(4),
        };
        let event = EventRef::Insert {
            relation: &rel,
            row: &row,
        };
        sink.event(&meta, event).map_err(SnapshotError::Decode)?;
    }
    let streamed = sink.take().map_err(SnapshotError::Arrow)?;
    let streamed = &streamed.first().map(|s| s.batch.clone());
    assert_eq!(
        streamed.as_ref().map(RecordBatch::schema),
        Some(batch.schema())
    );
    for i in 0..rel.columns.len() {
        assert_eq!(
            streamed.as_ref().map(|b| b.column(i)),
            Some(batch.column(i)),
            "column {i}"
        );
    }
    Ok(())
}

#[test]
fn every_split_point_gives_the_same_batch() -> Result<(), SnapshotError> {
    let stream = whole(4);
    let expected = decode(&[&stream])?;
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(decode(&[a, b])?, expected, "split at {cut}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(decode(&bytes)?, expected, "byte by byte");
    Ok(())
}

#[test]
fn take_batch_midway_continues_the_stream() -> Result<(), SnapshotError> {
    let stream = chunks(6, false);
    let mut dec = CopyBinaryDecoder::new(relation(), META);
    let mut batches = Vec::new();
    for (i, c) in stream.iter().enumerate() {
        dec.feed(c).map_err(SnapshotError::Decode)?;
        if i % 4 == 3 {
            assert_eq!(dec.rows(), 4);
            batches.push(dec.take_batch()?);
            assert_eq!(dec.rows(), 0);
        }
    }
    assert!(dec.is_complete());
    batches.push(dec.finish()?);
    let joined = arrow_select::concat::concat_batches(&dec.schema(), &batches)
        .map_err(SnapshotError::Arrow)?;
    assert_eq!(joined, decode(&[&whole(6)])?);
    assert_eq!(dec.tuples(), 6);
    Ok(())
}

#[test]
fn an_empty_table_is_header_and_trailer() -> Result<(), SnapshotError> {
    let batch = decode(&[&whole(0)])?;
    assert_eq!(batch.num_rows(), 0);
    assert_eq!(batch.schema(), change_table_schema(&relation()));
    Ok(())
}

/// numeric NaN in a numeric(12,2) column: the streaming path's policy. The row is left
/// out, the error names table, column and the consistent point, the next batch has the
/// other rows.
#[test]
fn unrepresentable_value_rejects_its_row() -> Result<(), SnapshotError> {
    let mut dec = CopyBinaryDecoder::new(relation(), META);
    let stream = chunks(6, true);
    for c in &stream {
        dec.feed(c).map_err(SnapshotError::Decode)?;
    }
    assert_eq!(dec.rows(), 5);
    let rejected = match dec.finish() {
        Err(SnapshotError::Rejected(errors)) => errors,
        other => panic!("expected rejected rows, got {other:?}"),
    };
    let first_three: usize = stream.iter().take(3).map(Vec::len).sum();
    let [e] = rejected.as_slice() else {
        panic!("one rejected row expected: {rejected:?}");
    };
    assert_eq!((e.kind, e.offset), (MessageKind::CopyData, first_three));
    match &e.reason {
        Reason::Value {
            table, column, lsn, ..
        } => assert_eq!(
            (table.as_str(), column.as_str(), *lsn),
            ("public.t", "amount", META.consistent_point)
        ),
        other => panic!("expected a value error, got {other:?}"),
    }
    let rest = dec.finish()?;
    let ids = rest.column(0).as_primitive::<Int64Type>();
    assert_eq!(ids.values().to_vec(), vec![0, 1, 2, 4, 5]);
    let ordinals = rest
        .column_by_name("_tx_ordinal")
        .map(|a| a.as_primitive::<Int64Type>().values().to_vec());
    assert_eq!(ordinals, Some(vec![1000, 1001, 1002, 1004, 1005]));
    Ok(())
}

#[test]
fn framing_errors_name_the_table_and_stream_offset() {
    let good = whole(2);
    let first_tuple = tuple(&fields(0, false)).len();
    let second = 19 + first_tuple;

    let mut text_copy = b"0\tsad\n".to_vec();
    text_copy.extend(&good);
    let e = decode_error(decode(&[&text_copy]));
    assert_eq!(copy_problem(&e), (0, CopyProblem::BadSignature));
    assert!(e.to_string().contains("public.t"), "{e}");
    assert!(e.to_string().contains("at byte 0"), "{e}");

    let mut oids = good.clone();
    oids.splice(11..15, (1u32 << 16).to_be_bytes())
        .for_each(drop);
    let e = decode_error(decode(&[&oids]));
    assert_eq!(copy_problem(&e), (11, CopyProblem::OidsIncluded));

    // Field count 5 instead of 6 in the second tuple.
    let mut short = good.clone();
    short
        .splice(second..second + 2, 5i16.to_be_bytes())
        .for_each(drop);
    let e = decode_error(decode(&[&short]));
    assert_eq!(
        copy_problem(&e),
        (
            second,
            CopyProblem::FieldCount {
                expected: 6,
                found: 5
            }
        )
    );

    let mut bad_len = good.clone();
    bad_len
        .splice(second + 2..second + 6, (-3i32).to_be_bytes())
        .for_each(drop);
    let e = decode_error(decode(&[&bad_len]));
    assert_eq!(
        copy_problem(&e),
        (second + 2, CopyProblem::BadFieldLength(-3))
    );

    let mut after = good.clone();
    after.extend([0, 0]);
    let e = decode_error(decode(&[&after]));
    assert_eq!(
        copy_problem(&e),
        (good.len(), CopyProblem::DataAfterTrailer)
    );
    // In a chunk of its own too.
    let e = decode_error(decode(&[&good, b"x"]));
    assert_eq!(
        copy_problem(&e),
        (good.len(), CopyProblem::DataAfterTrailer)
    );
}

#[test]
fn a_framing_error_is_final() {
    let mut dec = CopyBinaryDecoder::new(relation(), META);
    let first = dec.feed(b"COPY");
    assert!(first.is_err());
    let stream = whole(1);
    assert_eq!(dec.feed(&stream).err(), first.clone().err());
    assert_eq!(
        decode_error(dec.finish()),
        first.err().unwrap_or_else(|| panic!("an error"))
    );
}

#[test]
fn every_truncation_is_an_error_at_finish() {
    let pieces = chunks(3, false);
    let stream = pieces.concat();
    // Where tuples end (the first piece also holds the 19-byte header).
    let mut boundaries = vec![19];
    let mut end = 0;
    for p in pieces.iter().take(3) {
        end += p.len();
        boundaries.push(end);
    }
    for cut in 0..stream.len() {
        let e = decode_error(decode(&[&stream[..cut]]));
        let (offset, problem) = copy_problem(&e);
        assert_eq!(offset, cut, "cut at {cut}");
        let inside = match cut {
            0 => "before the header",
            1..=18 => "inside the header",
            _ if boundaries.contains(&cut) => "before the trailer",
            _ => "inside a tuple",
        };
        assert_eq!(problem, CopyProblem::Truncated { inside }, "cut at {cut}");
    }
}

proptest! {
    /// Any re-split of a valid stream gives the same batch.
    #[test]
    fn random_splits_give_the_same_batch(
        n in 0i64..12,
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let stream = whole(n);
        let expected = decode(&[&stream]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for p in points.into_iter().chain([stream.len()]) {
            pieces.push(stream.get(start..p).unwrap_or_default());
            start = p;
        }
        let got = decode(&pieces).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, expected);
    }

    /// Mutated streams give a batch, rejected rows or a DecodeError, never a panic.
    #[test]
    fn mutated_streams_never_panic(
        n in 0i64..6,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        split in any::<prop::sample::Index>(),
    ) {
        let mut stream = whole(n);
        for (at, byte) in edits {
            let i = at.index(stream.len());
            if let Some(b) = stream.get_mut(i) {
                *b = byte;
            }
        }
        let (a, b) = stream.split_at(split.index(stream.len() + 1));
        let _ = decode(&[a, b]);
    }
}
