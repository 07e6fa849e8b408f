//! pgoutput messages (`parse_message`) and LSNs (`parse_lsn`).

use pgwire_cdc::protocol::{parse_message, ParseContext};
use proptest::prelude::*;

use crate::harness::{apply, mutations, run, seed_messages};

fn contexts() -> impl Strategy<Value = ParseContext> {
    (1u32..=4, any::<bool>()).prop_map(|(proto_version, in_stream)| ParseContext {
        proto_version,
        in_stream: in_stream && proto_version >= 2,
    })
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
