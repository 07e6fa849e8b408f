//! The consistent initial snapshot: the published rows as of the slot's exported snapshot.
//!
//! `CREATE_REPLICATION_SLOT … (SNAPSHOT 'export')` returns the slot's consistent point and
//! the name of a snapshot that sees exactly the transactions committed before it. Every
//! worker connection imports it (`SET TRANSACTION SNAPSHOT` inside a REPEATABLE READ
//! transaction) before the replication connection runs its next command — that ends the
//! export — so [`SnapshotReader::start`] returns only once every worker holds it. Then the
//! workers run the planned `COPY … TO STDOUT (FORMAT BINARY)` statements (one per table,
//! or one per CTID block range of a large table) in parallel, decode the rows in Rust and
//! hand Arrow batches over a bounded channel (the consumer's pace bounds memory).
//!
//! Rows read under the snapshot plus the changes streamed from the consistent point give
//! every row exactly once: the slot sends precisely the transactions that committed after
//! the snapshot.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::ArrowError;

use crate::arrow::{meta, Segment};
use crate::error::DecodeError;
use crate::pg::{ConnParams, Connection, PgError};
use crate::relation::Relation;
use crate::snapshot::copy::SnapshotError as CopyError;
use crate::snapshot::{CopyBinaryDecoder, SnapshotMeta};

/// One COPY statement and the relation its rows belong to.
#[derive(Debug, Clone)]
pub struct SnapshotTask {
    pub relation: Arc<Relation>,
    /// `COPY (SELECT <published columns> FROM … [WHERE …]) TO STDOUT (FORMAT BINARY)`.
    pub sql: String,
}

#[derive(Debug, Clone)]
pub struct SnapshotConfig {
    pub snapshot_name: String,
    pub consistent_point: u64,
    /// Connections copying at once.
    pub workers: usize,
    /// Rows per Arrow batch handed over.
    pub batch_rows: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("building Arrow tables failed: {0}")]
    Arrow(#[from] ArrowError),
    /// Rows whose values the change tables cannot hold (the first, and how many).
    #[error("{first} ({count} row(s) rejected)")]
    Values { first: DecodeError, count: usize },
    #[error("a snapshot worker stopped unexpectedly")]
    WorkerLost,
}

impl From<CopyError> for SnapshotError {
    fn from(e: CopyError) -> Self {
        match e {
            CopyError::Decode(e) => Self::Decode(e),
            CopyError::Rejected(mut errors) => {
                let count = errors.len();
                if errors.is_empty() {
                    Self::WorkerLost
                } else {
                    Self::Values {
                        first: errors.swap_remove(0),
                        count,
                    }
                }
            }
            CopyError::Arrow(e) => Self::Arrow(e),
        }
    }
}

/// What [`SnapshotReader::next`] saw.
#[derive(Debug)]
pub enum SnapshotPoll {
    Batch(Segment),
    /// Nothing arrived within the timeout.
    Waiting,
    /// Every task is copied.
    Done,
}

type Item = Result<Segment, SnapshotError>;

/// Parallel snapshot copy; see the module documentation.
pub struct SnapshotReader {
    rx: Receiver<Item>,
    cancel: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    /// `_tx_ordinal` of the next row handed out: snapshot rows are numbered 0, 1, … in
    /// the order they are delivered, so `(_commit_lsn, _tx_ordinal)` stays unique.
    next_ordinal: u64,
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Opens a worker connection holding the exported snapshot.
fn import_snapshot(params: &ConnParams, snapshot: &str) -> Result<Connection, PgError> {
    let mut conn = Connection::connect(params, false)?;
    conn.simple_query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
    conn.simple_query(&format!(
        "SET TRANSACTION SNAPSHOT {}",
        quote_literal(snapshot)
    ))?;
    Ok(conn)
}

struct Worker {
    conn: Connection,
    tasks: Arc<Mutex<VecDeque<SnapshotTask>>>,
    tx: SyncSender<Item>,
    cancel: Arc<AtomicBool>,
    consistent_point: u64,
    batch_rows: usize,
}

impl Worker {
    fn run(mut self) {
        let result = self.copy_all();
        if let Err(e) = result {
            self.cancel.store(true, Ordering::SeqCst);
            let _ = self.tx.send(Err(e));
        } else {
            let _ = self.conn.simple_query("COMMIT");
            self.conn.close();
        }
    }

    fn next_task(&self) -> Option<SnapshotTask> {
        if self.cancel.load(Ordering::SeqCst) {
            return None;
        }
        self.tasks.lock().ok()?.pop_front()
    }

