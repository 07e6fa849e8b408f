//! `pgwire_cdc.Event`: one decoded event as a Python object (docs/event-api.md).
//!
//! The common fields are plain attributes; the kind-specific ones live in a dict read by
//! `__getattr__`, so every documented attribute exists on every event (None where it does
//! not apply). `repr()` shows no row values: events end up in logs.

use pyo3::exceptions::{PyAttributeError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::event::{Event, EventBody, OldRow, PrepareData, UpdatedRow, Value};
use crate::lsn::format_lsn;
use crate::protocol::PgTimestamp;
use crate::relation::Relation;

use super::typed::Images;

/// Every kind-specific attribute name; reading one that does not apply gives None.
const ATTRIBUTES: &[&str] = &[
    "table",
    "table_row",
    "updated_table_row",
    "old_table_row",
    "wire_table_row",
    "wire_updated_table_row",
    "wire_old_table_row",
    "tables",
    "options",
    "prefix",
    "content",
    "transactional",
    "message_lsn",
    "commit_ts",
    "timestamp",
    "final_lsn",
    "flags",
    "end_lsn",
    "origin_name",
    "origin_lsn",
    "relation_id",
    "replica_identity",
    "columns",
    "type_oid",
    "type_namespace",
    "type_name",
    "first_segment",
    "subxid",
    "abort_lsn",
    "abort_ts",
    "gid",
    "prepare_lsn",
    "prepare_ts",
    "prepare_end_lsn",
    "rollback_end_lsn",
    "rollback_ts",
];

/// The marker for an unchanged-TOAST value where no value is known (`UNCHANGED_TOAST`).
#[pyclass(frozen, module = "pgwire_cdc._native")]
pub struct UnchangedToast;

#[pymethods]
impl UnchangedToast {
    // PyO3 calls `__repr__` on an instance: the receiver is required.
    #[allow(clippy::unused_self)]
    fn __repr__(&self) -> &'static str {
        "UNCHANGED_TOAST"
    }
}

#[pyclass(frozen, module = "pgwire_cdc", name = "Event")]
pub struct PyEvent {
    #[pyo3(get)]
    kind: &'static str,
    #[pyo3(get)]
    start_lsn: u64,
    #[pyo3(get)]
    commit_lsn: Option<u64>,
    #[pyo3(get)]
    tx_ordinal: u64,
    #[pyo3(get)]
    xid: Option<u32>,
    attrs: Py<PyDict>,
}

#[pymethods]
impl PyEvent {
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        if let Some(value) = self.attrs.bind(py).get_item(name)? {
            return Ok(value.unbind());
        }
        if ATTRIBUTES.contains(&name) {
            return Ok(py.None());
        }
        Err(PyAttributeError::new_err(format!(
            "'Event' object has no attribute '{name}'"
        )))
    }

    /// All attributes as a dict (kind-specific ones only where they apply).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = self.attrs.bind(py).copy()?;
        d.set_item("kind", self.kind)?;
        d.set_item("start_lsn", self.start_lsn)?;
        d.set_item("commit_lsn", self.commit_lsn)?;
        d.set_item("tx_ordinal", self.tx_ordinal)?;
        d.set_item("xid", self.xid)?;
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut fields = vec![format!("kind={:?}", self.kind)];
        if let Some(table) = self.attrs.bind(py).get_item("table")? {
            fields.push(format!("table={}", table.repr()?));
        }
        fields.push(format!("start_lsn={}", format_lsn(self.start_lsn)));
        if let Some(c) = self.commit_lsn {
            fields.push(format!("commit_lsn={}", format_lsn(c)));
        }
        fields.push(format!("tx_ordinal={}", self.tx_ordinal));
        if let Some(x) = self.xid {
            fields.push(format!("xid={x}"));
        }
        Ok(format!("Event({})", fields.join(", ")))
    }
}

static UNCHANGED: PyOnceLock<Py<UnchangedToast>> = PyOnceLock::new();

/// The one `UNCHANGED_TOAST` object, so that `value is UNCHANGED_TOAST` holds.
pub fn unchanged_toast(py: Python<'_>) -> PyResult<&Py<UnchangedToast>> {
    UNCHANGED.get_or_try_init(py, || Py::new(py, UnchangedToast))
}

