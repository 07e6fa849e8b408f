//! What every fuzz target shares: `run` (the quick run, or the time budget of `make fuzz`),
//! the byte mutations applied to real inputs, and the inputs taken from the golden
//! captures.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire_cdc::protocol::{parse_message, Datum, Message, ParseContext};
use pgwire_cdc::relation::{Relation, TypeInfo};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::common;

/// Runs `test` over `strategy`: `quick` cases by default (the smoke run of `make test`), or
/// for `PGWIRE_CDC_FUZZ_SECONDS` seconds, in batches of fresh random cases; then prints how
/// many cases ran and how long it took.
pub(crate) fn run<S: Strategy>(
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

pub(crate) fn seed_messages() -> Vec<Vec<u8>> {
    common::captures()
        .into_iter()
        .flat_map(|c| c.messages.into_iter().map(|(_, b)| b))
        .filter(|b| b.len() < 4096)
        .collect()
}

#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Flip { at: usize, value: u8 },
    Truncate { len: usize },
    Insert { at: usize, bytes: Vec<u8> },
    SetI32 { at: usize, value: i32 },
}

pub(crate) fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
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

pub(crate) fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
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

/// What a walk through a capture meets: a new version of a relation (its first
/// description or a changed one), or an insert into the version in force.
pub(crate) enum Walk<'w, 'm> {
    Relation(&'w Arc<Relation>),
    Insert(&'w Arc<Relation>, &'w [Datum<'m>]),
}

/// Parses a capture's messages in order (streamed blocks included), tracking its relations.
pub(crate) fn walk_capture(cap: &common::Capture, mut visit: impl FnMut(Walk<'_, '_>)) {
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
                let rel = Arc::new(Relation::from_message(&r, &types, &HashMap::default()));
                if !relations.get(&r.oid).is_some_and(|old| **old == *rel) {
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
