//! Decoded events with their row images as delivered, for typed event values.
//!
//! An owned [`Event`] (the event model of docs/concepts.md) keeps an update's new row
//! without the columns it could not know and a key image without the non-key columns. To
//! give events the values the change tables hold, the row images are needed as the decoder
//! delivered them: full width, in relation column order. This sink keeps each row event as its
//! metadata, the relation it was read with (a shared pointer) and its values copied into
//! one byte arena; [`EventLog::drain_with`] hands out each [`Event`] with those images.
//!
//! Every row event is complete in itself (the relation is the one the decoder resolved
//! when the change was delivered, unchanged-TOAST values already filled in), so the log
//! needs no decoder state to be read.

use std::ops::Range;
use std::sync::Arc;

use crate::error::DecodeError;
use crate::event::{old_row, updated_row, Event, EventBody, Value};
use crate::protocol::{Datum, OldKind};
use crate::relation::Relation;
use crate::sink::{EventMeta, EventRef, EventSink, OldImage};

/// One value of a row image, packed in 8 bytes: its kind in the top two bits, and where
/// its bytes end in the arena in the others (they start where the previous value's end).
#[derive(Debug, Clone, Copy)]
struct Stored(u64);

impl Stored {
    const NULL: u64 = 0;
    const UNCHANGED: u64 = 1;
    const TEXT: u64 = 2;
    const BINARY: u64 = 3;
    const SHIFT: u32 = 62;
    const END: u64 = (1 << Self::SHIFT) - 1;

    fn new(kind: u64, end: usize) -> Self {
        Self((kind << Self::SHIFT) | (end as u64 & Self::END))
    }

    fn kind(self) -> u64 {
        self.0 >> Self::SHIFT
    }

    fn end(self) -> usize {
        (self.0 & Self::END) as usize
    }
}

#[derive(Debug)]
enum Entry {
    /// Every event without row values, kept as its owned form (few per transaction; boxed
    /// so that row entries stay small).
    Other(Box<Event>),
    Insert {
        meta: EventMeta,
        relation: Arc<Relation>,
        row: Range<usize>,
    },
    Update {
        meta: EventMeta,
        relation: Arc<Relation>,
        new: Range<usize>,
        old: Option<(OldKind, Range<usize>)>,
    },
    Delete {
        meta: EventMeta,
        relation: Arc<Relation>,
        old: (OldKind, Range<usize>),
    },
}

/// A row event's images as the decoder delivered them, borrowed from the log: full width,
/// a key image with NULL in the non-key columns, an unknown new value as unchanged TOAST.
#[derive(Debug, Default)]
pub struct RowImages<'a> {
    /// Insert's row, update's new row.
    pub new: Option<Vec<Datum<'a>>>,
    /// Update's and delete's old row.
    pub old: Option<Vec<Datum<'a>>>,
}

/// Events in the order they were delivered; see the module documentation.
#[derive(Debug, Default)]
pub struct EventLog {
    entries: Vec<Entry>,
    /// The values of every row image, images one after another.
    values: Vec<Stored>,
    /// The bytes of the text and binary values.
    bytes: Vec<u8>,
}

impl EventLog {
    /// Events logged since the last drain.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every event, keeping the memory for the next ones.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.values.clear();
        self.bytes.clear();
    }

    /// The logged events as owned [`Event`]s, oldest first; the log is empty afterwards.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::with_capacity(self.len());
        self.drain_with(|event, _| out.push(event));
        out
    }

    /// Hands each logged event, oldest first, to `f` with its row images as they were
    /// delivered (full width: a key image has NULL in the other columns, an unknown new
    /// value is unchanged TOAST); the log is empty afterwards.
    pub fn drain_with(&mut self, mut f: impl FnMut(Event, RowImages<'_>)) {
        let entries = std::mem::take(&mut self.entries);
        for entry in entries {
            let (event, images) = self.event_of(entry);
            f(event, images);
        }
        self.clear();
    }

    fn event_of(&self, entry: Entry) -> (Event, RowImages<'_>) {
        match entry {
            Entry::Other(e) => (*e, RowImages::default()),
            Entry::Insert {
                meta,
                relation,
                row,
            } => {
                let row = self.datums(row);
                let body = EventBody::Insert {
                    row: row.iter().map(Value::from).collect(),
                    relation,
                };
                let images = RowImages {
                    new: Some(row),
                    old: None,
                };
                (Event { meta, body }, images)
            }
            Entry::Update {
                meta,
                relation,
                new,
                old,
            } => {
                let new = self.datums(new);
                let old = old.map(|(kind, r)| (kind, self.datums(r)));
                let body = EventBody::Update {
                    new: updated_row(&new),
                    old: old.as_ref().map(|(kind, values)| {
                        old_row(
                            &relation,
                            OldImage {
                                kind: *kind,
                                values,
                            },
                        )
                    }),
                    relation,
                };
                let images = RowImages {
                    new: Some(new),
                    old: old.map(|(_, values)| values),
                };
                (Event { meta, body }, images)
            }
            Entry::Delete {
                meta,
                relation,
                old: (kind, r),
            } => {
                let values = self.datums(r);
                let body = EventBody::Delete {
                    old: old_row(
                        &relation,
                        OldImage {
                            kind,
                            values: &values,
                        },
                    ),
                    relation,
                };
                let images = RowImages {
                    new: None,
                    old: Some(values),
                };
                (Event { meta, body }, images)
            }
        }
    }

    /// The values of one image, borrowed from the arena.
    fn datums(&self, range: Range<usize>) -> Vec<Datum<'_>> {
        let mut start = match range.start.checked_sub(1) {
            Some(before) => self.values.get(before).map_or(0, |v| v.end()),
            None => 0,
        };
        self.values
            .get(range)
            .unwrap_or_default()
            .iter()
            .map(|v| {
                let bytes = self.bytes.get(start..v.end()).unwrap_or_default();
                start = v.end();
                match v.kind() {
                    Stored::NULL => Datum::Null,
                    Stored::UNCHANGED => Datum::UnchangedToast,
                    // Stored from a `&str`, so always UTF-8; the check keeps this safe code.
                    Stored::TEXT => Datum::Text(std::str::from_utf8(bytes).unwrap_or_default()),
                    _ => Datum::Binary(bytes),
                }
            })
            .collect()
    }

    fn store(&mut self, datums: &[Datum<'_>]) -> Range<usize> {
        let start = self.values.len();
        for d in datums {
            let kind = match *d {
                Datum::Null => Stored::NULL,
                Datum::UnchangedToast => Stored::UNCHANGED,
                Datum::Text(s) => {
                    self.bytes.extend_from_slice(s.as_bytes());
                    Stored::TEXT
                }
                Datum::Binary(b) => {
                    self.bytes.extend_from_slice(b);
                    Stored::BINARY
                }
            };
            self.values.push(Stored::new(kind, self.bytes.len()));
        }
        start..self.values.len()
    }
}

