//! The decoder's state machine (`Decoder::feed`) on almost-valid transaction streams, and
//! the Arrow change tables it fills.

use pgwire_cdc::arrow::ArrowSink;
use pgwire_cdc::sink::{EventSink, NullSink};
use pgwire_cdc::{Decoder, DecoderConfig, FeedError};
use proptest::prelude::*;

use crate::common;
use crate::harness::{apply, mutations, run, seed_messages, Mutation};

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
        if let Err(FeedError::Decode(e)) = dec.feed(&bytes, *lsn, sink) {
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
