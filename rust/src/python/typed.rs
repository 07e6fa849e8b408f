//! Typed row values for event objects: one cell per column, typed as its Arrow column.
//!
//! An event's row values are the Python values of their Arrow type (the type mapping),
//! the same objects `take()` gives through `to_pylist()`. To be the same by construction,
//! not by a second parser, the values of every drained event go through a change table of
//! their relation ([`ChangeTable`], the `take()` path, text and binary alike) and come out
//! through pyarrow's `to_pylist()`. A value the tables cannot hold is the same
//! `ColumnValueError` here as there.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrow::{ChangeKind, ChangeTable, RowMeta};
use crate::error::{DecodeError, MessageKind, Reason};
use crate::event::{Event, EventBody};
use crate::event_log::RowImages;
use crate::protocol::Datum;
use crate::relation::Relation;

use super::arrow::PyArrowStream;

/// The typed values of one event's row images, full width (one per relation column; a
/// value PostgreSQL did not send is None).
pub struct Images<'py> {
    /// False: the event gets only the wire form of its values (`events(typed=False)`).
    pub values: bool,
    /// Insert's row, update's new row.
    pub new: Option<Vec<Bound<'py, PyAny>>>,
    /// Update's and delete's old row.
    pub old: Option<Vec<Bound<'py, PyAny>>>,
}

impl Images<'_> {
    /// No typed values: the event keeps the wire form only.
    pub fn wire_only() -> Self {
        Self {
            values: false,
            new: None,
            old: None,
        }
    }
}

/// Where one image's values went: a table and its row.
#[derive(Clone, Copy)]
struct Placed {
    table: usize,
    row: usize,
}

#[derive(Default)]
struct Placement {
    new: Option<Placed>,
    old: Option<Placed>,
}

/// The first value error of each event that has one, by event index.
pub type ValueErrors = Vec<(usize, DecodeError)>;

/// A column's Python values; a value Python cannot hold is its problem's text.
type PythonColumn<'py> = Vec<Result<Bound<'py, PyAny>, String>>;

/// Collects drained events and puts their images' values through a change table per
/// relation; [`TypedEvents::finish`] makes them Python values.
pub struct TypedEvents {
    binary: bool,
    events: Vec<Event>,
    tables: Vec<ChangeTable>,
    /// Each relation's table, keyed by the description's address: the events hold their
    /// relations, so an address stays one relation's while they live.
    by_relation: HashMap<*const Relation, usize>,
    placements: Vec<Placement>,
    errors: ValueErrors,
}

