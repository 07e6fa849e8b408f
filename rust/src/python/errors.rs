//! The one place where Rust errors become `pgwire_cdc.errors` exceptions.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::error::{DecodeError, Reason};

static DECODE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static COLUMN_VALUE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn errors_class(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<Py<PyType>> {
    cell.get_or_try_init(py, || {
        let module = py.import("pgwire_cdc.errors")?;
        Ok::<_, PyErr>(module.getattr(name)?.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.clone_ref(py))
}

/// `pgwire_cdc.errors.DecodeError`, with the message kind, the byte offset and, for
/// `feed_many`, the index of the failing message. Never any row value.
pub fn decode_error(py: Python<'_>, err: &DecodeError, index: Option<usize>) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = match &err.reason {
            Reason::Value { .. } => errors_class(py, &COLUMN_VALUE_ERROR, "ColumnValueError")?,
            _ => errors_class(py, &DECODE_ERROR, "DecodeError")?,
        };
        let mut message = err.to_string();
        if let Some(i) = index {
            message = format!("message #{i}: {message}");
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("message_kind", err.kind.name())?;
        kwargs.set_item("offset", err.offset)?;
        kwargs.set_item("reason", err.reason.to_string())?;
        kwargs.set_item("index", index)?;
        if let Reason::Value {
            table, column, lsn, ..
        } = &err.reason
        {
            kwargs.set_item("table", table)?;
            kwargs.set_item("column", column)?;
            kwargs.set_item("lsn", lsn)?;
        }
        let instance = class.bind(py).call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|e| e)
}

/// `ColumnValueError` for rows the change tables rejected: the first one, and how many.
pub fn rejected_rows_error(py: Python<'_>, errors: &[DecodeError]) -> PyErr {
    let Some(first) = errors.first() else {
        return pyo3::exceptions::PyRuntimeError::new_err("no rejected rows");
    };
    let err = decode_error(py, first, None);
    let note = format!(
        "{} row(s) were left out of the change tables; this is the first. \
         Call take() again for the other rows.",
        errors.len()
    );
    match err.value(py).call_method1("add_note", (note,)) {
        Ok(_) => err,
        Err(e) => e,
    }
}

/// An instance of `pgwire_cdc.errors.<class_name>` (falling back to `Error`) with `message`.
pub fn pgwire_error(py: Python<'_>, class_name: &str, message: &str) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = py.import("pgwire_cdc.errors")?;
        let class = module
            .getattr(class_name)
            .or_else(|_| module.getattr("Error"))?;
        Ok(PyErr::from_value(class.call1((message,))?))
    };
    build().unwrap_or_else(|e| e)
}
