//! Fuzz targets on stable Rust (proptest), one per byte-level entry point. Decoding:
//!
//! * `parse_message`: arbitrary bytes, every protocol version, inside and outside streams;
//! * `decoder_feed`: whole golden captures with one message mutated (flipped, truncated,
//!   extended, spliced), so the state machine sees realistic, almost-valid input;
//! * `arrow_tables`: the same mutated captures into the Arrow change tables, whose batches
//!   must stay valid;
//! * `value_parsers`: arbitrary text and bytes into a column builder of every type OID the
//!   value layer maps (asked of it, so none is missed), scalar, array, range and
//!   multirange, with real and random type modifiers; the value's text form
//!   (`Raw::to_text`) must read back to the same entry;
//! * `value_formats`: send-format values of every mapped type, generated in shape (and the
//!   binary captures' real ones), sometimes mutated: binary and text must agree;
//!   in both of these, each value also goes through the in-place path of the usual types
//!   (`append_binary_fast`, `append_text_fast`), which must build what the general path
//!   builds;
//! * `parse_lsn`: arbitrary strings;
//! * `copy_binary`: COPY BINARY streams built from the golden captures' inserts (binary
//!   captures: real send-format values; text captures: output text, which the binary
//!   parsers mostly reject, exercising rejected rows), mutated and split at random points,
//!   into the snapshot's `CopyBinaryDecoder`.
//!
//! The PostgreSQL client (through `pgwire_cdc::pg::fuzzing`):
//!
//! * `backend_frames`: backend messages written to a socket in random pieces, framed by
//!   the client's reader; compared with the protocol's framing of the same bytes;
//! * `backend_messages`: every backend body parser (ErrorResponse, ParameterStatus,
//!   CommandComplete, DataRow, BackendKeyData, ReadyForQuery, replication CopyData,
//!   AuthenticationSASL) on mutated real bodies and arbitrary bytes, and `server_version`
//!   strings; what parses must encode back to the same bytes;
//! * `replication_copy_data`: the captures as XLogData and keepalives, one mutated, parsed
//!   and fed to the decoder;
//! * `client_session`: a scripted server (start-up, then a query, a COPY or a replication
//!   stream), sometimes mutated, against a real `Connection` over a socket: an unmutated
//!   script must give exactly its rows, data or messages;
//! * `auth_messages`: replayed (mutated) authentication requests against the login, checked
//!   against a model of which logins must succeed;
//! * `scram`: a SCRAM-SHA-256 server written from RFC 5802 against the client, its
//!   messages sometimes mutated: only an unchanged exchange with the right password logs
//!   in;
//! * `connection_strings`: generated keyword/value strings and URIs (which must parse to
//!   what they were made from), mutated real ones, arbitrary text; what parses must read the
//!   same written back as keyword/value, and resolve to one target per host;
//! * `pgpass`: generated password files (the first matching line must win) and mutated
//!   ones;
//! * `percent_decode`: URI components.
//!
//! Every target's first property: an `Ok` or a typed error, never a panic (nor a stalled
//! read); decode errors point inside their message (for COPY: inside the stream). By
//! default each target runs a few hundred to a few thousand cases (part of `make test`);
//! `make fuzz` runs each for `FUZZ_SECONDS` (600) in turn, with overflow checks on, and
//! prints its case count.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::Array;
use pgwire_cdc::arrow::column::ColumnBuilder;
use pgwire_cdc::arrow::{ArrowSink, Recycler};
use pgwire_cdc::pg::fuzzing;
use pgwire_cdc::pg::{
    ChannelBindingMode, ConnParams, PgError, ReplicationMessage, ServerError, SslMode,
};
use pgwire_cdc::protocol::{parse_message, Datum, Message, ParseContext};
use pgwire_cdc::relation::{Relation, TypeInfo};
use pgwire_cdc::sink::{EventSink, NullSink};
use pgwire_cdc::snapshot::frame::SIGNATURE;
use pgwire_cdc::snapshot::{CopyBinaryDecoder, SnapshotError, SnapshotMeta};
use pgwire_cdc::values::{PgType, RangeType, Raw, Scalar};
use pgwire_cdc::{Decoder, DecoderConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Runs `test` over `strategy`: `quick` cases by default (the smoke run of `make test`), or
/// for `PGWIRE_CDC_FUZZ_SECONDS` seconds, in batches of fresh random cases; then prints how
/// many cases ran and how long it took.
fn run<S: Strategy>(
    name: &str,
    quick: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let seconds: u64 = std::env::var("PGWIRE_CDC_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut total = 0u64;
    loop {
        // Under a time budget, batches small enough for a slow target to stop near it.
        let cases = if seconds > 0 { quick.min(500) } else { quick };
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
        println!(
            "fuzz target {name}: {total} cases in {:.0} s, clean",
            start.elapsed().as_secs_f64()
        );
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
        2_000,
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
    run(
        "parse_message_mutated",
        2_000,
        strategy,
        |(i, muts, ctx)| {
            let bytes = apply(seeds[i].clone(), &muts);
            if let Err(e) = parse_message(&bytes, ctx) {
                prop_assert!(e.offset <= bytes.len());
            }
            Ok(())
        },
    );
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
    run("decoder_feed", 2_000, strategy, |(c, at, muts)| {
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
        2_000,
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
    run("arrow_tables", 2_000, strategy, |(c, at, muts)| {
        let cap = &captures[c];
        let mut sink = ArrowSink::new(cap.binary);
        feed_mutated(cap, at, &muts, &mut sink)?;
        // Whatever was accepted must make valid Arrow.
        let taken = sink.take();
        prop_assert!(taken.is_ok(), "{:?}", taken.err());
        Ok(())
    });
}

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
    let binary = matches!(datum, Datum::Binary(_));
    let mut general = ColumnBuilder::new(oid, typmod);
    let result = general.append(datum, binary);
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
    match (&general, &fast) {
        (Ok(g), Ok(f)) => prop_assert!(
            g.to_data() == f.to_data(),
            "in-place path, type {oid} ({typmod}): {g:?} != {f:?}"
        ),
        _ => prop_assert_eq!(general.is_ok(), fast.is_ok()),
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
    prop_assert_eq!(direct.as_ref().map_or(0, |a| a.len()), 1);
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

#[test]
fn fuzz_parse_lsn() {
    run("parse_lsn", 2_000, "\\PC{0,24}", |s| {
        if let Ok(v) = pgwire_cdc::lsn::parse_lsn(&s) {
            prop_assert_eq!(
                pgwire_cdc::lsn::parse_lsn(&pgwire_cdc::lsn::format_lsn(v)),
                Ok(v)
            );
        }
        Ok(())
    });
}

/// What a walk through a capture meets: a new version of a relation (its first
/// description or a changed one), or an insert into the version in force.
enum Walk<'w, 'm> {
    Relation(&'w Arc<Relation>),
    Insert(&'w Arc<Relation>, &'w [Datum<'m>]),
}

/// Parses a capture's messages in order (streamed blocks included), tracking its relations.
fn walk_capture(cap: &common::Capture, mut visit: impl FnMut(Walk<'_, '_>)) {
    let mut types = HashMap::new();
    let mut relations: HashMap<u32, Arc<Relation>> = HashMap::new();
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
                    visit(Walk::Relation(&rel));
                    relations.insert(r.oid, rel);
                }
            }
            Ok(Message::Insert(ins)) => {
                if let Some(rel) = relations.get(&ins.relation) {
                    visit(Walk::Insert(rel, &ins.new));
                }
            }
            _ => {}
        }
    }
}

/// One COPY BINARY stream per relation version of each capture, its tuples made of the
/// capture's inserts (the values exactly as the server wrote them).
fn copy_seeds() -> Vec<(Arc<Relation>, Vec<u8>)> {
    let mut out: Vec<(Arc<Relation>, Vec<u8>)> = Vec::new();
    for cap in common::captures() {
        walk_capture(&cap, |step| match step {
            Walk::Relation(rel) => out.push((Arc::clone(rel), [&SIGNATURE[..], &[0; 8]].concat())),
            Walk::Insert(rel, new) => {
                let Some((_, stream)) = out.iter_mut().rev().find(|(r, _)| Arc::ptr_eq(r, rel))
                else {
                    return;
                };
                stream.extend((new.len() as i16).to_be_bytes());
                for d in new {
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
        });
    }
    for (_, stream) in &mut out {
        stream.extend((-1i16).to_be_bytes());
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
    run("copy_binary", 2_000, strategy, |(i, muts, cuts)| {
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

// ---------------------------------------------------------------------------------------
// The PostgreSQL client: backend messages, framing, the replication stream, the login,
// connection strings and the password file (`pgwire_cdc::pg::fuzzing` opens the
// crate-private parsers to these targets).
// ---------------------------------------------------------------------------------------

fn cstrs(parts: &[&str]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.bytes().chain([0])).collect()
}

fn framed(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend((body.len() as i32 + 4).to_be_bytes());
    out.extend(body);
    out
}

fn xlogdata(start: u64, end: u64, clock: i64, data: &[u8]) -> Vec<u8> {
    let mut out = vec![b'w'];
    out.extend(start.to_be_bytes());
    out.extend(end.to_be_bytes());
    out.extend(clock.to_be_bytes());
    out.extend(data);
    out
}

fn keepalive(end: u64, clock: i64, reply: bool) -> Vec<u8> {
    let mut out = vec![b'k'];
    out.extend(end.to_be_bytes());
    out.extend(clock.to_be_bytes());
    out.push(u8::from(reply));
    out
}

fn data_row_body<S: AsRef<[u8]>>(row: &[Option<S>]) -> Vec<u8> {
    let mut out = (row.len() as i16).to_be_bytes().to_vec();
    for value in row {
        match value {
            None => out.extend((-1i32).to_be_bytes()),
            Some(v) => {
                out.extend((v.as_ref().len() as i32).to_be_bytes());
                out.extend(v.as_ref());
            }
        }
    }
    out
}

fn row_description(names: &[&str]) -> Vec<u8> {
    let mut out = (names.len() as i16).to_be_bytes().to_vec();
    for name in names {
        out.extend(cstrs(&[name]));
        out.extend(0i32.to_be_bytes()); // table
        out.extend(0i16.to_be_bytes()); // column number
        out.extend(25i32.to_be_bytes()); // type: text
        out.extend((-1i16).to_be_bytes()); // type length
        out.extend((-1i32).to_be_bytes()); // type modifier
        out.extend(0i16.to_be_bytes()); // text format
    }
    out
}

fn error_body(fields: &[(u8, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (code, value) in fields {
        out.push(*code);
        out.extend(cstrs(&[value]));
    }
    out.push(0);
    out
}

fn auth_request(code: i32, data: &[u8]) -> Vec<u8> {
    let mut out = code.to_be_bytes().to_vec();
    out.extend(data);
    out
}

const SERVER_ERROR: &[(u8, &str)] = &[
    (b'S', "ERROR"),
    (b'V', "ERROR"),
    (b'C', "42704"),
    (b'M', "replication slot \"s\" does not exist"),
    (b'D', "Key (id)=(1) already exists."),
    (b'H', "Create it with CREATE_REPLICATION_SLOT."),
    (b'F', "slot.c"),
    (b'L', "512"),
    (b'R', "ReplicationSlotAcquire"),
];

const LOGIN_REFUSED: &[(u8, &str)] = &[
    (b'S', "FATAL"),
    (b'V', "FATAL"),
    (b'C', "28P01"),
    (b'M', "password authentication failed for user \"app\""),
];

/// Backend messages as PostgreSQL 15-18 send them to this client (start-up, simple
/// queries, COPY, replication), and the pgoutput messages of the captures as XLogData.
fn backend_seeds() -> Vec<(u8, Vec<u8>)> {
    let mut seeds = vec![
        (b'R', auth_request(0, b"")),
        (
            b'S',
            cstrs(&["server_version", "15.4 (Debian 15.4-1.pgdg120+1)"]),
        ),
        (b'S', cstrs(&["server_version", "18beta1"])),
        (b'S', cstrs(&["client_encoding", "UTF8"])),
        (b'S', cstrs(&["DateStyle", "ISO, MDY"])),
        (b'S', cstrs(&["integer_datetimes", "on"])),
        (b'S', cstrs(&["TimeZone", "Etc/UTC"])),
        (b'S', cstrs(&["application_name", ""])),
        (b'K', [&4711i32.to_be_bytes()[..], &[1, 2, 3, 4]].concat()),
        (b'K', [&4711i32.to_be_bytes()[..], &[7; 32]].concat()),
        (b'Z', b"I".to_vec()),
        (b'Z', b"T".to_vec()),
        (b'Z', b"E".to_vec()),
        (
            b'T',
            row_description(&["systemid", "timeline", "xlogpos", "dbname"]),
        ),
        (
            b'D',
            data_row_body(&[
                Some("7294052135412345678"),
                Some("1"),
                Some("0/16B3748"),
                Some("postgres"),
            ]),
        ),
        (
            b'D',
            data_row_body(&[Some("s"), Some("0/1A2B3C8"), None, Some("pgoutput")]),
        ),
        (b'D', data_row_body::<&str>(&[])),
        (b'C', cstrs(&["IDENTIFY_SYSTEM"])),
        (b'C', cstrs(&["COPY 42"])),
        (b'C', cstrs(&["INSERT 0 5"])),
        (b'C', cstrs(&["SELECT 1"])),
        (b'C', cstrs(&["CREATE_REPLICATION_SLOT"])),
        (b'E', error_body(SERVER_ERROR)),
        (b'E', error_body(LOGIN_REFUSED)),
        (
            b'N',
            error_body(&[
                (b'S', "WARNUNG"),
                (b'V', "WARNING"),
                (b'C', "01000"),
                (b'M', "wal_level is insufficient"),
            ]),
        ),
        (b'W', vec![0, 0, 0]),
        (b'H', vec![1, 0, 2, 0, 1, 0, 1]),
        (b'G', vec![0, 0, 1, 0, 0]),
        (b'd', [&SIGNATURE[..], &[0; 8]].concat()),
        (b'd', keepalive(0x016B_3748, 742_000_000_000, false)),
        (b'd', keepalive(0x016B_3748, 742_000_000_000, true)),
        (b'c', Vec::new()),
        (b'I', Vec::new()),
        (
            b'A',
            [&4711i32.to_be_bytes()[..], &cstrs(&["channel", "payload"])].concat(),
        ),
        (
            b'v',
            [
                &0i32.to_be_bytes()[..],
                &1i32.to_be_bytes(),
                &cstrs(&["_pq_.x"]),
            ]
            .concat(),
        ),
    ];
    // A sample of the captures' messages, as the XLogData that carries them.
    let messages = seed_messages();
    let step = (messages.len() / 64).max(1);
    for (i, m) in messages.iter().step_by(step).enumerate() {
        let lsn = 0x1_0000_0000 + i as u64 * 0x100;
        seeds.push((b'd', xlogdata(lsn, lsn + 0x80, 742_000_000_000, m)));
    }
    seeds
}

fn socket_pair() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap()
}

/// How a byte stream splits into backend messages, as the protocol defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// Nothing left over.
    Clean,
    /// An incomplete message at the end.
    Partial,
    /// A length below 4 or above 1 GiB, which the client refuses.
    BadLength,
}

fn reference_frames(stream: &[u8]) -> (Vec<(u8, Vec<u8>)>, Tail) {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            return (out, Tail::Clean);
        }
        if rest.len() < 5 {
            return (out, Tail::Partial);
        }
        let len = i32::from_be_bytes(rest[1..5].try_into().unwrap());
        if !(4..=1 << 30).contains(&len) {
            return (out, Tail::BadLength);
        }
        let total = len as usize + 1;
        if rest.len() < total {
            return (out, Tail::Partial);
        }
        out.push((rest[0], rest[5..total].to_vec()));
        rest = &rest[total..];
    }
}

/// A client error must be one that says what went wrong, never a stalled read.
fn check_pg_error(e: &PgError) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(!text.contains("timed out"), "stalled: {text}");
    Ok(())
}

/// Seed messages (each body mutated or not), framed; then the whole stream mutated.
fn message_stream(
    seeds: &[(u8, Vec<u8>)],
    picks: &[(usize, Option<Vec<Mutation>>)],
    stream_muts: Option<&[Mutation]>,
) -> Vec<u8> {
    let mut stream = Vec::new();
    for (i, muts) in picks {
        let (tag, body) = &seeds[*i];
        let body = match muts {
            Some(m) => apply(body.clone(), m),
            None => body.clone(),
        };
        stream.extend(framed(*tag, &body));
    }
    match stream_muts {
        Some(m) => apply(stream, m),
        None => stream,
    }
}

#[test]
fn fuzz_backend_frames() {
    let seeds = backend_seeds();
    let strategy = (
        proptest::collection::vec((0..seeds.len(), proptest::option::of(mutations())), 0..24),
        proptest::option::of(mutations()),
        proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    );
    run(
        "backend_frames",
        1_000,
        strategy,
        |(picks, stream_muts, cuts)| {
            let stream = message_stream(&seeds, &picks, stream_muts.as_deref());
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            points.sort_unstable();

            // Each piece is written, then everything complete so far is read without waiting;
            // at the end the peer closes and the rest is read.
            let (ours, mut peer) = socket_pair();
            let mut frames = fuzzing::Frames::new(ours).unwrap();
            let mut got = Vec::new();
            let mut error = None;
            let mut start = 0;
            'pieces: for p in points.into_iter().chain([stream.len()]) {
                peer.write_all(&stream[start..p]).unwrap();
                start = p;
                loop {
                    match frames.poll() {
                        Ok(Some((tag, body))) => got.push((tag, body.to_vec())),
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(e);
                            break 'pieces;
                        }
                    }
                }
            }
            peer.shutdown(Shutdown::Write).unwrap();
            let error = match error {
                Some(e) => e,
                None => loop {
                    match frames.wait() {
                        Ok((tag, body)) => got.push((tag, body.to_vec())),
                        Err(e) => break e,
                    }
                },
            };
            let (expected, tail) = reference_frames(&stream);
            prop_assert_eq!(got, expected);
            match tail {
                Tail::BadLength => prop_assert!(matches!(error, PgError::Protocol(_)), "{error:?}"),
                Tail::Clean | Tail::Partial => {
                    prop_assert!(matches!(error, PgError::Connect { .. }), "{error:?}");
                    prop_assert!(error.to_string().contains("closed"), "{error}");
                }
            }
            Ok(())
        },
    );
}

/// Every body parser on one body; whatever parses must encode back to what was read.
fn check_backend_body(body: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(e) = fuzzing::error_fields(body) {
        let mut fields = Vec::new();
        for (code, value) in [
            (b'V', Some(&e.severity)),
            (b'C', Some(&e.sqlstate)),
            (b'M', Some(&e.message)),
            (b'D', e.detail.as_ref()),
            (b'H', e.hint.as_ref()),
        ] {
            if let Some(v) = value {
                fields.push((code, v.as_str()));
            }
        }
        let again = fuzzing::error_fields(&error_body(&fields)).unwrap();
        prop_assert_eq!(&again, &e);
        // DETAIL can hold row values: never displayed.
        let display = PgError::Server(Box::new(ServerError {
            detail: None,
            ..e.clone()
        }))
        .to_string();
        prop_assert_eq!(PgError::Server(Box::new(e)).to_string(), display);
    }
    if let Ok((name, value)) = fuzzing::parameter_status(body) {
        let encoded = cstrs(&[&name, &value]);
        if std::str::from_utf8(body).is_ok() {
            prop_assert_eq!(&encoded[..], body);
        }
        prop_assert_eq!(fuzzing::parameter_status(&encoded).unwrap(), (name, value));
    }
    if let Ok(tag) = fuzzing::command_tag(body) {
        if std::str::from_utf8(body).is_ok() {
            prop_assert_eq!(&cstrs(&[&tag])[..], body);
        }
        if let Some(n) = fuzzing::tag_row_count(&tag) {
            prop_assert!(tag.trim_end_matches(|c: char| c.is_ascii_digit()).len() < tag.len());
            prop_assert!(n.to_string().len() <= tag.len());
        }
    }
    if let Ok(row) = fuzzing::data_row(body) {
        prop_assert_eq!(&data_row_body(&row)[..], body);
    }
    if let Ok((pid, key)) = fuzzing::backend_key_data(body) {
        prop_assert_eq!(&[&pid.to_be_bytes()[..], &key].concat()[..], body);
    }
    if let Ok(status) = fuzzing::ready_for_query(body) {
        prop_assert_eq!(&[status][..], body);
    }
    match fuzzing::replication_message(body) {
        Ok(ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            server_clock,
            data,
        }) => {
            prop_assert_eq!(&xlogdata(wal_start, wal_end, server_clock, data)[..], body);
        }
        Ok(ReplicationMessage::Keepalive {
            wal_end,
            server_clock,
            reply_requested,
        }) => {
            prop_assert_eq!(body.len(), 18);
            prop_assert_eq!(
                &keepalive(wal_end, server_clock, reply_requested)[..17],
                &body[..17]
            );
            prop_assert_eq!(reply_requested, body[17] != 0);
        }
        Err(e) => check_pg_error(&e)?,
    }
    if let Ok(names) = fuzzing::sasl_mechanisms(body) {
        prop_assert!(names.iter().all(|n| !n.is_empty()));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let encoded = [cstrs(&refs), vec![0]].concat();
        prop_assert_eq!(fuzzing::sasl_mechanisms(&encoded).unwrap(), names);
    }
    Ok(())
}

/// `server_version` as the client reads it, computed without overflow.
fn expected_version_num(text: &str) -> Option<u64> {
    let version = text.split_whitespace().next()?;
    let mut numbers = version.split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok().map(u64::from)
    });
    let major = numbers.next()??;
    let second = numbers.next().flatten().unwrap_or(0);
    if major >= 10 {
        Some(major * 10_000 + second)
    } else {
        let third = numbers.next().flatten().unwrap_or(0);
        Some(major * 10_000 + second * 100 + third)
    }
}

#[test]
fn fuzz_backend_messages() {
    let seeds = backend_seeds();
    let body = prop_oneof![
        (0..seeds.len(), proptest::option::weighted(0.8, mutations())).prop_map(move |(i, m)| {
            match m {
                Some(m) => apply(seeds[i].1.clone(), &m),
                None => seeds[i].1.clone(),
            }
        }),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    let version = prop_oneof![
        (9u32..=99, 0u32..=99, 0u32..=99).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
        (10u32..=99, 0u32..=9).prop_map(|(a, b)| format!("{a}.{b} (Debian {a}.{b}-1.pgdg120+1)")),
        (10u32..=99).prop_map(|a| format!("{a}beta2")),
        "[0-9]{0,12}(\\.[0-9]{0,12}){0,3}[a-z0-9 ()+.-]{0,8}",
        "\\PC{0,16}",
    ];
    run(
        "backend_messages",
        2_000,
        (body, version),
        |(body, version)| {
            check_backend_body(&body)?;
            let num = fuzzing::server_version_num(&version);
            if let Some(n) = num {
                prop_assert_eq!(Some(u64::from(n)), expected_version_num(&version));
            } else if let Some(expected) = expected_version_num(&version) {
                // Only a number too large for server_version_num may be refused.
                prop_assert!(expected > u64::from(u32::MAX), "{version:?}: {expected}");
            }
            Ok(())
        },
    );
}

/// The captures as the replication stream carries them: each message in an XLogData, a
/// keepalive every few messages; one CopyData mutated. Parsed as the session parses them
/// and the XLogData payloads fed to the decoder.
#[test]
fn fuzz_replication_copy_data() {
    let captures = common::captures();
    let strategy = (
        0..captures.len(),
        any::<usize>(),
        mutations(),
        1usize..8,
        any::<u64>(),
    );
    run(
        "replication_copy_data",
        2_000,
        strategy,
        |(c, at, muts, every, base)| {
            let cap = &captures[c];
            let mut bodies = Vec::new();
            for (i, (lsn, bytes)) in cap.messages.iter().enumerate() {
                let clock = 742_000_000_000 + i as i64;
                bodies.push(xlogdata(*lsn, lsn.wrapping_add(base % 4096), clock, bytes));
                if i % every == 0 {
                    bodies.push(keepalive(*lsn, clock, i % (2 * every) == 0));
                }
            }
            let target = at % bodies.len();
            bodies[target] = apply(bodies[target].clone(), &muts);
            let mut dec = Decoder::new(DecoderConfig {
                proto_version: cap.proto_version,
                binary: cap.binary,
            });
            let mut sink = NullSink::default();
            for body in &bodies {
                check_backend_body(body)?;
                match fuzzing::replication_message(body) {
                    Ok(ReplicationMessage::XLogData {
                        wal_start, data, ..
                    }) => {
                        prop_assert_eq!(data, &body[25..]);
                        if let Err(e) = dec.feed(data, wal_start, &mut sink) {
                            prop_assert!(e.offset <= data.len());
                        }
                    }
                    Ok(ReplicationMessage::Keepalive { .. }) => prop_assert_eq!(body.len(), 18),
                    Err(e) => {
                        check_pg_error(&e)?;
                        prop_assert!(!matches!(body.first(), Some(b'w')) || body.len() < 25);
                    }
                }
            }
            Ok(())
        },
    );
}

/// What the server says after the start-up, in one client session.
#[derive(Debug, Clone)]
enum Session {
    /// A simple query: its rows, or an ErrorResponse.
    Query {
        rows: Vec<Vec<Option<String>>>,
        fails: bool,
    },
    /// `COPY ... TO STDOUT`: its CopyData payloads.
    Copy { chunks: Vec<Vec<u8>> },
    /// START_REPLICATION, then XLogData (a capture message each) and keepalives, then
    /// CopyDone.
    Replication { messages: Vec<Repl> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repl {
    XLogData {
        start: u64,
        end: u64,
        clock: i64,
        data: Vec<u8>,
    },
    Keepalive {
        end: u64,
        clock: i64,
        reply: bool,
    },
}

impl Repl {
    fn of(m: ReplicationMessage<'_>) -> Self {
        match m {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_clock,
                data,
            } => Repl::XLogData {
                start: wal_start,
                end: wal_end,
                clock: server_clock,
                data: data.to_vec(),
            },
            ReplicationMessage::Keepalive {
                wal_end,
                server_clock,
                reply_requested,
            } => Repl::Keepalive {
                end: wal_end,
                clock: server_clock,
                reply: reply_requested,
            },
        }
    }

    fn body(&self) -> Vec<u8> {
        match self {
            Repl::XLogData {
                start,
                end,
                clock,
                data,
            } => xlogdata(*start, *end, *clock, data),
            Repl::Keepalive { end, clock, reply } => keepalive(*end, *clock, *reply),
        }
    }
}

/// A change to the server's script: one message's body or tag, a message left out, or
/// the bytes of the whole stream.
#[derive(Debug, Clone)]
enum ScriptMutation {
    Body { at: usize, muts: Vec<Mutation> },
    Tag { at: usize, tag: u8 },
    Drop { at: usize },
    Stream(Vec<Mutation>),
}

fn script_mutations() -> impl Strategy<Value = ScriptMutation> {
    let tags = prop_oneof![
        prop::sample::select(b"RSKZTDCENWHGdcIAv".to_vec()),
        any::<u8>()
    ];
    prop_oneof![
        (any::<usize>(), mutations()).prop_map(|(at, muts)| ScriptMutation::Body { at, muts }),
        (any::<usize>(), tags).prop_map(|(at, tag)| ScriptMutation::Tag { at, tag }),
        any::<usize>().prop_map(|at| ScriptMutation::Drop { at }),
        mutations().prop_map(ScriptMutation::Stream),
    ]
}

/// The script's bytes: each message framed, with the mutation applied.
fn script_bytes(mut script: Vec<(u8, Vec<u8>)>, mutation: Option<&ScriptMutation>) -> Vec<u8> {
    let n = script.len().max(1);
    match mutation {
        Some(ScriptMutation::Body { at, muts }) => {
            if let Some((_, body)) = script.get_mut(at % n) {
                *body = apply(std::mem::take(body), muts);
            }
        }
        Some(ScriptMutation::Tag { at, tag }) => {
            if let Some((t, _)) = script.get_mut(at % n) {
                *t = *tag;
            }
        }
        Some(ScriptMutation::Drop { at }) => {
            if at % n < script.len() {
                script.remove(at % n);
            }
        }
        Some(ScriptMutation::Stream(_)) | None => {}
    }
    let bytes: Vec<u8> = script.iter().flat_map(|(t, b)| framed(*t, b)).collect();
    match mutation {
        Some(ScriptMutation::Stream(muts)) => apply(bytes, muts),
        _ => bytes,
    }
}

fn sessions(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Session> {
    let row = proptest::collection::vec(proptest::option::of("\\PC{0,12}"), 0..5);
    let repl = prop_oneof![
        (any::<u64>(), 0u64..4096, any::<i64>(), 0..seeds.len()).prop_map(
            move |(start, len, clock, i)| Repl::XLogData {
                start,
                end: start.wrapping_add(len),
                clock,
                data: seeds[i].clone(),
            }
        ),
        (any::<u64>(), any::<i64>(), any::<bool>())
            .prop_map(|(end, clock, reply)| Repl::Keepalive { end, clock, reply }),
    ];
    prop_oneof![
        (proptest::collection::vec(row, 0..6), any::<bool>())
            .prop_map(|(rows, fails)| Session::Query { rows, fails }),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)
            .prop_map(|chunks| Session::Copy { chunks }),
        proptest::collection::vec(repl, 0..12)
            .prop_map(|messages| Session::Replication { messages }),
    ]
}

#[test]
fn fuzz_client_session() {
    let strategy = (
        (9u32..=30, 0u32..=30, 0u32..=30),
        any::<i32>(),
        sessions(Arc::new(seed_messages())),
        proptest::option::of(script_mutations()),
    );
    run(
        "client_session",
        500,
        strategy,
        |((major, minor, patch), pid, session, mutation)| {
            let (version, version_num) = if major >= 10 {
                (
                    format!("{major}.{minor} (Debian {major}.{minor}-1.pgdg120+1)"),
                    major * 10_000 + minor,
                )
            } else {
                (
                    format!("{major}.{minor}.{patch}"),
                    major * 10_000 + minor * 100 + patch,
                )
            };
            let mut script = vec![
                (b'S', cstrs(&["server_version", &version])),
                (b'S', cstrs(&["client_encoding", "UTF8"])),
                (b'N', error_body(&[(b'V', "NOTICE"), (b'M', "hello")])),
                (b'K', [&pid.to_be_bytes()[..], &[1, 2, 3, 4]].concat()),
                (b'S', cstrs(&["TimeZone", "UTC"])),
                (b'Z', b"I".to_vec()),
            ];
            match &session {
                Session::Query { rows, fails: true } => {
                    script.push((b'T', row_description(&["a"])));
                    script.extend(rows.iter().map(|r| (b'D', data_row_body(r))));
                    script.push((b'E', error_body(SERVER_ERROR)));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Query { rows, fails: false } => {
                    script.push((b'T', row_description(&["a", "b"])));
                    script.extend(rows.iter().map(|r| (b'D', data_row_body(r))));
                    script.push((b'S', cstrs(&["TimeZone", "Europe/Berlin"])));
                    script.push((b'C', cstrs(&[&format!("SELECT {}", rows.len())])));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Copy { chunks } => {
                    script.push((b'H', vec![1, 0, 1, 0, 1]));
                    script.extend(chunks.iter().map(|c| (b'd', c.clone())));
                    script.push((b'c', Vec::new()));
                    script.push((b'C', cstrs(&[&format!("COPY {}", chunks.len())])));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Replication { messages } => {
                    script.push((b'W', vec![0, 0, 0]));
                    script.extend(messages.iter().map(|m| (b'd', m.body())));
                    script.push((b'c', Vec::new()));
                }
            }
            let mutated = mutation.is_some();
            let (ours, mut peer) = socket_pair();
            peer.write_all(&script_bytes(script, mutation.as_ref()))
                .unwrap();
            peer.shutdown(Shutdown::Write).unwrap();

            let mut conn = match fuzzing::connection(ours) {
                Ok(conn) => conn,
                Err(e) => {
                    check_pg_error(&e)?;
                    prop_assert!(mutated, "{e}");
                    return Ok(());
                }
            };
            if !mutated {
                prop_assert_eq!(conn.server_version_num(), version_num);
                prop_assert_eq!(conn.backend_pid(), pid as u32);
                prop_assert_eq!(conn.parameter("TimeZone"), Some("UTC"));
            }
            match session {
                Session::Query { rows, fails } => match conn.simple_query("SELECT a, b FROM t") {
                    Ok(got) => {
                        if !mutated {
                            prop_assert!(!fails);
                            prop_assert_eq!(got, rows);
                            prop_assert_eq!(conn.parameter("TimeZone"), Some("Europe/Berlin"));
                        }
                    }
                    Err(e) => {
                        check_pg_error(&e)?;
                        if !mutated {
                            prop_assert!(fails, "{e}");
                            prop_assert_eq!(e.sqlstate(), Some("42704"));
                        }
                    }
                },
                Session::Copy { chunks } => {
                    let mut got = Vec::new();
                    let count = conn.copy_out("COPY t TO STDOUT", &mut |data| {
                        got.push(data.to_vec());
                        Ok(())
                    });
                    if let Err(e) = &count {
                        check_pg_error(e)?;
                    }
                    if !mutated {
                        prop_assert_eq!(count.ok(), Some(chunks.len() as u64));
                        prop_assert_eq!(got, chunks);
                    }
                }
                Session::Replication { messages } => {
                    let mut stream = match conn.start_logical_replication(
                        "slot",
                        0x016B_3748,
                        &[("proto_version", "4".to_owned())],
                    ) {
                        Ok(stream) => stream,
                        Err(e) => {
                            check_pg_error(&e)?;
                            prop_assert!(mutated, "{e}");
                            return Ok(());
                        }
                    };
                    let mut got = Vec::new();
                    let end = loop {
                        match stream.recv(Duration::from_secs(30)) {
                            Ok(Some(m)) => {
                                let reply = matches!(
                                    m,
                                    ReplicationMessage::Keepalive {
                                        reply_requested: true,
                                        ..
                                    }
                                );
                                got.push(Repl::of(m));
                                if reply {
                                    stream.send_status(1, 1, 1, false).unwrap();
                                }
                            }
                            Ok(None) => return Err(TestCaseError::fail("the stream stalled")),
                            Err(e) => break e,
                        }
                    };
                    check_pg_error(&end)?;
                    prop_assert!(stream.recv(Duration::ZERO).is_err());
                    if !mutated {
                        prop_assert_eq!(got, messages);
                        prop_assert!(end.to_string().contains("ended"), "{end}");
                    }
                }
            }
            Ok(())
        },
    );
}

/// The mechanism names of an AuthenticationSASL body, read independently of the client.
fn mechanism_names(data: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut rest = data;
    loop {
        let nul = rest.iter().position(|&b| b == 0)?;
        let name = rest[..nul].to_vec();
        rest = &rest[nul + 1..];
        if name.is_empty() {
            return rest.is_empty().then_some(names);
        }
        names.push(name);
    }
}

/// Whether the login must succeed against a server that only replays `stream` (without
/// TLS, and without ever seeing the client's nonce, so SCRAM cannot complete).
fn scripted_login_succeeds(
    stream: &[u8],
    password: bool,
    channel_binding: ChannelBindingMode,
) -> bool {
    if channel_binding == ChannelBindingMode::Require {
        return false;
    }
    let mut sasl = false;
    for (tag, body) in reference_frames(stream).0 {
        match tag {
            b'R' => {}
            b'N' => continue,
            _ => return false,
        }
        if body.len() < 4 {
            return false;
        }
        let code = i32::from_be_bytes(body[..4].try_into().unwrap());
        let data = &body[4..];
        match code {
            0 => return !sasl,
            3 if password => {}
            5 if password && data.len() == 4 => {}
            10 if !sasl && password => {
                let scram = b"SCRAM-SHA-256".to_vec();
                match mechanism_names(data) {
                    Some(names) if names.contains(&scram) => sasl = true,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

fn auth_seeds() -> Vec<(u8, Vec<u8>)> {
    vec![
        (b'R', auth_request(0, b"")),
        (b'R', auth_request(3, b"")),
        (b'R', auth_request(5, &[0x9c, 0x1f, 0x00, 0x7e])),
        (b'R', auth_request(10, &cstrs(&["SCRAM-SHA-256", ""]))),
        (
            b'R',
            auth_request(10, &cstrs(&["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256", ""])),
        ),
        (b'R', auth_request(10, &cstrs(&["SCRAM-SHA-256-PLUS", ""]))),
        (
            b'R',
            auth_request(
                11,
                b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            ),
        ),
        (
            b'R',
            auth_request(12, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        ),
        (b'R', auth_request(7, b"")),
        (b'R', auth_request(9, b"")),
        (b'R', auth_request(2, b"")),
        (b'E', error_body(LOGIN_REFUSED)),
        (
            b'E',
            error_body(&[(b'V', "FATAL"), (b'C', "53300"), (b'M', "too many clients")]),
        ),
        (b'N', error_body(&[(b'V', "NOTICE"), (b'M', "hello")])),
        (b'S', cstrs(&["server_version", "16.2"])),
        (b'Z', b"I".to_vec()),
    ]
}

fn channel_bindings() -> impl Strategy<Value = ChannelBindingMode> {
    prop_oneof![
        Just(ChannelBindingMode::Prefer),
        Just(ChannelBindingMode::Disable),
        Just(ChannelBindingMode::Require),
    ]
}

/// The login against a server that replays (mutated) authentication requests, checked
/// against `scripted_login_succeeds`.
#[test]
fn fuzz_auth_messages() {
    let seeds = auth_seeds();
    let strategy = (
        proptest::collection::vec((0..seeds.len(), proptest::option::of(mutations())), 1..6),
        proptest::option::of(mutations()),
        proptest::option::of(prop_oneof![Just("s3cr3t"), Just("pä$$ wörd"), Just("")]),
        channel_bindings(),
    );
    run(
        "auth_messages",
        1_000,
        strategy,
        |(picks, stream_muts, password, channel_binding)| {
            let stream = message_stream(&seeds, &picks, stream_muts.as_deref());
            let (ours, mut peer) = socket_pair();
            peer.write_all(&stream).unwrap();
            peer.shutdown(Shutdown::Write).unwrap();
            let result = fuzzing::authenticate(ours, "app", password, channel_binding);
            if let Err(e) = &result {
                check_pg_error(e)?;
            }
            prop_assert_eq!(
                result.is_ok(),
                scripted_login_succeeds(&stream, password.is_some(), channel_binding),
                "{:?}",
                result
            );
            Ok(())
        },
    );
}

// A SCRAM-SHA-256 server (RFC 5802, RFC 7677), written from the RFC for the `scram` target.

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::{KeyInit, Mac};
    let mut mac = HmacSha256::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

/// PBKDF2-HMAC-SHA-256 of one block: SCRAM's `Hi()`.
fn scram_hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut u = hmac_sha256(password, &[salt, &[0, 0, 0, 1]].concat());
    let mut out = u;
    for _ in 1..iterations {
        u = hmac_sha256(password, &u);
        for (o, b) in out.iter_mut().zip(u) {
            *o ^= b;
        }
    }
    out
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn b64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// One frontend message: tag and body.
fn read_frontend(socket: &mut UnixStream) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    socket.read_exact(&mut header).ok()?;
    let len = usize::try_from(i32::from_be_bytes(header[1..].try_into().unwrap())).ok()?;
    let mut body = vec![0; len.checked_sub(4)?];
    socket.read_exact(&mut body).ok()?;
    Some((header[0], body))
}

#[derive(Debug, Clone)]
struct ScramCase {
    /// The password the server's verifier was made from.
    stored: &'static str,
    /// The password the client logs in with.
    given: &'static str,
    salt: Vec<u8>,
    iterations: u32,
    server_nonce: String,
    plus_offered: bool,
    channel_binding: ChannelBindingMode,
    /// Changes to the server-first and server-final messages.
    first: Option<Vec<Mutation>>,
    last: Option<Vec<Mutation>>,
    /// The server skips SASLFinal and says AuthenticationOk at once.
    skip_final: bool,
}

/// What the server saw: whether the client's proof checked out, and whether the server's
/// messages went out unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScramVerdict {
    proof_valid: bool,
    unchanged: bool,
}

/// Plays the server's side (`None`: the client gave up before sending its proof).
fn scram_server(mut socket: UnixStream, case: &ScramCase) -> Option<ScramVerdict> {
    socket
        .set_read_timeout(Some(fuzzing::SOCKET_TIMEOUT))
        .unwrap();
    let send = |socket: &mut UnixStream, tag: u8, body: &[u8]| {
        // The client may have given up already.
        let _ = socket.write_all(&framed(tag, body));
    };
    let mechanisms = if case.plus_offered {
        cstrs(&["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256", ""])
    } else {
        cstrs(&["SCRAM-SHA-256", ""])
    };
    send(&mut socket, b'R', &auth_request(10, &mechanisms));

    // SASLInitialResponse: mechanism, length, client-first-message.
    let (tag, body) = read_frontend(&mut socket)?;
    assert_eq!(tag, b'p');
    let nul = body.iter().position(|&b| b == 0).unwrap();
    assert_eq!(&body[..nul], b"SCRAM-SHA-256");
    let client_first = std::str::from_utf8(&body[nul + 5..]).unwrap().to_owned();
    let bare = client_first.strip_prefix("n,,").unwrap();
    let client_nonce = bare.strip_prefix("n=,r=").unwrap();
    let nonce = format!("{client_nonce}{}", case.server_nonce);
    let server_first = format!("r={nonce},s={},i={}", b64(&case.salt), case.iterations);
    let first = match &case.first {
        Some(m) => apply(server_first.clone().into_bytes(), m),
        None => server_first.clone().into_bytes(),
    };
    send(&mut socket, b'R', &auth_request(11, &first));

    // SASLResponse: client-final-message.
    let (tag, body) = read_frontend(&mut socket)?;
    assert_eq!(tag, b'p');
    let client_final = String::from_utf8(body).unwrap();
    let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap();
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let salted = scram_hi(case.stored.as_bytes(), &case.salt, case.iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let stored_key = sha256(&client_key);
    let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
    let proof = b64_decode(proof).unwrap_or_default();
    let recovered: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
    let valid = without_proof == format!("c=biws,r={nonce}")
        && recovered.len() == 32
        && sha256(&recovered) == stored_key;
    if !valid {
        send(&mut socket, b'E', &error_body(LOGIN_REFUSED));
        return Some(ScramVerdict {
            proof_valid: false,
            unchanged: first == server_first.as_bytes(),
        });
    }
    let server_key = hmac_sha256(&salted, b"Server Key");
    let server_final = format!(
        "v={}",
        b64(&hmac_sha256(&server_key, auth_message.as_bytes()))
    );
    let last = match &case.last {
        Some(m) => apply(server_final.clone().into_bytes(), m),
        None => server_final.clone().into_bytes(),
    };
    if !case.skip_final {
        send(&mut socket, b'R', &auth_request(12, &last));
    }
    send(&mut socket, b'R', &auth_request(0, b""));
    Some(ScramVerdict {
        proof_valid: true,
        unchanged: first == server_first.as_bytes() && last == server_final.as_bytes(),
    })
}

#[test]
fn fuzz_scram() {
    let passwords = || prop::sample::select(vec!["s3cr3t", "correct horse battery staple", "x"]);
    let case = (
        (passwords(), passwords()),
        proptest::collection::vec(any::<u8>(), 1..24),
        prop_oneof![9 => 1u32..64, 1 => Just(4096u32)],
        "[!-+\\--~]{0,24}",
        (any::<bool>(), channel_bindings()),
        (
            proptest::option::weighted(0.3, mutations()),
            proptest::option::weighted(0.3, mutations()),
            proptest::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |((stored, given), salt, iterations, server_nonce, (plus, cb), (first, last, skip))| {
                ScramCase {
                    stored,
                    given,
                    salt,
                    iterations,
                    server_nonce,
                    plus_offered: plus,
                    channel_binding: cb,
                    first,
                    last,
                    skip_final: skip,
                }
            },
        );
    run("scram", 300, case, |case| {
        let (ours, theirs) = socket_pair();
        let server = {
            let case = case.clone();
            std::thread::spawn(move || scram_server(theirs, &case))
        };
        let result = fuzzing::authenticate(ours, "app", Some(case.given), case.channel_binding);
        let verdict = server
            .join()
            .map_err(|_| TestCaseError::fail("the server panicked"))?;
        if let Err(e) = &result {
            check_pg_error(e)?;
        }
        let expected = case.channel_binding != ChannelBindingMode::Require
            && case.stored == case.given
            && !case.skip_final
            && verdict
                == Some(ScramVerdict {
                    proof_valid: true,
                    unchanged: true,
                });
        prop_assert_eq!(
            result.is_ok(),
            expected,
            "{:?}, server: {:?}",
            result,
            verdict
        );
        if case.channel_binding != ChannelBindingMode::Require
            && case.first.is_none()
            && case.stored == case.given
        {
            // An honest server always gets a valid proof.
            prop_assert_eq!(verdict.map(|v| v.proof_valid), Some(true));
        }
        Ok(())
    });
}

/// `key='value'` with `\` and `'` escaped.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Unquoted, with a backslash before white space, quotes and backslashes.
fn escaped(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if c.is_whitespace() || c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The keyword/value string of what `params` holds.
fn to_keyword_value(params: &ConnParams) -> String {
    let sslmode = params.sslmode.map(|m| {
        match m {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
        .to_owned()
    });
    let channel_binding = params.channel_binding.map(|m| {
        match m {
            ChannelBindingMode::Disable => "disable",
            ChannelBindingMode::Prefer => "prefer",
            ChannelBindingMode::Require => "require",
        }
        .to_owned()
    });
    let pairs = [
        ("host", &params.host),
        ("hostaddr", &params.hostaddr),
        ("port", &params.port),
        ("user", &params.user),
        ("password", &params.password),
        ("dbname", &params.dbname),
        ("sslmode", &sslmode),
        ("sslrootcert", &params.sslrootcert),
        ("application_name", &params.application_name),
        (
            "fallback_application_name",
            &params.fallback_application_name,
        ),
        ("connect_timeout", &params.connect_timeout),
        ("options", &params.options),
        ("channel_binding", &channel_binding),
        ("passfile", &params.passfile),
    ];
    pairs
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", quoted(v))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ConnParams::set` applied in order: what a string of these pairs must parse to.
fn set_all<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ConnParams, PgError> {
    let mut params = ConnParams::default();
    for (key, value) in pairs {
        params.set(key, value.to_owned())?;
    }
    Ok(params)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
enum UriHost {
    Name(String),
    /// Written in brackets.
    V6(String),
    /// A socket directory, percent-encoded.
    Path(String),
}

/// The parts of a generated URI.
#[derive(Debug, Clone)]
struct UriCase {
    short_scheme: bool,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<(UriHost, Option<String>)>,
    dbname: Option<String>,
    query: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
enum DsnCase {
    KeywordValue(Vec<(String, String, bool)>),
    Uri(UriCase),
    Mutated(usize, Vec<Mutation>),
    Arbitrary(String),
}

const DSN_SEEDS: &[&str] = &[
    "host=db.example.com port=5432 user=app password='s3cr3t pw' dbname=orders sslmode=verify-full sslrootcert=~/.postgresql/root.crt",
    "postgresql://app:s3cr3t@db1.example.com:5432,db2.example.com:5433/orders?sslmode=require&application_name=cdc&connect_timeout=10",
    "postgres://[::1]:5432/db?host=/var/run/postgresql",
    "postgresql://%2Fvar%2Frun%2Fpostgresql/db?user=u&ssl=true",
    "user=u options='-c search_path=a\\,b -c x=1' application_name = cdc",
    "host=a,b hostaddr=10.0.0.1,::1 port=5432,5433 channel_binding=require connect_timeout=1",
    "host=/tmp port=5433 passfile=~/.pgpass fallback_application_name=x",
    "postgresql://u@/db",
    "postgresql://",
    "",
];

fn dsn_values() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,12}",
        "[ '\\\\=a-z]{0,8}",
        prop::sample::select(vec![
            "disable".to_owned(),
            "prefer".to_owned(),
            "require".to_owned(),
            "verify-full".to_owned(),
            "5432".to_owned(),
            "true".to_owned(),
            String::new(),
        ]),
    ]
}

fn dsn_cases() -> impl Strategy<Value = DsnCase> {
    let keys = prop_oneof![
        8 => prop::sample::select(fuzzing::KEYWORDS.to_vec()).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["replication", "sslcert", "service"]).prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
    ];
    let query_keys = prop::sample::select(fuzzing::KEYWORDS.to_vec()).prop_map(str::to_owned);
    let host = prop_oneof![
        "[a-z0-9.-]{0,10}".prop_map(UriHost::Name),
        "[0-9a-f:]{1,12}".prop_map(UriHost::V6),
        "/[a-z/]{0,10}".prop_map(UriHost::Path),
    ];
    let port = proptest::option::of("[0-9]{0,5}");
    prop_oneof![
        proptest::collection::vec((keys, dsn_values(), any::<bool>()), 0..6)
            .prop_map(DsnCase::KeywordValue),
        (
            any::<bool>(),
            proptest::option::of("\\PC{0,8}"),
            proptest::option::of("\\PC{0,8}"),
            proptest::collection::vec((host, port), 0..4),
            proptest::option::of("\\PC{0,8}"),
            proptest::collection::vec((query_keys, dsn_values()), 0..4),
        )
            .prop_map(|(short_scheme, user, password, hosts, dbname, query)| {
                DsnCase::Uri(UriCase {
                    short_scheme,
                    user,
                    password,
                    hosts,
                    dbname,
                    query,
                })
            }),
        (0..DSN_SEEDS.len(), mutations()).prop_map(|(i, m)| DsnCase::Mutated(i, m)),
        "\\PC{0,40}".prop_map(DsnCase::Arbitrary),
    ]
}

/// The string of a case and, for generated ones, what it must parse to.
type DsnExpectation = Option<Result<ConnParams, PgError>>;

fn dsn_text(case: &DsnCase) -> (String, DsnExpectation) {
    match case {
        DsnCase::KeywordValue(pairs) => {
            let text = pairs
                .iter()
                .map(|(k, v, quote)| {
                    // An empty value must be quoted: `key= next=1` gives `key` "next=1".
                    let value = if *quote || v.is_empty() {
                        quoted(v)
                    } else {
                        escaped(v)
                    };
                    format!("{k}={value}")
                })
                .collect::<Vec<_>>()
                .join(" ");
            let expected = set_all(pairs.iter().map(|(k, v, _)| (k.as_str(), v.as_str())));
            (text, Some(expected))
        }
        DsnCase::Uri(uri) => {
            let UriCase {
                short_scheme,
                user,
                password,
                hosts,
                dbname,
                query,
            } = uri;
            let mut text = String::from(if *short_scheme {
                "postgres://"
            } else {
                "postgresql://"
            });
            let mut pairs: Vec<(&str, String)> = Vec::new();
            if user.is_some() || password.is_some() {
                let u = user.as_deref().unwrap_or_default();
                text.push_str(&percent_encode(u));
                pairs.push(("user", u.to_owned()));
                if let Some(pw) = password {
                    text.push(':');
                    text.push_str(&percent_encode(pw));
                    pairs.push(("password", pw.clone()));
                }
                text.push('@');
            }
            let mut names = Vec::new();
            let mut ports = Vec::new();
            let items: Vec<String> = hosts
                .iter()
                .map(|(host, port)| {
                    let (written, name) = match host {
                        UriHost::Name(n) => (percent_encode(n), n.clone()),
                        UriHost::V6(a) => (format!("[{a}]"), a.clone()),
                        UriHost::Path(p) => (percent_encode(p), p.clone()),
                    };
                    names.push(name);
                    ports.push(port.clone().unwrap_or_default());
                    match port {
                        Some(p) => format!("{written}:{p}"),
                        None => written,
                    }
                })
                .collect();
            text.push_str(&items.join(","));
            if names.iter().any(|n| !n.is_empty()) {
                pairs.push(("host", names.join(",")));
            }
            if ports.iter().any(|p| !p.is_empty()) {
                pairs.push(("port", ports.join(",")));
            }
            if dbname.is_some() || !query.is_empty() {
                text.push('/');
                let db = dbname.as_deref().unwrap_or_default();
                text.push_str(&percent_encode(db));
                if !db.is_empty() {
                    pairs.push(("dbname", db.to_owned()));
                }
            }
            if !query.is_empty() {
                text.push('?');
                let items: Vec<String> = query
                    .iter()
                    .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                    .collect();
                text.push_str(&items.join("&"));
                pairs.extend(query.iter().map(|(k, v)| (k.as_str(), v.clone())));
            }
            let expected = set_all(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            (text, Some(expected))
        }
        DsnCase::Mutated(i, muts) => {
            let bytes = apply(DSN_SEEDS[*i].as_bytes().to_vec(), muts);
            (String::from_utf8_lossy(&bytes).into_owned(), None)
        }
        DsnCase::Arbitrary(text) => (text.clone(), None),
    }
}

#[test]
fn fuzz_connection_strings() {
    let strategy = (dsn_cases(), any::<bool>());
    run(
        "connection_strings",
        2_000,
        strategy,
        |(case, pgpassword)| {
            let (text, expected) = dsn_text(&case);
            let parsed = ConnParams::parse(&text);
            if let DsnCase::KeywordValue(pairs) = &case {
                let split = fuzzing::keyword_value(&text).unwrap();
                let written: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(k, v, _)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(split, written);
            }
            if let Some(expected) = expected {
                match (&parsed, &expected) {
                    (Ok(p), Ok(e)) => prop_assert_eq!(p, e),
                    (Err(_), Err(_)) => {}
                    _ => prop_assert!(false, "{text:?}: {parsed:?}, expected {expected:?}"),
                }
            }
            let params = match parsed {
                Ok(params) => params,
                Err(e) => {
                    prop_assert!(matches!(e, PgError::Config(_)), "{e:?}");
                    return Ok(());
                }
            };
            // What parsed says the same written as keyword/value.
            let again = ConnParams::parse(&to_keyword_value(&params));
            prop_assert_eq!(again.as_ref().ok(), Some(&params), "{:?}", again);

            // Resolution: one target per host (or address), none without a port. With a
            // password given, no password file is read.
            let mut env = fuzzing::Environment {
                os_user: Some("fuzz".to_owned()),
                ..Default::default()
            };
            if pgpassword || params.password.is_none() {
                env.vars.insert("PGPASSWORD".to_owned(), "pw".to_owned());
            }
            if let Ok(settings) = fuzzing::resolve(&params, &env) {
                let count =
                    |list: &Option<String>| list.as_ref().map_or(0, |l| l.split(',').count());
                let targets = count(&params.host).max(count(&params.hostaddr)).max(1);
                prop_assert_eq!(settings.targets.len(), targets);
                for target in &settings.targets {
                    prop_assert!(target.port != 0);
                    prop_assert!(target.password.is_some());
                    if let fuzzing::TargetAddr::Unix(path) = &target.addr {
                        let file = format!(".s.PGSQL.{}", target.port);
                        prop_assert!(path.ends_with(&file), "{path:?}");
                    }
                }
            }
            Ok(())
        },
    );
}

/// A password file line: fields escaped (`\:`, `\\`), a bare `*` where `wild`.
fn pgpass_line(fields: &[(String, bool); 5]) -> String {
    fields
        .iter()
        .map(|(text, wild)| {
            if *wild {
                "*".to_owned()
            } else if text == "*" {
                // A literal star.
                "\\*".to_owned()
            } else {
                text.replace('\\', "\\\\").replace(':', "\\:")
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Debug, Clone)]
enum PassCase {
    /// Lines (fields, wildcard flags; or a comment) and the key looked up.
    Lines(Vec<Option<[(String, bool); 5]>>, [String; 4]),
    Mutated(Vec<Mutation>, [String; 4]),
}

#[test]
fn fuzz_pgpass() {
    let field = || {
        (
            prop_oneof![
                prop::sample::select(vec!["db", "localhost", "5432", "app", "*", ""])
                    .prop_map(str::to_owned),
                "[a-z:\\\\*#]{0,6}",
                "[^\\r\\n]{0,6}",
            ],
            proptest::bool::weighted(0.2),
        )
    };
    let line = proptest::option::weighted(0.9, [field(), field(), field(), field(), field()]);
    let key = || {
        prop::sample::select(vec!["db", "localhost", "5432", "app", "*", "a:b", ""])
            .prop_map(str::to_owned)
    };
    let keys = [key(), key(), key(), key()];
    let strategy = prop_oneof![
        (proptest::collection::vec(line, 0..6), keys.clone())
            .prop_map(|(lines, key)| PassCase::Lines(lines, key)),
        (mutations(), keys).prop_map(|(m, key)| PassCase::Mutated(m, key)),
    ];
    run("pgpass", 2_000, strategy, |case| {
        let (text, key, expected) = match &case {
            PassCase::Lines(lines, key) => {
                let mut text = String::new();
                let mut expected = None;
                for line in lines {
                    let written = match line {
                        Some(fields) => pgpass_line(fields),
                        None => "# a comment: with:five:fields:here".to_owned(),
                    };
                    text.push_str(&written);
                    text.push('\n');
                    let Some(fields) = line else { continue };
                    // A line is a comment when it starts with '#', even an escaped one.
                    if expected.is_some() || written.starts_with('#') {
                        continue;
                    }
                    let matches = fields[..4]
                        .iter()
                        .zip(key)
                        .all(|((text, wild), k)| *wild || text == k);
                    if matches {
                        expected = Some(if fields[4].1 {
                            "*".to_owned()
                        } else {
                            fields[4].0.clone()
                        });
                    }
                }
                (text, key, Some(expected))
            }
            PassCase::Mutated(muts, key) => {
                let seed = "# host:port:db:user:password\n\
                            db.example.com:5432:orders:app:s3cr3t\n\
                            *:*:*:app:with\\:colon\\\\and\\*star\n\
                            localhost:*:*:*:pw\r\n";
                let bytes = apply(seed.as_bytes().to_vec(), muts);
                (String::from_utf8_lossy(&bytes).into_owned(), key, None)
            }
        };
        let found = fuzzing::pgpass_find(&text, &key[0], &key[1], &key[2], &key[3]);
        if let Some(expected) = expected {
            prop_assert_eq!(found, expected, "{:?}", text);
        }
        Ok(())
    });
}

/// Percent-decoding undoes percent-encoding; a bad escape or `%00` is an error.
#[test]
fn fuzz_percent_decode() {
    let strategy = prop_oneof!["\\PC{0,16}", "[%0-9a-fA-FgG]{0,12}"];
    run("percent_decode", 2_000, strategy, |text| {
        prop_assert_eq!(
            fuzzing::percent_decode(&percent_encode(&text)).ok(),
            Some(text.clone())
        );
        match fuzzing::percent_decode(&text) {
            Ok(decoded) => {
                if !text.contains('%') {
                    prop_assert_eq!(decoded, text);
                }
            }
            Err(e) => {
                prop_assert!(text.contains('%'));
                prop_assert!(matches!(e, PgError::Config(_)));
            }
        }
        Ok(())
    });
}