static PG_EPOCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TIMEDELTA: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Python's datetime covers years 1 to 9999: µs from 2000-01-01 to those bounds.
const PY_MIN_MICROS: i64 = -63_082_281_600_000_000;
const PY_MAX_MICROS: i64 = 252_455_615_999_999_999;

/// PostgreSQL TimestampTz (µs since 2000-01-01 UTC) as an aware datetime, or None when
/// Python cannot hold it (only corrupt bytes give such a commit time; the raw value stays
/// readable where the event has one, as `timestamp`).
fn timestamp(py: Python<'_>, micros: PgTimestamp) -> PyResult<Bound<'_, PyAny>> {
    if !(PY_MIN_MICROS..=PY_MAX_MICROS).contains(&micros) {
        return Ok(py.None().into_bound(py));
    }
    let epoch = PG_EPOCH.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let dt = py.import("datetime")?;
        let utc = dt.getattr("timezone")?.getattr("utc")?;
        Ok(dt
            .getattr("datetime")?
            .call1((2000, 1, 1, 0, 0, 0, 0, utc))?
            .unbind())
    })?;
    let delta = TIMEDELTA.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("datetime")?.getattr("timedelta")?.unbind())
    })?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("microseconds", micros)?;
    epoch.bind(py).add(delta.bind(py).call((), Some(&kwargs))?)
}

fn value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Text(s) => s.into_pyobject(py)?.into_any(),
        Value::Binary(b) => PyBytes::new(py, b).into_any(),
        Value::UnchangedToast => unchanged_toast(py)?.bind(py).clone().into_any(),
    })
}

fn row<'py>(py: Python<'py>, values: &[Value]) -> PyResult<Bound<'py, PyTuple>> {
    let items = values
        .iter()
        .map(|v| value(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

fn old_row<'py>(py: Python<'py>, old: &OldRow) -> PyResult<Bound<'py, PyTuple>> {
    match old {
        OldRow::Full(v) => PyTuple::new(
            py,
            [
                ("full").into_pyobject(py)?.into_any(),
                row(py, v)?.into_any(),
            ],
        ),
        OldRow::Key(v) => PyTuple::new(
            py,
            [
                ("key").into_pyobject(py)?.into_any(),
                row(py, v)?.into_any(),
            ],
        ),
    }
}

fn updated_row<'py>(py: Python<'py>, new: &UpdatedRow) -> PyResult<Bound<'py, PyTuple>> {
    match new {
        UpdatedRow::Full(v) => PyTuple::new(
            py,
            [
                ("full").into_pyobject(py)?.into_any(),
                row(py, v)?.into_any(),
            ],
        ),
        UpdatedRow::Partial {
            values,
            missing_column_indexes,
            ..
        } => PyTuple::new(
            py,
            [
                ("partial").into_pyobject(py)?.into_any(),
                row(py, values)?.into_any(),
                PyList::new(py, missing_column_indexes)?.into_any(),
            ],
        ),
    }
}

/// The typed counterparts of [`row`], [`updated_row`] and [`old_row`], from an event's
/// full-width typed images (see `typed.rs`).
fn typed_tuple<'py>(
    py: Python<'py>,
    values: impl IntoIterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let values: Vec<_> = values.into_iter().collect();
    Ok(PyTuple::new(py, values)?.into_any())
}

fn image<'a, 'py>(image: Option<&'a [Bound<'py, PyAny>]>) -> PyResult<&'a [Bound<'py, PyAny>]> {
    image.ok_or_else(|| PyRuntimeError::new_err("an event's typed values are missing"))
}

