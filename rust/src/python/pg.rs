//! `_native.PgConnection` and `_native.PgReplicationStream`: a thin test surface over the
//! Rust client (`crate::pg`) for tests/client/test_pg_client.py, compiled only with the Cargo
//! feature `test-client` (`make build`; not the shipped wheel). Every network wait runs
//! with the GIL released; errors become `pgwire_cdc.errors` exceptions in `errors.rs`.

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::pg::{
    ConnParams, Connection, PgError, ReplicationMessage, ReplicationStream, SnapshotAction,
};

use super::errors::pg_error;

fn lock<'a, T>(cell: &'a Mutex<Option<T>>, what: &str) -> PyResult<MutexGuard<'a, Option<T>>> {
    // try_lock: waiting for another thread while holding the GIL could deadlock.
    cell.try_lock().map_err(|e| match e {
        TryLockError::WouldBlock => {
            PyRuntimeError::new_err(format!("this {what} is in use by another thread"))
        }
        TryLockError::Poisoned(_) => {
            PyRuntimeError::new_err(format!("this {what} is unusable after an earlier failure"))
        }
    })
}

fn closed(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!("this {what} is closed"))
}

/// A PostgreSQL connection, normal or `replication=database`.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "PgConnection")]
pub struct PyPgConnection {
    conn: Mutex<Option<Connection>>,
    server_version: u32,
    ssl_in_use: bool,
    backend_pid: u32,
}

impl PyPgConnection {
    fn wrap(conn: Connection) -> Self {
        PyPgConnection {
            server_version: conn.server_version_num(),
            ssl_in_use: conn.ssl_in_use(),
            backend_pid: conn.backend_pid(),
            conn: Mutex::new(Some(conn)),
        }
    }

    /// Runs `f` on the connection with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Connection) -> Result<T, PgError> + Send,
    ) -> PyResult<T> {
        let mut guard = lock(&self.conn, "PgConnection")?;
        let conn = guard.as_mut().ok_or_else(|| closed("PgConnection"))?;
        py.detach(|| f(conn)).map_err(|e| pg_error(py, &e))
    }
}

fn row_tuple(py: Python<'_>, row: Vec<Option<String>>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, row)
}

#[pymethods]
impl PyPgConnection {
    #[new]
    #[pyo3(signature = (dsn, replication = false))]
    fn new(py: Python<'_>, dsn: &str, replication: bool) -> PyResult<Self> {
        let params = ConnParams::parse(dsn).map_err(|e| pg_error(py, &e))?;
        let conn = py
            .detach(|| Connection::connect(&params, replication))
            .map_err(|e| pg_error(py, &e))?;
        Ok(Self::wrap(conn))
    }

    /// server_version_num, e.g. 150004.
    #[getter]
    fn server_version(&self) -> u32 {
        self.server_version
    }

    #[getter]
    fn ssl_in_use(&self) -> bool {
        self.ssl_in_use
    }

    #[getter]
    fn backend_pid(&self) -> u32 {
        self.backend_pid
    }

    /// A parameter the server reported at start-up or since (ParameterStatus).
    fn parameter(&self, name: &str) -> PyResult<Option<String>> {
        let guard = lock(&self.conn, "PgConnection")?;
        let conn = guard.as_ref().ok_or_else(|| closed("PgConnection"))?;
        Ok(conn.parameter(name).map(str::to_owned))
    }