    fn copy_all(&mut self) -> Result<(), SnapshotError> {
        while let Some(task) = self.next_task() {
            let mut decoder = CopyBinaryDecoder::new(
                Arc::clone(&task.relation),
                SnapshotMeta {
                    consistent_point: self.consistent_point,
                    first_ordinal: 0,
                },
            );
            let table = task.relation.qualified_name.clone();
            // The callback can only return a PgError; the real cause is kept here.
            let mut failure: Option<SnapshotError> = None;
            let (tx, cancel, batch_rows) = (&self.tx, &self.cancel, self.batch_rows);
            let copied = self.conn.copy_out(&task.sql, &mut |chunk| {
                let mut step = || -> Result<(), SnapshotError> {
                    decoder.feed(chunk)?;
                    if decoder.rows() >= batch_rows {
                        let batch = decoder.take_batch()?;
                        send(tx, cancel, &table, batch)?;
                    }
                    Ok(())
                };
                step().map_err(|e| {
                    failure = Some(e);
                    PgError::Protocol("snapshot copy stopped".to_owned())
                })
            });
            if let Some(e) = failure {
                return Err(e);
            }
            copied?;
            let batch = decoder.finish()?;
            if batch.num_rows() > 0 {
                send(&self.tx, &self.cancel, &table, batch)?;
            }
        }
        Ok(())
    }
}

fn send(
    tx: &SyncSender<Item>,
    cancel: &AtomicBool,
    table: &str,
    batch: RecordBatch,
) -> Result<(), SnapshotError> {
    if cancel.load(Ordering::SeqCst) {
        return Err(SnapshotError::WorkerLost);
    }
    tx.send(Ok(Segment {
        table: table.to_owned(),
        batch,
    }))
    .map_err(|_| SnapshotError::WorkerLost)
}

impl SnapshotReader {
    /// Opens `config.workers` connections, imports the snapshot on each, and starts
    /// copying. Returns once every connection holds the snapshot (the caller may then
    /// use the replication connection again).
    pub fn start(
        params: &ConnParams,
        config: &SnapshotConfig,
        tasks: Vec<SnapshotTask>,
    ) -> Result<Self, SnapshotError> {
        let workers = config.workers.clamp(1, tasks.len().max(1));
        // Import first, on this thread: the export must not end before every worker
        // has it, and a failure here is reported before anything is copied.
        let conns = (0..workers)
            .map(|_| import_snapshot(params, &config.snapshot_name))
            .collect::<Result<Vec<_>, _>>()?;
        let (tx, rx) = mpsc::sync_channel(workers * 2);
        let cancel = Arc::new(AtomicBool::new(false));
        let queue = Arc::new(Mutex::new(VecDeque::from(tasks)));
        let mut handles = Vec::with_capacity(workers);
        for (i, conn) in conns.into_iter().enumerate() {
            let worker = Worker {
                conn,
                tasks: Arc::clone(&queue),
                tx: tx.clone(),
                cancel: Arc::clone(&cancel),
                consistent_point: config.consistent_point,
                batch_rows: config.batch_rows.max(1),
            };
            let handle = std::thread::Builder::new()
                .name(format!("pgwire-cdc-snapshot-{i}"))
                .spawn(move || worker.run())
                .map_err(|_| SnapshotError::WorkerLost)?;
            handles.push(handle);
        }
        Ok(Self {
            rx,
            cancel,
            workers: handles,
            next_ordinal: 0,
        })
    }

    /// The next batch, waiting at most `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Result<SnapshotPoll, SnapshotError> {
        match self.rx.recv_timeout(timeout) {
            Ok(Ok(segment)) => Ok(SnapshotPoll::Batch(self.number(segment)?)),
            Ok(Err(e)) => {
                self.cancel.store(true, Ordering::SeqCst);
                Err(e)
            }
            Err(RecvTimeoutError::Timeout) => Ok(SnapshotPoll::Waiting),
            Err(RecvTimeoutError::Disconnected) => {
                // Every worker dropped its sender: all finished (errors were sent first).
                for handle in self.workers.drain(..) {
                    if handle.join().is_err() {
                        return Err(SnapshotError::WorkerLost);
                    }
                }
                Ok(SnapshotPoll::Done)
            }
        }
    }

    /// Renumbers `_tx_ordinal` in delivery order.
    fn number(&mut self, segment: Segment) -> Result<Segment, SnapshotError> {
        let batch = segment.batch;
        let schema = batch.schema();
        let Ok(index) = schema.index_of(meta::TX_ORDINAL) else {
            return Ok(Segment {
                table: segment.table,
                batch,
            });
        };
        let rows = batch.num_rows() as u64;
        let start = self.next_ordinal;
        self.next_ordinal += rows;
        let ordinals: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (start..start + rows).map(|o| o as i64),
        ));
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        if let Some(slot) = columns.get_mut(index) {
            debug_assert_eq!(slot.len(), ordinals.len());
            *slot = ordinals;
        }
        Ok(Segment {
            table: segment.table,
            batch: RecordBatch::try_new(schema, columns)?,
        })
    }
}

impl Drop for SnapshotReader {
    fn drop(&mut self) {
        // Workers notice at their next batch and stop; their connections end with them.
        self.cancel.store(true, Ordering::SeqCst);
    }
}
