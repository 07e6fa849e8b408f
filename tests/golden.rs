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
use pgwire_cdc::{Decoder, DecoderConfig};

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
        let mut by_commit: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
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
