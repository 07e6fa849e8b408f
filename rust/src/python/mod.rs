//! The PyO3 binding: `pgwire_cdc._native`. Thin by design: Rust values in, Python objects
//! out, errors mapped once (see `errors.rs`). The decoder itself knows nothing of Python.

// PyO3 extracts `#[pyfunction]` / `#[pymethods]` arguments such as `Vec<String>` and
// `PyBackedBytes` as owned values; a reference is not an option for them.
#![allow(clippy::needless_pass_by_value)]

mod arrow;
mod decoder;
#[cfg(feature = "delta")]
mod delta;
mod errors;
mod event;
mod live;
mod merge;
mod message_log;
#[cfg(feature = "test-client")]
mod pg;
mod policy;
mod snapshot;
mod typed;

use pyo3::prelude::*;

/// Whether binary-format values of this (built-in or catalog-resolved) type OID can be
/// decoded; other types need the text format.
#[pyfunction]
fn binary_decodable(oid: u32) -> bool {
    crate::values::PgType::from_oid(oid, -1).is_known()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<decoder::PyDecoder>()?;
    m.add_class::<event::PyEvent>()?;
    m.add_class::<arrow::PyArrowStream>()?;
    m.add_class::<snapshot::PyCopyDecoder>()?;
    m.add_class::<event::UnchangedToast>()?;
    m.add_class::<live::PyReplicationConnection>()?;
    m.add_class::<live::PySnapshotReader>()?;
    m.add_class::<live::PyLiveStream>()?;
    // The Delta deletion-vector writer (Cargo feature `delta`): absent from a build
    // without it, where the delta-rs writer MERGEs copy-on-write.
    #[cfg(feature = "delta")]
    m.add_class::<delta::PyDeltaDvTable>()?;
    m.add_function(wrap_pyfunction!(binary_decodable, m)?)?;
    m.add_function(wrap_pyfunction!(merge::apply_changes, m)?)?;
    m.add_function(wrap_pyfunction!(merge::reduce_changes, m)?)?;
    m.add_function(wrap_pyfunction!(merge::history_changes, m)?)?;
    m.add_function(wrap_pyfunction!(merge::row_digests, m)?)?;
    m.add_function(wrap_pyfunction!(policy::apply_column_policies, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::mark_unchanged, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot::change_table_schema, m)?)?;
    m.add(
        "METADATA_COLUMNS",
        pyo3::types::PyTuple::new(m.py(), crate::arrow::meta::ALL)?,
    )?;
    m.add_class::<live::PySessionOptions>()?;
    m.add_class::<live::PyStop>()?;
    // Test-only surface (Cargo feature `test-client`): not in the shipped wheel.
    #[cfg(feature = "test-client")]
    {
        m.add_class::<pg::PyPgConnection>()?;
        m.add_class::<pg::PyPgReplicationStream>()?;
    }
    m.add(
        "UNCHANGED_TOAST",
        event::unchanged_toast(m.py())?.clone_ref(m.py()),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Benchmarks refuse to measure a debug build.
    m.add(
        "BUILD_PROFILE",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    Ok(())
}
