//! Every golden capture decodes, and the event stream keeps the protocol's invariants:
//! one commit LSN per transaction, dense ordinals, nothing left pending.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use pgwire_cdc::event::{EventBody, EventCollector, UpdatedRow};
use pgwire_cdc::{Decoder, DecoderConfig, FeedError, SpillConfig};

fn decode(c: &common::Capture) -> Vec<pgwire_cdc::event::Event> {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: c.proto_version,
        binary: c.binary,
    });
    let mut out = EventCollector::default();
    for (i, (lsn, bytes)) in c.messages.iter().enumerate() {
        dec.feed(bytes, *lsn, &mut out)
            .unwrap_or_else(|e| panic!("{}: message {i}: {e}", c.path.display()));
    }
    assert!(
        !dec.in_transaction(),
        "{} ends inside a transaction",
        c.path.display()
    );
    out.events
}

fn is_data(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::Insert { .. }
            | EventBody::Update { .. }
            | EventBody::Delete { .. }
            | EventBody::Truncate { .. }
    ) || matches!(
        body,
        EventBody::Message {
            transactional: true,
            ..
        }
    )
}

#[test]
fn every_capture_decodes_with_consistent_transactions() {
    for c in common::captures() {
        let events = decode(&c);
        assert!(!events.is_empty(), "{}", c.path.display());
        // Group data events by commit LSN: ordinals are 0..n in delivery order.
        let mut by_commit = std::collections::BTreeMap::<u64, Vec<u64>>::new();
        for e in &events {
            if is_data(&e.body) {
                let commit = e.meta.commit_lsn.unwrap_or_else(|| {
                    panic!("{}: data event without commit LSN", c.path.display())
                });
                by_commit.entry(commit).or_default().push(e.meta.tx_ordinal);
            }
            if let EventBody::Commit { commit_lsn, .. } = &e.body {
                assert_eq!(e.meta.commit_lsn, Some(*commit_lsn));
            }
        }
        for (commit, ordinals) in by_commit {
            let expected: Vec<u64> = (0..ordinals.len() as u64).collect();
            assert_eq!(ordinals, expected, "{} tx {commit:X}", c.path.display());
        }
    }
}

#[test]
fn toast_scenarios_follow_the_seed() {
    for c in common::captures() {
        let updates: Vec<UpdatedRow> = decode(&c)
            .into_iter()
            .filter_map(|e| match e.body {
                EventBody::Update { new, .. } => Some(new),
                _ => None,
            })
            .collect();
        let partial_missing = |u: &UpdatedRow| match u {
            UpdatedRow::Partial {
                missing_column_indexes,
                ..
            } => Some(missing_column_indexes.clone()),
            UpdatedRow::Full(_) => None,
        };
        match c.scenario.as_str() {
            // DEFAULT: the first update leaves the toasted column 2 unknown; the second
            // rewrites it.
            "toast_default" => {
                assert_eq!(
                    partial_missing(&updates[0]),
                    Some(vec![2]),
                    "{}",
                    c.path.display()
                );
                assert_eq!(partial_missing(&updates[1]), None);
            }
            // FULL: the old image supplies the value.
            "toast_full" => assert!(updates.iter().all(|u| partial_missing(u).is_none())),
            // USING INDEX: a key image without the toasted column cannot supply it.
            "toast_index" => {
                assert!(updates.iter().all(|u| partial_missing(u) == Some(vec![3])));
            }
            _ => {}
        }
    }
}

#[test]
fn streamed_and_prepared_captures_deliver_their_rows_once() {
    for c in common::captures() {
        let events = decode(&c);
        let inserts = events
            .iter()
            .filter(|e| matches!(e.body, EventBody::Insert { .. }));
        let mut seen = std::collections::HashSet::new();
        for e in inserts {
            assert!(
                seen.insert((e.meta.commit_lsn, e.meta.tx_ordinal)),
                "{}: duplicate change",
                c.path.display()
            );
        }
        if c.scenario.starts_with("stream") {
            assert!(events
                .iter()
                .any(|e| matches!(e.body, EventBody::StreamStart { .. })));
        }
    }
}

/// Decodes with held transactions spilled past `memory_limit` bytes, pulling committed
/// ones `step` messages at a time with `feed_bounded` / `replay_some`.
fn decode_spilled(
    c: &common::Capture,
    memory_limit: usize,
    step: usize,
) -> (Vec<pgwire_cdc::event::Event>, u64) {
    let dir = std::env::temp_dir().join(format!("pgwire_cdc-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: c.proto_version,
        binary: c.binary,
    })
    .with_spill(SpillConfig {
        memory_limit,
        dir: Some(dir.clone()),
    });
    let mut out = EventCollector::default();
    for (i, (lsn, bytes)) in c.messages.iter().enumerate() {
        dec.feed_bounded(bytes, *lsn, &mut out)
            .unwrap_or_else(|e| panic!("{}: message {i}: {e}", c.path.display()));
        while dec.replaying() {
            let before = out.events.len();
            let done = dec.replay_some(&mut out, step).unwrap();
            assert!(done.messages <= step);
            // Each pulled message is one event; the closing event comes with the last.
            assert_eq!(
                out.events.len() - before,
                done.messages + usize::from(done.finished)
            );
            assert!(dec.in_transaction() != done.finished);
        }
    }
    assert!(!dec.in_transaction(), "{}", c.path.display());
    assert_eq!(dec.held_in_memory(), 0, "{}", c.path.display());
    // The spill files are unnamed: nothing is left in (or ever visible in) the directory.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    (out.events, dec.held_spilled())
}

#[test]
fn held_transactions_decode_the_same_from_memory_and_from_disk() {
    let mut spilled_captures = 0;
    for c in common::captures() {
        let expected = decode(&c);
        for (limit, step) in [(0, 1), (0, usize::MAX), (600, 3), (usize::MAX, 2)] {
            let (events, spilled) = decode_spilled(&c, limit, step);
            assert_eq!(
                events,
                expected,
                "{} limit {limit} step {step}",
                c.path.display()
            );
            if limit == usize::MAX {
                assert_eq!(spilled, 0);
            }
            if limit == 0 && spilled > 0 {
                spilled_captures += 1;
            }
        }
    }
    // Streamed and two-phase captures (stream_*, two_phase*, ws_*) went through disk.
    assert!(spilled_captures >= 10, "{spilled_captures}");
    let _ = std::fs::remove_dir(
        std::env::temp_dir().join(format!("pgwire_cdc-golden-{}", std::process::id())),
    );
}

#[test]
fn a_spill_directory_that_cannot_be_written_is_a_spill_error() {
    let c = common::captures()
        .into_iter()
        .find(|c| c.path.ends_with("pg15/stream_v2.json"))
        .unwrap();
    let missing = std::env::temp_dir().join("pgwire_cdc-no-such-dir/below");
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: c.proto_version,
        binary: c.binary,
    })
    .with_spill(SpillConfig {
        memory_limit: 0,
        dir: Some(missing),
    });
    let mut out = EventCollector::default();
    let err = c
        .messages
        .iter()
        .find_map(|(lsn, bytes)| dec.feed(bytes, *lsn, &mut out).err())
        .expect("the first held message needs the spill file");
    assert!(matches!(err, FeedError::Spill(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("pgwire_cdc-no-such-dir"), "{text}");
    assert!(text.contains("spill_dir"), "{text}");
}
