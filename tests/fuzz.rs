//! Fuzz targets on stable Rust (proptest), one per byte-level entry point:
//!
//! * `parse_message`: arbitrary bytes, every protocol version, inside and outside streams;
//! * `decoder_feed`: whole golden captures with one message mutated (flipped, truncated,
//!   extended, spliced), so the state machine sees realistic, almost-valid input;
//! * `arrow_tables`: the same mutated captures into the Arrow change tables, whose batches
//!   must stay valid;
//! * `value_parsers`: arbitrary text and bytes into a column builder of every built-in
//!   type, scalar and array, with real and random type modifiers;
//! * `parse_lsn`: arbitrary strings;
//! * `copy_binary`: COPY BINARY streams built from the golden captures' inserts (binary
//!   captures: real send-format values; text captures: output text, which the binary
//!   parsers mostly reject, exercising rejected rows), mutated and split at random points,
//!   into the snapshot's `CopyBinaryDecoder`.
//!
//! The property is always the same: an `Ok` or a `DecodeError`, never a panic, and an
//! error's offset inside the message (for COPY: inside the stream). By default each target runs a few thousand cases (part
//! of `make test`); `PGWIRE_CDC_FUZZ_SECONDS=600 make fuzz` runs each for ten minutes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::Array;
use pgwire_cdc::arrow::column::ColumnBuilder;
use pgwire_cdc::arrow::{ArrowSink, Recycler};
use pgwire_cdc::protocol::{parse_message, Datum, Message, ParseContext};
use pgwire_cdc::relation::{Relation, TypeInfo};
use pgwire_cdc::sink::{EventSink, NullSink};
use pgwire_cdc::snapshot::frame::SIGNATURE;
use pgwire_cdc::snapshot::{CopyBinaryDecoder, SnapshotError, SnapshotMeta};
use pgwire_cdc::{Decoder, DecoderConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Runs `test` over `strategy` for the configured time, or a fixed number of cases.
fn run<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let seconds: u64 = std::env::var("PGWIRE_CDC_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut total = 0u64;
    loop {
        let cases = 2_000;
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("fuzz target {name} failed: {e}");
        }
        total += u64::from(cases);
        if Instant::now() >= deadline {
            break;
        }
    }
    if seconds > 0 {
        println!("fuzz target {name}: {total} cases in {seconds} s, clean");
    }
}

fn contexts() -> impl Strategy<Value = ParseContext> {
    (1u32..=4, any::<bool>()).prop_map(|(proto_version, in_stream)| ParseContext {
        proto_version,
        in_stream: in_stream && proto_version >= 2,
    })
}

fn seed_messages() -> Vec<Vec<u8>> {
    common::captures()
        .into_iter()
        .flat_map(|c| c.messages.into_iter().map(|(_, b)| b))
        .filter(|b| b.len() < 4096)
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, value: u8 },
    Truncate { len: usize },
    Insert { at: usize, bytes: Vec<u8> },
    SetI32 { at: usize, value: i32 },
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let n = bytes.len().max(1);
        match m {
            Mutation::Flip { at, value } => {
                if let Some(b) = bytes.get_mut(at % n) {
                    *b = *value;
                }
            }
            Mutation::Truncate { len } => bytes.truncate(len % n),
            Mutation::Insert { at, bytes: extra } => {
                let at = (at % n).min(bytes.len());
                bytes.splice(at..at, extra.iter().copied());
            }
            Mutation::SetI32 { at, value } => {
                let at = at % n;
                if at + 4 <= bytes.len() {
                    bytes[at..at + 4].copy_from_slice(&value.to_be_bytes());
                }
            }
        }
    }
    bytes
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Flip { at, value }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (
            any::<usize>(),
            prop_oneof![
                Just(-1),
                Just(-2),
                Just(i32::MAX),
                Just(i32::MIN),
                Just(65_536),
                any::<i32>()
            ]
        )
            .prop_map(|(at, value)| Mutation::SetI32 { at, value }),
    ];
    proptest::collection::vec(one, 1..4)
}