impl EventSink for EventLog {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        let entry = match event {
            EventRef::Insert { relation, row } => Entry::Insert {
                meta: *meta,
                relation: Arc::clone(relation),
                row: self.store(row),
            },
            EventRef::Update { relation, new, old } => Entry::Update {
                meta: *meta,
                relation: Arc::clone(relation),
                new: self.store(new),
                old: old.map(|o| (o.kind, self.store(o.values))),
            },
            EventRef::Delete { relation, old } => Entry::Delete {
                meta: *meta,
                relation: Arc::clone(relation),
                old: (old.kind, self.store(old.values)),
            },
            other => Entry::Other(Box::new(Event {
                meta: *meta,
                body: EventBody::from_ref(other),
            })),
        };
        self.entries.push(entry);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::event::EventCollector;
    use crate::relation::Column;

    fn relation() -> Arc<Relation> {
        let column = |name: &str, is_key| Column {
            name: name.into(),
            type_oid: 25,
            base_type_oid: 25,
            type_modifier: -1,
            base_type_modifier: -1,
            is_key,
        };
        Arc::new(Relation {
            oid: 16384,
            namespace: "public".into(),
            name: "t".into(),
            qualified_name: "public.t".into(),
            replica_identity: b'd',
            columns: vec![column("a", true), column("b", false), column("c", false)],
        })
    }

    fn meta(lsn: u64) -> EventMeta {
        EventMeta {
            start_lsn: lsn,
            commit_lsn: Some(lsn + 100),
            tx_ordinal: lsn,
            xid: Some(7),
            commit_timestamp: Some(1),
        }
    }

    /// Feeds the same events to a log and to the owned collector.
    fn both(events: &[(EventMeta, EventRef<'_, '_>)]) -> (EventLog, Vec<Event>) {
        let (mut log, mut collector) = (EventLog::default(), EventCollector::default());
        for (m, e) in events {
            log.event(m, *e).unwrap();
            collector.event(m, *e).unwrap();
        }
        (log, collector.events)
    }

    #[test]
    fn drains_the_events_the_collector_builds() {
        let rel = relation();
        let row = [Datum::Text("1"), Datum::Binary(b"\x00\xff"), Datum::Null];
        let new = [Datum::Text("1"), Datum::UnchangedToast, Datum::Text("é")];
        let key = [Datum::Text("1"), Datum::Null, Datum::Null];
        let full = [Datum::Text("1"), Datum::Text("x"), Datum::UnchangedToast];
        let begin = crate::protocol::Begin {
            final_lsn: 5,
            timestamp: 3,
            xid: 7,
        };
        let events = [
            (meta(1), EventRef::Begin(&begin)),
            (
                meta(2),
                EventRef::Insert {
                    relation: &rel,
                    row: &row,
                },
            ),
            (
                meta(3),
                EventRef::Update {
                    relation: &rel,
                    new: &new,
                    old: Some(OldImage {
                        kind: OldKind::Full,
                        values: &full,
                    }),
                },
            ),
            (
                meta(4),
                EventRef::Update {
                    relation: &rel,
                    new: &row,
                    old: None,
                },
            ),
            (
                meta(5),
                EventRef::Delete {
                    relation: &rel,
                    old: OldImage {
                        kind: OldKind::Key,
                        values: &key,
                    },
                },
            ),
        ];
        let (mut log, expected) = both(&events);
        assert_eq!(log.len(), 5);
        assert_eq!(log.drain(), expected);
        assert!(log.is_empty());
        assert!(log.drain().is_empty());

        // The images come as delivered: full width, key images with their NULLs.
        let (mut log, _) = both(&events);
        let mut images = Vec::new();
        log.drain_with(|_, i| {
            let owned = |d: Option<Vec<Datum<'_>>>| d.map(|v| v.iter().map(Value::from).collect());
            images.push((owned(i.new), owned(i.old)));
        });
        assert!(log.is_empty());
        let values = |d: &[Datum<'_>]| Some(d.iter().map(Value::from).collect::<Vec<_>>());
        assert_eq!(
            images,
            vec![
                (None, None),
                (values(&row), None),
                (values(&new), values(&full)),
                (values(&row), None),
                (None, values(&key)),
            ]
        );
    }
}