fn typed_updated_row<'py>(
    py: Python<'py>,
    new: &UpdatedRow,
    typed: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyTuple>> {
    match new {
        UpdatedRow::Full(_) => PyTuple::new(
            py,
            [
                ("full").into_pyobject(py)?.into_any(),
                typed_tuple(py, typed.iter().cloned())?,
            ],
        ),
        UpdatedRow::Partial {
            missing_column_indexes,
            ..
        } => {
            let known = typed
                .iter()
                .enumerate()
                .filter(|(j, _)| !missing_column_indexes.contains(j))
                .map(|(_, v)| v.clone());
            PyTuple::new(
                py,
                [
                    ("partial").into_pyobject(py)?.into_any(),
                    typed_tuple(py, known)?,
                    PyList::new(py, missing_column_indexes)?.into_any(),
                ],
            )
        }
    }
}

fn typed_old_row<'py>(
    py: Python<'py>,
    relation: &Relation,
    old: &OldRow,
    typed: &[Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyTuple>> {
    match old {
        OldRow::Full(raw) => {
            // An unchanged-TOAST marker in an old image stays the marker, not None.
            let marker = unchanged_toast(py)?.bind(py).clone().into_any();
            let values = typed.iter().zip(raw).map(|(v, r)| {
                if matches!(r, Value::UnchangedToast) {
                    marker.clone()
                } else {
                    v.clone()
                }
            });
            PyTuple::new(
                py,
                [
                    ("full").into_pyobject(py)?.into_any(),
                    typed_tuple(py, values)?,
                ],
            )
        }
        OldRow::Key(_) => {
            let keys = typed
                .iter()
                .zip(&relation.columns)
                .filter(|(_, c)| c.is_key)
                .map(|(v, _)| v.clone());
            PyTuple::new(
                py,
                [
                    ("key").into_pyobject(py)?.into_any(),
                    typed_tuple(py, keys)?,
                ],
            )
        }
    }
}

fn relation_attrs(py: Python<'_>, d: &Bound<'_, PyDict>, rel: &Relation) -> PyResult<()> {
    d.set_item("table", &rel.qualified_name)?;
    d.set_item("relation_id", rel.oid)?;
    d.set_item(
        "replica_identity",
        char::from(rel.replica_identity).to_string(),
    )?;
    let cols = rel
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.type_modifier, c.is_key).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("columns", PyList::new(py, cols)?)?;
    Ok(())
}

fn prepare_attrs(py: Python<'_>, d: &Bound<'_, PyDict>, p: &PrepareData) -> PyResult<()> {
    d.set_item("gid", &p.gid)?;
    d.set_item("flags", p.flags)?;
    d.set_item("prepare_lsn", p.prepare_lsn)?;
    d.set_item("end_lsn", p.end_lsn)?;
    d.set_item("prepare_ts", timestamp(py, p.timestamp)?)?;
    Ok(())
}

