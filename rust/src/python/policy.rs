//! `_native.apply_column_policies` (see `crate::policy`) for Python.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::arrow::{import_batches, PyArrowStream};
use crate::policy::{apply_policies, Policy};

/// `apply_column_policies(table, policies) -> ArrowStream`: the change table `table` with
/// each `(column, kind, data, n)` of `policies` applied (`kind`: drop, null, redact —
/// `data` the UTF-8 text —, hash — `data` the salt —, hmac — `data` the key —, truncate
/// and mask — `n` characters).
#[pyfunction]
#[pyo3(signature = (table, policies))]
pub fn apply_column_policies(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    policies: Vec<(String, String, Vec<u8>, usize)>,
) -> PyResult<PyArrowStream> {
    let mut by_column = HashMap::with_capacity(policies.len());
    for (column, kind, data, n) in policies {
        let policy = match kind.as_str() {
            "drop" => Policy::Drop,
            "null" => Policy::Null,
            "redact" => Policy::Redact(
                String::from_utf8(data)
                    .map_err(|_| PyValueError::new_err("a redact text must be UTF-8"))?,
            ),
            "hash" => Policy::Hash { salt: data },
            "hmac" => Policy::Hmac { key: data },
            "truncate" => Policy::Truncate(n),
            "mask" => Policy::Mask { keep: n },
            other => return Err(PyValueError::new_err(format!("no column policy {other:?}"))),
        };
        by_column.insert(column, policy);
    }
    let (schema, batches) = import_batches(table)?;
    let out = py
        .detach(|| {
            batches
                .iter()
                .map(|b| apply_policies(b, &by_column))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out_schema = if let Some(b) = out.first() {
        b.schema()
    } else {
        let empty = arrow_array::RecordBatch::new_empty(schema);
        apply_policies(&empty, &by_column)
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .schema()
    };
    Ok(PyArrowStream::new(out_schema, out))
}
