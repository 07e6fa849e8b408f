//! The live client for `pgwire_cdc.stream()`: a replication connection, the snapshot
//! reader and the streaming session. Every network wait runs with the GIL released;
//! the orchestration (which slot, which snapshot, when to reconnect) is Python's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::PyBytes;

use crate::arrow::Segment;
use crate::decoder::SpillConfig;
use crate::live::session::LiveError;
use crate::live::snapshot::{
    SnapshotConfig, SnapshotError, SnapshotPoll, SnapshotReader, SnapshotTask,
};
use crate::live::{BatchLimits, LiveSession, StartOptions, Stop};
use crate::pg::{ConnParams, Connection, SnapshotAction};
use crate::relation::BaseType;

use super::arrow::PyArrowStream;
use super::errors::{decode_error, pg_error, pgwire_error, rejected_rows_error};
use super::snapshot::{catalog_relation, CatalogColumn};

/// `(oid, schema, table, replica_identity, columns, copy_sql)`.
type TaskSpec = (u32, String, String, String, Vec<CatalogColumn>, String);
type SegmentsOut = Vec<(String, PyArrowStream)>;
/// Notes handed to Python: `(lsn, content, prefix, place)`, place `(commit_lsn,
/// tx_ordinal)` of a transactional message, else None.
type NotesOut<'py> = Vec<(u64, Bound<'py, PyBytes>, String, Option<(u64, u64)>)>;

fn live_error(py: Python<'_>, e: &LiveError) -> PyErr {
    match e {
        LiveError::Pg(e) => pg_error(py, e),
        LiveError::Decode(e) => decode_error(py, e, None),
        LiveError::Values { first, .. } => rejected_rows_error(py, std::slice::from_ref(first)),
        other => pgwire_error(py, "Error", &other.to_string()),
    }
}

fn snapshot_error(py: Python<'_>, e: &SnapshotError) -> PyErr {
    match e {
        SnapshotError::Pg(e) => pg_error(py, e),
        SnapshotError::Decode(e) => decode_error(py, e, None),
        SnapshotError::Values { first, .. } => rejected_rows_error(py, std::slice::from_ref(first)),
        other => pgwire_error(py, "Error", &other.to_string()),
    }
}

fn segments_out(segments: Vec<Segment>) -> SegmentsOut {
    segments
        .into_iter()
        .map(|s| (s.table, PyArrowStream::new(s.batch.schema(), vec![s.batch])))
        .collect()
}

fn locked<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> PyResult<MutexGuard<'a, T>> {
    // Waits for the lock without blocking other Python threads (the holder may need the
    // GIL to finish).
    m.lock_py_attached(py)
        .map_err(|_| pgwire_error(py, "Error", "connection state is poisoned"))
}

/// How a streaming session runs, resolved once per `stream()` run from its
/// `StreamOptions` and the server (python/pgwire_cdc/streaming.py) and checked and
/// converted here, once. Where a session starts is `start_streaming`'s.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "SessionOptions")]
pub struct PySessionOptions {
    publication_names: Vec<String>,
    proto_version: u32,
    binary: bool,
    messages: bool,
    streaming: bool,
    status_interval: Duration,
    stall_timeout: Option<Duration>,
    spill: SpillConfig,
    types: Vec<(u32, BaseType)>,
    note_prefixes: Vec<String>,
}

#[pymethods]
impl PySessionOptions {
    /// `type_map`: user type OID to `(base type OID, type modifier)`;
    /// `stall_timeout_ms` None or 0: never give up on a silent server.
    #[new]
    #[pyo3(signature = (*, publication_names, proto_version, binary, messages = true,
                        streaming = true, status_interval_ms = 10_000, stall_timeout_ms = None,
                        type_map = HashMap::new(),
                        spill_threshold = SpillConfig::DEFAULT_MEMORY_LIMIT, spill_dir = None,
                        note_prefixes = Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        publication_names: Vec<String>,
        proto_version: u32,
        binary: bool,
        messages: bool,
        streaming: bool,
        status_interval_ms: u64,
        stall_timeout_ms: Option<u64>,
        type_map: HashMap<u32, (u32, i32)>,
        spill_threshold: usize,
        spill_dir: Option<PathBuf>,
        note_prefixes: Vec<String>,
    ) -> PyResult<Self> {
        if !(1..=4).contains(&proto_version) {
            return Err(PyValueError::new_err("proto_version must be 1 to 4"));
        }
        let types = type_map
            .into_iter()
            .map(|(oid, (base, modifier))| {
                (
                    oid,
                    BaseType {
                        oid: base,
                        type_modifier: modifier,
                    },
                )
            })
            .collect();
        Ok(Self {
            publication_names,
            proto_version,
            binary,
            messages,
            streaming,
            status_interval: Duration::from_millis(status_interval_ms.max(100)),
            stall_timeout: stall_timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            spill: SpillConfig {
                memory_limit: spill_threshold,
                dir: spill_dir,
            },
            types,
            note_prefixes,
        })
    }
}