impl PyEvent {
    /// The Python event of `event`; `typed` holds its row images as typed values
    /// (`typed.rs`), the wire form stays under the `wire_` names.
    #[allow(
        clippy::too_many_lines,
        reason = "one arm per event kind, each a few attributes"
    )]
    pub fn from_event<'py>(py: Python<'py>, event: &Event, typed: &Images<'py>) -> PyResult<Self> {
        let (new, old) = (typed.new.as_deref(), typed.old.as_deref());
        let d = PyDict::new(py);
        if let Some(ts) = event.meta.commit_timestamp {
            d.set_item("commit_ts", timestamp(py, ts)?)?;
        }
        match &event.body {
            EventBody::Begin {
                final_lsn,
                timestamp: ts,
            } => {
                d.set_item("final_lsn", final_lsn)?;
                d.set_item("timestamp", ts)?;
            }
            EventBody::Commit {
                flags,
                commit_lsn: _,
                end_lsn,
                timestamp: ts,
            }
            | EventBody::StreamCommit {
                flags,
                commit_lsn: _,
                end_lsn,
                timestamp: ts,
            } => {
                d.set_item("flags", flags)?;
                d.set_item("end_lsn", end_lsn)?;
                d.set_item("timestamp", ts)?;
            }
            EventBody::Origin { origin_lsn, name } => {
                d.set_item("origin_lsn", origin_lsn)?;
                d.set_item("origin_name", name)?;
            }
            EventBody::Relation(rel) => relation_attrs(py, &d, rel)?,
            EventBody::Type(t) => {
                d.set_item("type_oid", t.oid)?;
                d.set_item("type_namespace", &t.namespace)?;
                d.set_item("type_name", &t.name)?;
            }
            EventBody::Insert {
                relation,
                row: values,
            } => {
                d.set_item("table", &relation.qualified_name)?;
                if typed.values {
                    d.set_item("table_row", typed_tuple(py, image(new)?.iter().cloned())?)?;
                }
                d.set_item("wire_table_row", row(py, values)?)?;
            }
            EventBody::Update {
                relation,
                new: new_row,
                old: old_image,
            } => {
                d.set_item("table", &relation.qualified_name)?;
                if typed.values {
                    d.set_item(
                        "updated_table_row",
                        typed_updated_row(py, new_row, image(new)?)?,
                    )?;
                }
                d.set_item("wire_updated_table_row", updated_row(py, new_row)?)?;
                if let Some(o) = old_image {
                    if typed.values {
                        let old = typed_old_row(py, relation, o, image(old)?)?;
                        d.set_item("old_table_row", old)?;
                    }
                    d.set_item("wire_old_table_row", old_row(py, o)?)?;
                } else {
                    d.set_item("old_table_row", py.None())?;
                    d.set_item("wire_old_table_row", py.None())?;
                }
            }
            EventBody::Delete {
                relation,
                old: old_image,
            } => {
                d.set_item("table", &relation.qualified_name)?;
                if typed.values {
                    d.set_item(
                        "old_table_row",
                        typed_old_row(py, relation, old_image, image(old)?)?,
                    )?;
                }
                d.set_item("wire_old_table_row", old_row(py, old_image)?)?;
            }
            EventBody::Truncate { relations, options } => {
                let names = relations
                    .iter()
                    .map(|r| r.qualified_name.as_str())
                    .collect::<Vec<_>>();
                d.set_item("tables", PyList::new(py, names)?)?;
                d.set_item("options", options)?;
            }
            EventBody::Message {
                transactional,
                message_lsn,
                prefix,
                content,
            } => {
                d.set_item("transactional", transactional)?;
                d.set_item("message_lsn", message_lsn)?;
                d.set_item("prefix", prefix)?;
                d.set_item("content", PyBytes::new(py, content))?;
            }
            EventBody::StreamStart { first_segment } => {
                d.set_item("first_segment", first_segment)?;
            }
            EventBody::StreamStop => {}
            EventBody::StreamAbort {
                subxid,
                abort_lsn,
                abort_timestamp,
            } => {
                d.set_item("subxid", subxid)?;
                d.set_item("abort_lsn", abort_lsn)?;
                match abort_timestamp {
                    Some(ts) => d.set_item("abort_ts", timestamp(py, *ts)?)?,
                    None => d.set_item("abort_ts", py.None())?,
                }
            }
            EventBody::BeginPrepare(p) | EventBody::Prepare(p) | EventBody::StreamPrepare(p) => {
                prepare_attrs(py, &d, p)?;
            }
            EventBody::CommitPrepared {
                flags,
                commit_lsn: _,
                end_lsn,
                timestamp: ts,
                gid,
            } => {
                d.set_item("gid", gid)?;
                d.set_item("flags", flags)?;
                d.set_item("end_lsn", end_lsn)?;
                d.set_item("timestamp", ts)?;
            }
            EventBody::RollbackPrepared {
                flags,
                prepare_end_lsn,
                rollback_end_lsn,
                prepare_timestamp,
                rollback_timestamp,
                gid,
            } => {
                d.set_item("gid", gid)?;
                d.set_item("flags", flags)?;
                d.set_item("prepare_end_lsn", prepare_end_lsn)?;
                d.set_item("rollback_end_lsn", rollback_end_lsn)?;
                d.set_item("prepare_ts", timestamp(py, *prepare_timestamp)?)?;
                d.set_item("rollback_ts", timestamp(py, *rollback_timestamp)?)?;
            }
        }
        Ok(Self {
            kind: event.body.kind(),
            start_lsn: event.meta.start_lsn,
            commit_lsn: event.meta.commit_lsn,
            tx_ordinal: event.meta.tx_ordinal,
            xid: event.meta.xid,
            attrs: d.unbind(),
        })
    }
}