#[test]
fn fuzz_parse_message_arbitrary_bytes() {
    run(
        "parse_message",
        (proptest::collection::vec(any::<u8>(), 0..256), contexts()),
        |(bytes, ctx)| {
            if let Err(e) = parse_message(&bytes, ctx) {
                prop_assert!(e.offset <= bytes.len());
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_parse_message_mutated_captures() {
    let seeds = seed_messages();
    let strategy = (0..seeds.len(), mutations(), contexts());
    run("parse_message_mutated", strategy, |(i, muts, ctx)| {
        let bytes = apply(seeds[i].clone(), &muts);
        if let Err(e) = parse_message(&bytes, ctx) {
            prop_assert!(e.offset <= bytes.len());
        }
        Ok(())
    });
}

/// Feeds a whole capture with message `at` (modulo its length) mutated; every error must
/// point inside its message.
fn feed_mutated<S: EventSink>(
    cap: &common::Capture,
    at: usize,
    muts: &[Mutation],
    sink: &mut S,
) -> Result<(), TestCaseError> {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: cap.proto_version,
        binary: cap.binary,
    });
    let target = at % cap.messages.len();
    for (i, (lsn, bytes)) in cap.messages.iter().enumerate() {
        let bytes = if i == target {
            apply(bytes.clone(), muts)
        } else {
            bytes.clone()
        };
        if let Err(e) = dec.feed(&bytes, *lsn, sink) {
            prop_assert!(e.offset <= bytes.len());
        }
    }
    Ok(())
}

#[test]
fn fuzz_decoder_feed_mutated_streams() {
    let captures = common::captures();
    let strategy = (0..captures.len(), any::<usize>(), mutations());
    run("decoder_feed", strategy, |(c, at, muts)| {
        feed_mutated(&captures[c], at, &muts, &mut NullSink::default())
    });
}

#[test]
fn fuzz_decoder_feed_arbitrary_sequences() {
    let seeds = seed_messages();
    let strategy = (
        1u32..=4,
        proptest::collection::vec((0..seeds.len(), proptest::option::of(mutations())), 1..40),
    );
    run(
        "decoder_feed_sequences",
        strategy,
        |(proto_version, picks)| {
            let mut dec = Decoder::new(DecoderConfig {
                proto_version,
                binary: true,
            });
            let mut sink = NullSink::default();
            for (i, muts) in picks {
                let bytes = match muts {
                    Some(m) => apply(seeds[i].clone(), &m),
                    None => seeds[i].clone(),
                };
                let _ = dec.feed(&bytes, 0, &mut sink);
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_arrow_tables_mutated_streams() {
    let captures = common::captures();
    let strategy = (0..captures.len(), any::<usize>(), mutations());
    run("arrow_tables", strategy, |(c, at, muts)| {
        let cap = &captures[c];
        let mut sink = ArrowSink::new(cap.binary);
        feed_mutated(cap, at, &muts, &mut sink)?;
        // Whatever was accepted must make valid Arrow.
        let taken = sink.take();
        prop_assert!(taken.is_ok(), "{:?}", taken.err());
        Ok(())
    });
}

/// Every built-in type OID the value layer knows, scalar and array.
const TYPE_OIDS: &[u32] = &[
    16, 17, 19, 20, 21, 23, 25, 26, 28, 29, 114, 142, 650, 700, 701, 774, 790, 829, 869, 1042,
    1043, 1082, 1083, 1114, 1184, 1186, 1266, 1700, 2950, 3614, 3802, 3904, 3906, 3908, 3910, 3912,
    3926, 4451, 4532, 4533, 4534, 4535, 4536, 1000, 1001, 1005, 1007, 1009, 1016, 1021, 1022, 1115,
    1182, 1183, 1185, 1187, 1231, 2951, 3807, 199, 651, 1040, 1041,
];

#[test]
fn fuzz_value_parsers() {
    let typmods = prop_oneof![Just(-1), Just(655_366), Just(2_490_374), any::<i32>()];
    let strategy = (
        0..TYPE_OIDS.len(),
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
        strategy,
        |(t, typmod, binary, bytes, text)| {
            let mut builder = ColumnBuilder::new(TYPE_OIDS[t], typmod);
            let datum = if binary {
                Datum::Binary(&bytes)
            } else {
                Datum::Text(&text)
            };
            // One entry whatever happens: the value, or a null with the error.
            let _ = builder.append(&datum, binary);
            let array = builder.finish(&mut Recycler::default());
            prop_assert_eq!(array.map_or(0, |a| a.len()), 1);
            Ok(())
        },
    );
}

#[test]
fn fuzz_parse_lsn() {
    run("parse_lsn", "\\PC{0,24}", |s| {
        if let Ok(v) = pgwire_cdc::lsn::parse_lsn(&s) {
            prop_assert_eq!(
                pgwire_cdc::lsn::parse_lsn(&pgwire_cdc::lsn::format_lsn(v)),
                Ok(v)
            );
        }
        Ok(())
    });
}

/// One COPY BINARY stream per relation version of each capture, its tuples made of the
/// capture's inserts (the values exactly as the server wrote them).
fn copy_seeds() -> Vec<(Arc<Relation>, Vec<u8>)> {
    let mut out = Vec::new();
    for cap in common::captures() {
        let mut types = HashMap::new();
        let mut relations: HashMap<u32, Arc<Relation>> = HashMap::new();
        let mut streams: Vec<(Arc<Relation>, Vec<u8>)> = Vec::new();
        let mut in_stream = false;
        for (_, bytes) in &cap.messages {
            let ctx = ParseContext {
                proto_version: cap.proto_version,
                in_stream,
            };
            match parse_message(bytes, ctx) {
                Ok(Message::StreamStart(_)) => in_stream = true,
                Ok(Message::StreamStop) => in_stream = false,
                Ok(Message::Type(t)) => {
                    types.insert(t.oid, Arc::new(TypeInfo::from_message(&t)));
                }
                Ok(Message::Relation(r)) => {
                    let rel = Arc::new(Relation::from_message(&r, &types, &Default::default()));
                    if relations.get(&r.oid).map(|old| **old != *rel) != Some(false) {
                        let mut header = SIGNATURE.to_vec();
                        header.extend([0; 8]);
                        streams.push((Arc::clone(&rel), header));
                        relations.insert(r.oid, rel);
                    }
                }
                Ok(Message::Insert(ins)) => {
                    let Some(rel) = relations.get(&ins.relation) else {
                        continue;
                    };
                    let Some((_, stream)) =
                        streams.iter_mut().rev().find(|(r, _)| Arc::ptr_eq(r, rel))
                    else {
                        continue;
                    };
                    stream.extend((ins.new.len() as i16).to_be_bytes());
                    for d in &ins.new {
                        match d {
                            Datum::Binary(b) => {
                                stream.extend((b.len() as i32).to_be_bytes());
                                stream.extend(*b);
                            }
                            Datum::Text(t) => {
                                stream.extend((t.len() as i32).to_be_bytes());
                                stream.extend(t.as_bytes());
                            }
                            Datum::Null | Datum::UnchangedToast => {
                                stream.extend((-1i32).to_be_bytes());
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (rel, mut stream) in streams {
            stream.extend((-1i16).to_be_bytes());
            out.push((rel, stream));
        }
    }
    assert!(out.len() > 10, "the captures give COPY seeds");
    out
}

const COPY_META: SnapshotMeta = SnapshotMeta {
    consistent_point: 7,
    first_ordinal: 0,
};

#[test]
fn fuzz_copy_binary_mutated_streams() {
    let seeds = copy_seeds();
    let strategy = (
        0..seeds.len(),
        proptest::option::of(mutations()),
        proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    );
    run("copy_binary", strategy, |(i, muts, cuts)| {
        let (relation, seed) = &seeds[i];
        let stream = match &muts {
            Some(m) => apply(seed.clone(), m),
            None => seed.clone(),
        };
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut dec = CopyBinaryDecoder::new(Arc::clone(relation), COPY_META);
        let mut start = 0;
        let mut fed = Ok(());
        for p in points.into_iter().chain([stream.len()]) {
            fed = fed.and_then(|()| dec.feed(&stream[start..p]));
            start = p;
        }
        if let Err(e) = &fed {
            prop_assert!(e.offset <= stream.len());
        }
        let mut rows = 0;
        let mut rejected = 0;
        loop {
            match dec.finish() {
                Ok(batch) => {
                    rows += batch.num_rows();
                    break;
                }
                Err(SnapshotError::Rejected(errors)) => rejected += errors.len(),
                Err(SnapshotError::Decode(e)) => {
                    prop_assert!(e.offset <= stream.len());
                    prop_assert!(fed.is_err() || !dec.is_complete());
                    return Ok(());
                }
                Err(SnapshotError::Arrow(e)) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
        prop_assert_eq!(rows as u64 + rejected as u64, dec.tuples());
        if muts.is_none() {
            prop_assert!(fed.is_ok());
        }
        Ok(())
    });
}