impl PySessionOptions {
    /// The session's options when it starts at `start_lsn` of `slot`.
    fn start_options(
        &self,
        slot: String,
        start_lsn: u64,
        acked_lsn: u64,
        skip_through: Option<(u64, u64)>,
    ) -> StartOptions {
        StartOptions {
            slot,
            start_lsn,
            proto_version: self.proto_version,
            binary: self.binary,
            publication_names: self.publication_names.clone(),
            messages: self.messages,
            streaming: self.streaming,
            status_interval: self.status_interval,
            acked_lsn,
            skip_through,
            stall_timeout: self.stall_timeout,
            spill: self.spill.clone(),
            note_prefixes: self.note_prefixes.clone(),
        }
    }
}

/// Why `LiveStream.poll` returned (`crate::live::Stop`).
#[pyclass(eq, hash, frozen, module = "pgwire_cdc._native", name = "Stop")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyStop {
    /// Nothing to hand out yet; poll again.
    #[pyo3(name = "PENDING")]
    Pending,
    /// The batch reached `max_rows` or `max_bytes`.
    #[pyo3(name = "FULL")]
    Full,
    /// The batch's first message is `max_ms` old.
    #[pyo3(name = "WAITED")]
    Waited,
    /// Everything committed up to `until_lsn` is in this or earlier batches.
    #[pyo3(name = "UNTIL_LSN")]
    UntilLsn,
    /// `idle_timeout_ms` passed without a message.
    #[pyo3(name = "IDLE")]
    Idle,
}

impl From<Stop> for PyStop {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Pending => Self::Pending,
            Stop::Full => Self::Full,
            Stop::Waited => Self::Waited,
            Stop::UntilLsn => Self::UntilLsn,
            Stop::Idle => Self::Idle,
        }
    }
}

/// A `replication=database` connection before streaming: slot commands and SQL.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "ReplicationConnection")]
pub struct PyReplicationConnection {
    params: ConnParams,
    conn: Mutex<Option<Connection>>,
    server_version: u32,
}

impl PyReplicationConnection {
    fn with_conn<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Connection) -> Result<R, crate::pg::PgError> + Send,
    ) -> PyResult<R> {
        let mut guard = locked(py, &self.conn)?;
        let conn = guard
            .as_mut()
            .ok_or_else(|| pgwire_error(py, "ConnectionError", "the connection is closed"))?;
        py.detach(|| f(conn)).map_err(|e| pg_error(py, &e))
    }
}

#[pymethods]
impl PyReplicationConnection {
    /// `settings`: run-time parameters sent in the startup packet of this connection and
    /// of every snapshot worker it starts, so that all of them print values alike.
    #[new]
    #[pyo3(signature = (dsn, settings = Vec::new()))]
    fn new(py: Python<'_>, dsn: &str, settings: Vec<(String, String)>) -> PyResult<Self> {
        let mut params = ConnParams::parse(dsn).map_err(|e| pg_error(py, &e))?;
        for (name, value) in &settings {
            params.set_startup_parameter(name, value);
        }
        let conn = py
            .detach(|| Connection::connect(&params, true))
            .map_err(|e| pg_error(py, &e))?;
        Ok(Self {
            server_version: conn.server_version_num(),
            params,
            conn: Mutex::new(Some(conn)),
        })
    }

    #[getter]
    fn server_version(&self) -> u32 {
        self.server_version
    }

    /// `(systemid, timeline, xlogpos, dbname)`.
    fn identify_system(&self, py: Python<'_>) -> PyResult<(String, u32, u64, Option<String>)> {
        let info = self.with_conn(py, Connection::identify_system)?;
        Ok((info.system_id, info.timeline, info.xlogpos, info.dbname))
    }

