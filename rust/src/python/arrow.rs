//! Arrow data out to Python without copying: the Arrow PyCapsule interface.
//!
//! [`PyArrowStream`] implements `__arrow_c_stream__`: pyarrow (`pa.table(obj)`,
//! `pa.RecordBatchReader.from_stream(obj)`) and any other consumer of the interface import
//! the batches' buffers as they are.

use std::sync::Mutex;

use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::SchemaRef;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

/// The batches of an object with `__arrow_c_stream__` (a `pyarrow.Table`, for example).
pub fn import_batches(obj: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    let capsule = obj
        .call_method0("__arrow_c_stream__")?
        .cast_into::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: a capsule named "arrow_array_stream" holds an `FFI_ArrowArrayStream` (the
    // Arrow PyCapsule interface). `from_raw` moves the stream out and leaves a released
    // one behind, which the capsule's destructor then leaves alone.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr().cast()) };
    let reader = ArrowArrayStreamReader::try_new(stream)
        .map_err(|e| PyValueError::new_err(format!("not a readable Arrow stream: {e}")))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("reading an Arrow stream: {e}")))?;
    Ok((schema, batches))
}

/// `mark_unchanged(table, names) -> ArrowStream`: the change table with `names` added to
/// `_unchanged` of its `read`, `insert` and `update` rows (`crate::arrow::mark_unchanged`).
#[pyfunction]
pub fn mark_unchanged(table: &Bound<'_, PyAny>, names: Vec<String>) -> PyResult<PyArrowStream> {
    let (schema, batches) = import_batches(table)?;
    let marked = batches
        .iter()
        .map(|b| crate::arrow::mark_unchanged(b, &names))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyArrowStream::new(schema, marked))
}

/// Record batches of one schema, handed out once through `__arrow_c_stream__`.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "ArrowStream")]
pub struct PyArrowStream {
    schema: SchemaRef,
    batches: Mutex<Option<Vec<RecordBatch>>>,
    rows: usize,
}

impl PyArrowStream {
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        Self {
            schema,
            batches: Mutex::new(Some(batches)),
            rows,
        }
    }
}

#[pymethods]
impl PyArrowStream {
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Schema negotiation is optional in the protocol; the batches keep their schema.
        let _ = requested_schema;
        let batches = self
            .batches
            .lock()
            .map_err(|_| PyRuntimeError::new_err("arrow stream state is poisoned"))?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this Arrow stream was already consumed"))?;
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), self.schema.clone());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    /// Rows in the stream.
    fn __len__(&self) -> usize {
        self.rows
    }
}