impl TypedEvents {
    pub fn new(binary: bool) -> Self {
        Self {
            binary,
            events: Vec::new(),
            tables: Vec::new(),
            by_relation: HashMap::new(),
            placements: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Adds the next event, with its row images as delivered (`EventLog::drain_with`).
    pub fn add(&mut self, event: Event, images: RowImages<'_>) {
        let i = self.events.len();
        let mut placement = Placement::default();
        if let Some((relation, kind)) = row_event(&event) {
            let binary = self.binary;
            let tables = &mut self.tables;
            let table = *self
                .by_relation
                .entry(Arc::as_ptr(relation))
                .or_insert_with(|| {
                    tables.push(ChangeTable::new(Arc::clone(relation), binary));
                    tables.len() - 1
                });
            let meta = RowMeta {
                lsn: event.meta.start_lsn,
                commit_lsn: event.meta.commit_lsn,
                tx_ordinal: event.meta.tx_ordinal,
                commit_timestamp: None,
                xid: None,
            };
            let errors = &mut self.errors;
            let mut place = |values: Option<Vec<Datum<'_>>>| -> Option<Placed> {
                let t = tables.get_mut(table)?;
                let row = t.rows() - t.failed_rows();
                match t.append(ChangeKind::Insert, &meta, Some(&values?), None) {
                    Ok(()) => Some(Placed { table, row }),
                    Err(e) => {
                        let problem = e.error.to_string();
                        errors.push((i, value_error(kind, relation, &event, &e.column, problem)));
                        None
                    }
                }
            };
            placement.new = place(images.new);
            placement.old = place(images.old);
        }
        self.placements.push(placement);
        self.events.push(event);
    }

    /// The events, their typed images, and the events whose values cannot be represented
    /// (such an event has no images).
    pub fn finish<'py>(
        mut self,
        py: Python<'py>,
    ) -> PyResult<(Vec<Event>, Vec<Images<'py>>, ValueErrors)> {
        // Each table's columns as Python values, through pyarrow.
        let reader = py.import("pyarrow")?.getattr("RecordBatchReader")?;
        let mut columns: Vec<Vec<PythonColumn<'py>>> = Vec::with_capacity(self.tables.len());
        for table in &mut self.tables {
            let batch = table.finish().map_err(|e| {
                PyRuntimeError::new_err(format!("building Arrow values failed: {e}"))
            })?;
            let stream = Py::new(py, PyArrowStream::new(batch.schema(), vec![batch]))?;
            let pa_table = reader
                .call_method1("from_stream", (stream,))?
                .call_method0("read_all")?;
            let width = table.relation.columns.len();
            let mut lists = Vec::with_capacity(width);
            for j in 0..width {
                lists.push(python_values(&pa_table.call_method1("column", (j,))?)?);
            }
            columns.push(lists);
        }

        let mut errors = self.errors;
        let mut out = Vec::with_capacity(self.events.len());
        for (i, (event, placement)) in self.events.iter().zip(self.placements).enumerate() {
            let mut image = |p: Option<Placed>| -> Option<Vec<Bound<'py, PyAny>>> {
                let p = p?;
                let lists = columns.get(p.table)?;
                let mut values = Vec::with_capacity(lists.len());
                for (j, list) in lists.iter().enumerate() {
                    match list.get(p.row)? {
                        Ok(v) => values.push(v.clone()),
                        Err(problem) => {
                            if let Some((relation, kind)) = row_event(event) {
                                let column =
                                    relation.columns.get(j).map_or("", |c| c.name.as_str());
                                let problem = problem.clone();
                                errors
                                    .push((i, value_error(kind, relation, event, column, problem)));
                            }
                            return None;
                        }
                    }
                }
                Some(values)
            };
            let new = image(placement.new);
            let old = image(placement.old);
            out.push(Images {
                values: true,
                new,
                old,
            });
        }
        // One error per event, the first.
        errors.sort_by_key(|(i, _)| *i);
        errors.dedup_by_key(|(i, _)| *i);
        Ok((self.events, out, errors))
    }
}

/// The Python values of a pyarrow column, `to_pylist()`'s. A value Python cannot hold
/// (a date past year 9999, say) fails `to_pylist()` as a whole; the values are then read
/// one at a time and such a value becomes its error's text.
fn python_values<'py>(column: &Bound<'py, PyAny>) -> PyResult<PythonColumn<'py>> {
    if let Ok(list) = column.call_method0("to_pylist") {
        let list = list.cast_into::<PyList>()?;
        return Ok(list.iter().map(Ok).collect());
    }
    let n = column.len()?;
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        out.push(
            column
                .get_item(k)
                .and_then(|scalar| scalar.call_method0("as_py"))
                .map_err(|e| {
                    format!(
                        "Python cannot hold the value: {}",
                        e.get_type(column.py())
                            .name()
                            .map_or_else(|_| "error".to_owned(), |n| n.to_string())
                    )
                }),
        );
    }
    Ok(out)
}

/// The relation and message kind of a row event.
fn row_event(event: &Event) -> Option<(&Arc<Relation>, MessageKind)> {
    match &event.body {
        EventBody::Insert { relation, .. } => Some((relation, MessageKind::Insert)),
        EventBody::Update { relation, .. } => Some((relation, MessageKind::Update)),
        EventBody::Delete { relation, .. } => Some((relation, MessageKind::Delete)),
        _ => None,
    }
}

fn value_error(
    kind: MessageKind,
    relation: &Relation,
    event: &Event,
    column: &str,
    problem: String,
) -> DecodeError {
    DecodeError::new(
        kind,
        0,
        Reason::Value {
            table: relation.qualified_name.clone(),
            column: column.to_owned(),
            lsn: event.meta.start_lsn,
            problem,
        },
    )
}