    /// Simple query: the rows of the last result set, values as text.
    fn query<'py>(&self, py: Python<'py>, sql: &str) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let rows = self.with(py, |c| c.simple_query(sql))?;
        rows.into_iter().map(|row| row_tuple(py, row)).collect()
    }

    /// `COPY ... TO STDOUT`: (row count, all CopyData bytes concatenated).
    fn copy_out<'py>(&self, py: Python<'py>, sql: &str) -> PyResult<(u64, Bound<'py, PyBytes>)> {
        let (count, data) = self.with(py, |c| {
            let mut data = Vec::new();
            let count = c.copy_out(sql, &mut |chunk| {
                data.extend_from_slice(chunk);
                Ok(())
            })?;
            Ok((count, data))
        })?;
        Ok((count, PyBytes::new(py, &data)))
    }

    /// IDENTIFY_SYSTEM: (system_id, timeline, xlogpos, dbname).
    fn identify_system(&self, py: Python<'_>) -> PyResult<(String, u32, u64, Option<String>)> {
        let info = self.with(py, Connection::identify_system)?;
        Ok((info.system_id, info.timeline, info.xlogpos, info.dbname))
    }

    /// CREATE_REPLICATION_SLOT ... LOGICAL pgoutput: (slot_name, consistent_point,
    /// snapshot_name, plugin). `snapshot` is "export", "nothing" or "use".
    #[pyo3(signature = (name, temporary = false, snapshot = "export"))]
    fn create_slot(
        &self,
        py: Python<'_>,
        name: &str,
        temporary: bool,
        snapshot: &str,
    ) -> PyResult<(String, u64, Option<String>, Option<String>)> {
        let action = match snapshot {
            "export" => SnapshotAction::Export,
            "nothing" => SnapshotAction::NoExport,
            "use" => SnapshotAction::Use,
            other => {
                return Err(PyValueError::new_err(format!(
                    "snapshot must be \"export\", \"nothing\" or \"use\" (got {other:?})"
                )))
            }
        };
        let slot = self.with(py, |c| c.create_logical_slot(name, temporary, action))?;
        Ok((
            slot.slot_name,
            slot.consistent_point,
            slot.snapshot_name,
            slot.plugin,
        ))
    }

    #[pyo3(signature = (name, wait = false))]
    fn drop_slot(&self, py: Python<'_>, name: &str, wait: bool) -> PyResult<()> {
        self.with(py, |c| c.drop_slot(name, wait))
    }

    /// START_REPLICATION: this connection becomes the returned stream (and is closed).
    fn start_replication(
        &self,
        py: Python<'_>,
        slot: &str,
        start_lsn: u64,
        options: Vec<(String, String)>,
    ) -> PyResult<PyPgReplicationStream> {
        let conn = lock(&self.conn, "PgConnection")?
            .take()
            .ok_or_else(|| closed("PgConnection"))?;
        let options: Vec<(&str, String)> = options
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        let stream = py
            .detach(|| conn.start_logical_replication(slot, start_lsn, &options))
            .map_err(|e| pg_error(py, &e))?;
        Ok(PyPgReplicationStream {
            server_version: stream.server_version_num(),
            stream: Mutex::new(Some(stream)),
        })
    }

    /// Sends Terminate and closes the socket; later calls raise.
    fn close(&self) -> PyResult<()> {
        if let Some(conn) = lock(&self.conn, "PgConnection")?.take() {
            conn.close();
        }
        Ok(())
    }
}

/// The COPY BOTH stream after START_REPLICATION.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "PgReplicationStream")]
pub struct PyPgReplicationStream {
    stream: Mutex<Option<ReplicationStream>>,
    server_version: u32,
}

#[pymethods]
impl PyPgReplicationStream {
    #[getter]
    fn server_version(&self) -> u32 {
        self.server_version
    }

    /// The next message, or None after `timeout` seconds without one:
    /// `("w", wal_start, wal_end, server_clock, data)` for XLogData,
    /// `("k", wal_end, server_clock, reply_requested)` for a keepalive.
    fn recv<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let timeout = Duration::try_from_secs_f64(timeout).map_err(|_| {
            PyValueError::new_err("timeout must be a non-negative number of seconds")
        })?;
        let mut guard = lock(&self.stream, "PgReplicationStream")?;
        let stream = guard
            .as_mut()
            .ok_or_else(|| closed("PgReplicationStream"))?;
        let message = py
            .detach(|| stream.recv(timeout))
            .map_err(|e| pg_error(py, &e))?;
        let tuple = match message {
            None => return Ok(None),
            Some(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_clock,
                data,
            }) => (
                "w",
                wal_start,
                wal_end,
                server_clock,
                PyBytes::new(py, data),
            )
                .into_pyobject(py)?,
            Some(ReplicationMessage::Keepalive {
                wal_end,
                server_clock,
                reply_requested,
            }) => ("k", wal_end, server_clock, reply_requested).into_pyobject(py)?,
        };
        Ok(Some(tuple))
    }

    /// Standby status update with the written, flushed and applied LSNs.
    #[pyo3(signature = (write, flush, apply, reply_requested = false))]
    fn send_status(
        &self,
        py: Python<'_>,
        write: u64,
        flush: u64,
        apply: u64,
        reply_requested: bool,
    ) -> PyResult<()> {
        let mut guard = lock(&self.stream, "PgReplicationStream")?;
        let stream = guard
            .as_mut()
            .ok_or_else(|| closed("PgReplicationStream"))?;
        py.detach(|| stream.send_status(write, flush, apply, reply_requested))
            .map_err(|e| pg_error(py, &e))
    }

    /// Ends the stream (CopyDone) and returns the connection for more commands.
    fn finish(&self, py: Python<'_>) -> PyResult<PyPgConnection> {
        let stream = lock(&self.stream, "PgReplicationStream")?
            .take()
            .ok_or_else(|| closed("PgReplicationStream"))?;
        let conn = py
            .detach(|| stream.finish())
            .map_err(|e| pg_error(py, &e))?;
        Ok(PyPgConnection::wrap(conn))
    }

    /// Drops the connection without ending the stream politely.
    fn close(&self) -> PyResult<()> {
        lock(&self.stream, "PgReplicationStream")?.take();
        Ok(())
    }
}
