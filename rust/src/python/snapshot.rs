//! `pgwire_cdc._native.CopyDecoder`: one table's COPY BINARY snapshot data into a change
//! table of `read` rows (see `crate::snapshot`).

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use crate::relation::{Column, Relation};
use crate::snapshot::{select_list, CopyBinaryDecoder, SnapshotError, SnapshotMeta};

use super::arrow::PyArrowStream;
use super::errors::{decode_error, rejected_rows_error};

/// A column as the catalog describes it (`pgwire_cdc.catalog.ColumnInfo`): (name,
/// type_oid, base_type_oid, type_modifier, base_type_modifier, is_key).
pub type CatalogColumn = (String, u32, u32, i32, i32, bool);

/// A relation from the catalog's description (the snapshot's; the stream's comes from
/// Relation messages, resolved with the same type map).
pub fn catalog_relation(
    table_oid: u32,
    namespace: &str,
    name: &str,
    replica_identity: &str,
    columns: Vec<CatalogColumn>,
) -> PyResult<Relation> {
    let identity = match replica_identity.as_bytes() {
        [b @ (b'd' | b'n' | b'f' | b'i')] => *b,
        _ => {
            return Err(PyValueError::new_err(format!(
                "replica_identity must be one of 'd', 'n', 'f', 'i' \
                 (pg_class.relreplident), got {replica_identity:?}"
            )))
        }
    };
    let columns = columns
        .into_iter()
        .map(
            |(name, type_oid, base_type_oid, type_modifier, base_type_modifier, is_key)| Column {
                name,
                type_oid,
                base_type_oid,
                type_modifier,
                base_type_modifier,
                is_key,
            },
        )
        .collect();
    Ok(Relation::from_catalog(
        table_oid, namespace, name, identity, columns,
    ))
}

/// The Arrow schema of a table's change table, from its catalog description (the schema
/// the stream and the snapshot give it), as an empty Arrow stream.
#[pyfunction]
pub fn change_table_schema(
    table_oid: u32,
    namespace: &str,
    name: &str,
    replica_identity: &str,
    columns: Vec<CatalogColumn>,
) -> PyResult<PyArrowStream> {
    let relation = catalog_relation(table_oid, namespace, name, replica_identity, columns)?;
    Ok(PyArrowStream::new(
        crate::arrow::change_table_schema(&relation),
        Vec::new(),
    ))
}

#[pyclass(frozen, module = "pgwire_cdc._native", name = "CopyDecoder")]
pub struct PyCopyDecoder {
    state: Mutex<CopyBinaryDecoder>,
}

fn snapshot_error(py: Python<'_>, e: &SnapshotError) -> PyErr {
    match e {
        SnapshotError::Decode(e) => decode_error(py, e, None),
        SnapshotError::Rejected(errors) => rejected_rows_error(py, errors),
        SnapshotError::Arrow(e) => {
            PyRuntimeError::new_err(format!("building Arrow tables failed: {e}"))
        }
    }
}

impl PyCopyDecoder {
    /// Calls holding the GIL do not wait for a `feed_many` of another thread (waiting with
    /// the GIL held could deadlock): they fail instead.
    fn try_lock(&self) -> PyResult<MutexGuard<'_, CopyBinaryDecoder>> {
        self.state.try_lock().map_err(|e| match e {
            TryLockError::WouldBlock => {
                PyRuntimeError::new_err("this CopyDecoder is in use by another thread")
            }
            TryLockError::Poisoned(_) => poisoned(),
        })
    }

    fn batch(
        &self,
        py: Python<'_>,
        f: fn(&mut CopyBinaryDecoder) -> Result<arrow_array::RecordBatch, SnapshotError>,
    ) -> PyResult<PyArrowStream> {
        let mut state = self.try_lock()?;
        let batch = f(&mut state).map_err(|e| snapshot_error(py, &e))?;
        Ok(PyArrowStream::new(batch.schema(), vec![batch]))
    }
}

fn poisoned() -> PyErr {
    PyRuntimeError::new_err("CopyDecoder state is poisoned by an earlier failure")
}

#[pymethods]
impl PyCopyDecoder {
    #[new]
    #[pyo3(signature = (table_oid, namespace, name, replica_identity, columns, consistent_point, first_ordinal = 0))]
    fn new(
        table_oid: u32,
        namespace: &str,
        name: &str,
        replica_identity: &str,
        columns: Vec<CatalogColumn>,
        consistent_point: u64,
        first_ordinal: u64,
    ) -> PyResult<Self> {
        let relation = catalog_relation(table_oid, namespace, name, replica_identity, columns)?;
        let meta = SnapshotMeta {
            consistent_point,
            first_ordinal,
        };
        Ok(Self {
            state: Mutex::new(CopyBinaryDecoder::new(Arc::new(relation), meta)),
        })
    }

    /// `schema.table`, the key of the change table.
    #[getter]
    fn table(&self) -> PyResult<String> {
        Ok(self.try_lock()?.relation().qualified_name.clone())
    }

    /// The SELECT list of the snapshot query, `"a", "b"::text, ...`: the columns in order,
    /// quoted, with `::text` on the columns whose type has no binary parser (enum, citext,
    /// composite and extension types), which are then read as text.
    #[getter]
    fn select_list(&self) -> PyResult<String> {
        Ok(select_list(self.try_lock()?.relation()))
    }

    /// Rows decoded since the last `take` that it will return.
    #[getter]
    fn rows(&self) -> PyResult<usize> {
        Ok(self.try_lock()?.rows())
    }

    /// Tuples decoded from the stream so far (rows left out included).
    #[getter]
    fn tuples(&self) -> PyResult<u64> {
        Ok(self.try_lock()?.tuples())
    }

    /// True once the COPY trailer has been read.
    #[getter]
    fn complete(&self) -> PyResult<bool> {
        Ok(self.try_lock()?.is_complete())
    }

    /// The next bytes of the COPY stream (any split). One CopyData payload is small: it is
    /// decoded with the GIL held.
    fn feed(&self, py: Python<'_>, chunk: PyBackedBytes) -> PyResult<()> {
        self.try_lock()?
            .feed(&chunk)
            .map_err(|e| decode_error(py, &e, None))
    }

    /// Several chunks at once, decoded without the GIL (snapshot connections decode in
    /// parallel threads). On malformed data the error names the chunk's index; the chunks
    /// before it stay decoded.
    fn feed_many(&self, py: Python<'_>, chunks: Vec<PyBackedBytes>) -> PyResult<()> {
        let fed = py.detach(|| {
            let mut state = self.state.lock().map_err(|_| None)?;
            for (i, chunk) in chunks.iter().enumerate() {
                state.feed(chunk).map_err(|e| Some((i, e)))?;
            }
            Ok(())
        });
        fed.map_err(|e| match e {
            Some((i, e)) => decode_error(py, &e, Some(i)),
            None => poisoned(),
        })
    }

    /// The rows decoded since the last call, as an Arrow stream (`pa.table(...)`);
    /// decoding may go on. If rows were left out since then (a value the change table
    /// cannot hold), raises `ColumnValueError` for the first of them instead; the other
    /// rows come with the next call.
    fn take(&self, py: Python<'_>) -> PyResult<PyArrowStream> {
        self.batch(py, CopyBinaryDecoder::take_batch)
    }

    /// Like `take`, after checking that the stream is complete (header, tuples,
    /// trailer): a truncated stream raises `DecodeError`.
    fn finish(&self, py: Python<'_>) -> PyResult<PyArrowStream> {
        self.batch(py, CopyBinaryDecoder::finish)
    }
}
