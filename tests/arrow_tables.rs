//! Arrow change tables from the golden captures: one row per change event, text and
//! binary captures of the same rows give equal data columns.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::HashMap;

use arrow_array::{Array, RecordBatch, StringArray};
use pgwire_cdc::arrow::{ArrowSink, Segment};
use pgwire_cdc::event::{EventBody, EventCollector};
use pgwire_cdc::sink::{EventMeta, EventRef, EventSink};
use pgwire_cdc::{DecodeError, Decoder, DecoderConfig, Reason};

struct Both {
    events: EventCollector,
    tables: ArrowSink,
}

impl EventSink for Both {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        self.events.event(meta, event)?;
        self.tables.event(meta, event)
    }
}

/// Decodes a capture into events and tables. Values Arrow cannot hold (the
/// unrepresentable-value policy: an error naming table and column) are counted per table
/// and decoding goes on; the failing row is not in the table.
fn decode(
    c: &common::Capture,
) -> (
    Vec<pgwire_cdc::event::Event>,
    Vec<Segment>,
    HashMap<String, usize>,
) {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: c.proto_version,
        binary: c.binary,
    });
    let mut out = Both {
        events: EventCollector::default(),
        tables: ArrowSink::new(c.binary),
    };
    let mut rejected: HashMap<String, usize> = HashMap::new();
    for (lsn, bytes) in &c.messages {
        match dec.feed(bytes, *lsn, &mut out) {
            Ok(()) => {}
            Err(DecodeError {
                reason: Reason::Value { table, .. },
                ..
            }) => {
                *rejected.entry(table).or_default() += 1;
            }
            Err(e) => panic!("{}: {e}", c.path.display()),
        }
    }
    let segments = out.tables.take().unwrap();
    (out.events.events, segments, rejected)
}

#[test]
fn every_change_event_is_one_row_of_its_table() {
    for c in common::captures() {
        let (events, segments, rejected) = decode(&c);
        let mut expected: HashMap<String, usize> = HashMap::new();
        for e in &events {
            match &e.body {
                EventBody::Insert { relation, .. }
                | EventBody::Update { relation, .. }
                | EventBody::Delete { relation, .. } => {
                    *expected.entry(relation.qualified_name.clone()).or_default() += 1;
                }
                EventBody::Truncate { relations, .. } => {
                    for r in relations {
                        *expected.entry(r.qualified_name.clone()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        for (table, n) in rejected {
            *expected.entry(table).or_default() -= n;
        }
        let mut got: HashMap<String, usize> = HashMap::new();
        for s in &segments {
            *got.entry(s.table.clone()).or_default() += s.batch.num_rows();
            let kinds = s.batch.column_by_name("_change_type").unwrap();
            let kinds = kinds.as_any().downcast_ref::<StringArray>().unwrap();
            assert_eq!(kinds.null_count(), 0);
        }
        assert_eq!(got, expected, "{}", c.path.display());
    }
}

fn data_columns(batch: &RecordBatch) -> Vec<(String, arrow_data::ArrayData)> {
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| !f.name().starts_with('_'))
        .map(|(f, a)| (f.name().clone(), a.to_data()))
        .collect()
}

#[test]
fn text_and_binary_captures_give_equal_values() {
    let all = common::captures();
    for text in all.iter().filter(|c| c.scenario == "text_types") {
        let server = text.path.parent().unwrap();
        let binary = all
            .iter()
            .find(|c| c.scenario == "binary_types" && c.path.parent().unwrap() == server)
            .expect("binary_types capture beside text_types");
        assert!(binary.binary && !text.binary);
        let (_, t, _) = decode(text);
        let (_, b, _) = decode(binary);
        assert_eq!(t.len(), b.len());
        for (ts, bs) in t.iter().zip(&b) {
            assert_eq!(ts.table, bs.table);
            assert_eq!(
                data_columns(&ts.batch),
                data_columns(&bs.batch),
                "{}",
                server.display()
            );
        }
    }
}
