//! The snapshot's COPY BINARY reader (`CopyBinaryDecoder`).

use std::sync::Arc;

use pgwire_cdc::protocol::Datum;
use pgwire_cdc::relation::Relation;
use pgwire_cdc::snapshot::frame::SIGNATURE;
use pgwire_cdc::snapshot::{CopyBinaryDecoder, SnapshotError, SnapshotMeta};
use proptest::prelude::*;

use crate::common;
use crate::harness::{apply, mutations, run, walk_capture, Walk};

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