    /// Creates a logical pgoutput slot; `(slot_name, consistent_point, snapshot_name)`.
    #[pyo3(signature = (name, *, temporary = false, export_snapshot = false))]
    fn create_slot(
        &self,
        py: Python<'_>,
        name: String,
        temporary: bool,
        export_snapshot: bool,
    ) -> PyResult<(String, u64, Option<String>)> {
        let action = if export_snapshot {
            SnapshotAction::Export
        } else {
            SnapshotAction::NoExport
        };
        let created =
            self.with_conn(py, move |c| c.create_logical_slot(&name, temporary, action))?;
        Ok((
            created.slot_name,
            created.consistent_point,
            created.snapshot_name,
        ))
    }

    #[pyo3(signature = (name, wait = false))]
    fn drop_slot(&self, py: Python<'_>, name: String, wait: bool) -> PyResult<()> {
        self.with_conn(py, move |c| c.drop_slot(&name, wait))
    }

    /// Simple-query SQL on the replication connection (text values).
    fn query(&self, py: Python<'_>, sql: String) -> PyResult<Vec<Vec<Option<String>>>> {
        self.with_conn(py, move |c| c.simple_query(&sql))
    }

    /// Starts the snapshot copy on `workers` new connections that import
    /// `snapshot_name`; returns once all of them hold it.
    #[pyo3(signature = (snapshot_name, consistent_point, tasks, *, workers = 1, batch_rows = 65_536))]
    fn start_snapshot(
        &self,
        py: Python<'_>,
        snapshot_name: String,
        consistent_point: u64,
        tasks: Vec<TaskSpec>,
        workers: usize,
        batch_rows: usize,
    ) -> PyResult<PySnapshotReader> {
        let tasks = tasks
            .into_iter()
            .map(|(oid, namespace, name, identity, columns, sql)| {
                Ok(SnapshotTask {
                    relation: Arc::new(catalog_relation(
                        oid, &namespace, &name, &identity, columns,
                    )?),
                    sql,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let config = SnapshotConfig {
            snapshot_name,
            consistent_point,
            workers,
            batch_rows,
        };
        let params = &self.params;
        let reader = py
            .detach(|| SnapshotReader::start(params, &config, tasks))
            .map_err(|e| snapshot_error(py, &e))?;
        Ok(PySnapshotReader {
            reader: Mutex::new(Some(reader)),
        })
    }

    /// Turns this connection into a streaming session (the connection is used up) that
    /// starts at `start_lsn` of `slot`, reporting `acked_lsn` as flushed until the
    /// consumer acks more, and skipping the rows through `skip_through`
    /// (`(commit_lsn, tx_ordinal)`) of the transaction an earlier session left unfinished.
    #[pyo3(signature = (slot, start_lsn, options, *, acked_lsn = 0, skip_through = None))]
    fn start_streaming(
        &self,
        py: Python<'_>,
        slot: String,
        start_lsn: u64,
        options: PyRef<'_, PySessionOptions>,
        acked_lsn: u64,
        skip_through: Option<(u64, u64)>,
    ) -> PyResult<PyLiveStream> {
        let start = options.start_options(slot, start_lsn, acked_lsn, skip_through);
        let types = options.types.clone();
        drop(options);
        let conn = locked(py, &self.conn)?
            .take()
            .ok_or_else(|| pgwire_error(py, "ConnectionError", "the connection is closed"))?;
        let session = py
            .detach(|| LiveSession::start(conn, &start, types))
            .map_err(|e| live_error(py, &e))?;
        let interval = session.status_interval();
        let session = Arc::new(Mutex::new(session));
        spawn_keeper(Arc::downgrade(&session), interval);
        Ok(PyLiveStream { session })
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(conn) = locked(py, &self.conn)?.take() {
            py.detach(|| conn.close());
        }
        Ok(())
    }
}

/// The snapshot copy in progress.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "SnapshotReader")]
pub struct PySnapshotReader {
    reader: Mutex<Option<SnapshotReader>>,
}

#[pymethods]
impl PySnapshotReader {
    /// The next batch `(table, ArrowStream)`, `None` when nothing arrived within
    /// `timeout_ms`; raises `StopIteration` when every table is copied.
    fn next_batch(
        &self,
        py: Python<'_>,
        timeout_ms: u64,
    ) -> PyResult<Option<(String, PyArrowStream)>> {
        let mut guard = locked(py, &self.reader)?;
        let Some(reader) = guard.as_mut() else {
            return Err(pyo3::exceptions::PyStopIteration::new_err(()));
        };
        let polled = py.detach(|| reader.next(Duration::from_millis(timeout_ms)));
        match polled {
            Ok(SnapshotPoll::Batch(s)) => Ok(Some((
                s.table,
                PyArrowStream::new(s.batch.schema(), vec![s.batch]),
            ))),
            Ok(SnapshotPoll::Waiting) => Ok(None),
            Ok(SnapshotPoll::Done) => {
                *guard = None;
                Err(pyo3::exceptions::PyStopIteration::new_err(()))
            }
            Err(e) => {
                *guard = None;
                Err(snapshot_error(py, &e))
            }
        }
    }

    /// Stops the workers (their connections end with them).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        locked(py, &self.reader)?.take();
        Ok(())
    }
}

/// A streaming session.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "LiveStream")]
pub struct PyLiveStream {
    session: Arc<Mutex<LiveSession>>,
}

/// Keeps the replication connection alive while the consumer is busy with a batch: every
/// half status interval, if the session is not being polled (the lock is free), it sends
/// a status update when one is due. Ends with the session (or on its first error: the
/// next poll reports the broken connection).
fn spawn_keeper(session: Weak<Mutex<LiveSession>>, interval: Duration) {
    let tick = (interval / 2).max(Duration::from_millis(50));
    let _ = std::thread::Builder::new()
        .name("pgwire-cdc-keepalive".to_owned())
        .spawn(move || loop {
            std::thread::sleep(tick);
            let Some(session) = session.upgrade() else {
                return;
            };
            let mut session = match session.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Poisoned(_)) => return,
            };
            if session.keep_alive().is_err() {
                return;
            }
        });
}

#[pymethods]
impl PyLiveStream {
    /// Reads until a batch is due or `slice_ms` passes: `(segments, batch_lsn, stop, notes)`.
    #[pyo3(signature = (*, max_rows, max_bytes, max_ms, until_lsn = None, idle_timeout_ms = None,
                        slice_ms = 200, idle_confirm_limit = None))]
    #[allow(clippy::too_many_arguments)]
    fn poll<'py>(
        &self,
        py: Python<'py>,
        max_rows: usize,
        max_bytes: usize,
        max_ms: u64,
        until_lsn: Option<u64>,
        idle_timeout_ms: Option<u64>,
        slice_ms: u64,
        idle_confirm_limit: Option<u64>,
    ) -> PyResult<(SegmentsOut, u64, PyStop, NotesOut<'py>)> {
        let limits = BatchLimits {
            max_rows,
            max_bytes,
            max_wait: Duration::from_millis(max_ms),
            until_lsn,
            idle_timeout: idle_timeout_ms.map(Duration::from_millis),
            idle_confirm_limit,
        };
        let mut guard = locked(py, &self.session)?;
        let session: &mut LiveSession = &mut guard;
        let polled = py
            .detach(|| session.poll(&limits, Duration::from_millis(slice_ms)))
            .map_err(|e| live_error(py, &e))?;
        Ok((
            segments_out(polled.segments),
            polled.lsn,
            polled.stop.into(),
            polled
                .notes
                .iter()
                .map(|n| {
                    (
                        n.lsn,
                        PyBytes::new(py, &n.content),
                        n.prefix.clone(),
                        n.place,
                    )
                })
                .collect(),
        ))
    }

    /// The consumer made everything up to `lsn` durable. A lost connection is not an
    /// error here: the position is kept, and the next poll raises `ConnectionError`.
    fn ack(&self, py: Python<'_>, lsn: u64) -> PyResult<()> {
        let mut guard = locked(py, &self.session)?;
        let session: &mut LiveSession = &mut guard;
        py.detach(|| session.ack(lsn))
            .map_err(|e| live_error(py, &e))
    }

    #[getter]
    fn delivered_lsn(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(locked(py, &self.session)?.delivered_lsn())
    }

    #[getter]
    fn acked_lsn(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(locked(py, &self.session)?.acked_lsn())
    }

    /// `(commit_lsn, tx_ordinal)` of the last row handed out when the last batch ended
    /// inside a transaction, else None: a resumed session skips those rows.
    #[getter]
    fn partial_transaction(&self, py: Python<'_>) -> PyResult<Option<(u64, u64)>> {
        Ok(locked(py, &self.session)?.partial_transaction())
    }

    /// Reports the acked position and ends the stream.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = locked(py, &self.session)?;
        let session: &mut LiveSession = &mut guard;
        py.detach(|| session.close())
            .map_err(|e| live_error(py, &e))
    }
}
