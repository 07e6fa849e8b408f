//! Held transactions: the messages of a transaction that cannot be delivered yet because
//! its outcome is not known, kept in arrival order until it is.
//!
//! Two protocol features make the decoder hold messages:
//!
//! * Streamed transactions (protocol 2+, `streaming` on). The server does not wait for a
//!   large transaction to commit: once it outgrows `logical_decoding_work_mem` it is sent
//!   while it still runs, in blocks framed by Stream Start and Stream Stop, interleaved
//!   with other transactions. Whether it commits is only known at its Stream Commit (or
//!   its Stream Abort, which drops it, or drops one of its subtransactions). Its messages
//!   are held per top-level xid until then.
//! * Two-phase transactions (protocol 3+, `two_phase` on). `PREPARE TRANSACTION` makes the
//!   server send the transaction, framed by Begin Prepare and Prepare (or, when it was
//!   streamed, closed by Stream Prepare), at prepare time; whether it takes effect is
//!   decided later by COMMIT PREPARED or ROLLBACK PREPARED. Its messages are held by GID
//!   until then.
//!
//! A single `INSERT … SELECT` of millions of rows is hundreds of megabytes of messages, so
//! held messages live in memory only up to a limit shared by every held transaction
//! ([`SpillConfig::memory_limit`]); past it, a transaction's further messages are appended
//! to its own spill file, a temporary file in [`SpillConfig::dir`]. Failing to create,
//! write or read back that file is a [`SpillError`], never a decoding error: the stream is
//! fine, the directory is not.
//!
//! A spill file is unlinked right after it is created: it has no name, only the open file
//! descriptor, so it disappears when the transaction is delivered or aborted, and also
//! when the process dies (nothing to clean up after a crash, and no row values left on
//! disk under a name).
//!
//! Order is kept: a transaction's messages in memory all precede its spilled ones.
//! A Stream Abort of a subtransaction drops that subtransaction's messages from memory
//! at once; spilled ones are skipped when the file is read back.
//!
//! Only the decoder uses this module; the one part of it others see is [`SpillConfig`].

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{RelationMap, Resolved};
use crate::error::SpillError;
use crate::protocol::Lsn;

/// Where held transactions go once they outgrow memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillConfig {
    /// Bytes of held messages (all held transactions together) kept in memory; further
    /// messages go to disk. 0 spills everything.
    pub memory_limit: usize,
    /// Directory of the temporary files; `None`: the system's temporary directory.
    pub dir: Option<PathBuf>,
}

impl SpillConfig {
    pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;

    fn dir(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(std::env::temp_dir)
    }
}

impl Default for SpillConfig {
    fn default() -> Self {
        Self {
            memory_limit: Self::DEFAULT_MEMORY_LIMIT,
            dir: None,
        }
    }
}

/// What held transactions cost, shared by all of them (and by a transaction being
/// replayed).
#[derive(Debug, Default)]
pub(super) struct Budget {
    in_memory: AtomicU64,
    spilled: AtomicU64,
}

impl Budget {
    /// Bytes of held messages in memory now.
    pub(super) fn in_memory(&self) -> u64 {
        self.in_memory.load(Ordering::Relaxed)
    }

    /// Bytes written to spill files since the decoder was made.
    pub(super) fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::Relaxed)
    }
}

/// A held message of a streamed or prepared transaction.
#[derive(Debug)]
pub(super) struct HeldMessage {
    pub lsn: Lsn,
    pub bytes: Box<[u8]>,
    pub in_stream: bool,
    /// The (sub)transaction xid a streamed data message carries: a Stream Abort of that
    /// subtransaction drops it.
    pub subxid: Option<u32>,
    pub resolved: Resolved,
}

impl HeldMessage {
    /// What the message is charged against the memory limit: its bytes plus bookkeeping.
    fn cost(&self) -> u64 {
        (self.bytes.len() + std::mem::size_of::<Self>()) as u64
    }
}

/// The messages of one held transaction, in arrival order.
#[derive(Debug)]
pub(super) struct HeldTx {
    /// In memory; all of them arrived before any spilled one.
    messages: Vec<HeldMessage>,
    /// What `messages` is charged to the budget.
    charged: u64,
    spill: Option<SpillWriter>,
    /// Subtransactions aborted after spilling began: their spilled messages are skipped.
    aborted: HashSet<u32>,
    budget: Arc<Budget>,
    /// Relation descriptions sent inside a streamed transaction, in force for it only.
    pub relations: RelationMap,
}

impl HeldTx {
    pub(super) fn new(budget: &Arc<Budget>) -> Self {
        Self {
            messages: Vec::new(),
            charged: 0,
            spill: None,
            aborted: HashSet::new(),
            budget: Arc::clone(budget),
            relations: RelationMap::default(),
        }
    }

    /// Adds a message: in memory while the budget allows, else (and from then on, to keep
    /// the order) to this transaction's spill file.
    pub(super) fn push(
        &mut self,
        message: HeldMessage,
        config: &SpillConfig,
    ) -> Result<(), SpillError> {
        let cost = message.cost();
        if self.spill.is_none() && self.budget.in_memory() + cost <= config.memory_limit as u64 {
            self.budget.in_memory.fetch_add(cost, Ordering::Relaxed);
            self.charged += cost;
            self.messages.push(message);
            return Ok(());
        }
        let spill = match &mut self.spill {
            Some(spill) => spill,
            None => self.spill.insert(SpillWriter::create(config)?),
        };
        let written = spill.write(&message)?;
        self.budget.spilled.fetch_add(written, Ordering::Relaxed);
        Ok(())
    }

    /// A Stream Abort of subtransaction `subxid`: its data messages are dropped.
    /// Schema messages stay: pgoutput will not send them again for this transaction.
    pub(super) fn abort_subtransaction(&mut self, subxid: u32) {
        self.messages.retain(|m| m.subxid != Some(subxid));
        let charged: u64 = self.messages.iter().map(HeldMessage::cost).sum();
        self.budget
            .in_memory
            .fetch_sub(self.charged - charged, Ordering::Relaxed);
        self.charged = charged;
        if self.spill.is_some() {
            self.aborted.insert(subxid);
        }
    }

    /// Reads the transaction back, in order, for delivery.
    pub(super) fn into_reader(mut self) -> Result<HeldReader, SpillError> {
        let spill = match self.spill.take() {
            Some(writer) => Some(writer.into_reader()?),
            None => None,
        };
        let aborted = std::mem::take(&mut self.aborted);
        Ok(HeldReader {
            held: self,
            next: 0,
            spill,
            aborted,
            buf: Vec::new(),
        })
    }
}

impl Drop for HeldTx {
    fn drop(&mut self) {
        self.budget
            .in_memory
            .fetch_sub(self.charged, Ordering::Relaxed);
    }
}

/// One held message as read back: borrowed from memory or from the read buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeldRef<'a> {
    pub lsn: Lsn,
    pub bytes: &'a [u8],
    pub in_stream: bool,
    pub resolved: &'a Resolved,
}

/// A held transaction being delivered: its in-memory messages, then its spilled ones.
#[derive(Debug)]
pub(super) struct HeldReader {
    held: HeldTx,
    next: usize,
    spill: Option<SpillReader>,
    aborted: HashSet<u32>,
    buf: Vec<u8>,
}

impl HeldReader {
    /// The next message, `None` after the last.
    pub(super) fn next_message(&mut self) -> Result<Option<HeldRef<'_>>, SpillError> {
        if let Some(m) = self.held.messages.get(self.next) {
            self.next += 1;
            return Ok(Some(HeldRef {
                lsn: m.lsn,
                bytes: &m.bytes,
                in_stream: m.in_stream,
                resolved: &m.resolved,
            }));
        }
        let Some(spill) = &mut self.spill else {
            return Ok(None);
        };
        loop {
            let Some(header) = spill.next_header(&mut self.buf)? else {
                return Ok(None);
            };
            if header.subxid.is_some_and(|x| self.aborted.contains(&x)) {
                continue;
            }
            let resolved = spill.resolutions.get(header.resolution).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "spill record out of range")
            })?;
            return Ok(Some(HeldRef {
                lsn: header.lsn,
                bytes: &self.buf,
                in_stream: header.in_stream,
                resolved,
            }));
        }
    }
}

/// Names spill files uniquely within the process (the pid separates processes).
static SPILL_FILES: AtomicU64 = AtomicU64::new(0);

/// A transaction's spill file being written.
///
/// Record layout (native endianness; the file never outlives the process): LSN (u64),
/// flags (u8: 1 = inside a streamed block, 2 = carries a subtransaction xid), subxid
/// (u32), index into `resolutions` (u32), length (u32), the message bytes.
#[derive(Debug)]
struct SpillWriter {
    file: BufWriter<File>,
    /// What the spilled messages were resolved against, each distinct one once (the
    /// rows of a bulk insert share one relation).
    resolutions: Vec<Resolved>,
}

const RECORD_HEADER: usize = 8 + 1 + 4 + 4 + 4;

impl SpillWriter {
    fn create(config: &SpillConfig) -> io::Result<Self> {
        let dir = config.dir();
        let n = SPILL_FILES.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("pgwire_cdc-held-{}-{n}.spill", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| with_path(&e, &dir))?;
        // Unnamed from now on: gone with the descriptor, whatever happens to the process.
        std::fs::remove_file(&path).map_err(|e| with_path(&e, &dir))?;
        Ok(Self {
            file: BufWriter::with_capacity(1 << 20, file),
            resolutions: Vec::new(),
        })
    }

    fn resolution_index(&mut self, resolved: &Resolved) -> u32 {
        if let Some(last) = self.resolutions.last() {
            if last.same_as(resolved) {
                return (self.resolutions.len() - 1) as u32;
            }
        }
        self.resolutions.push(resolved.clone());
        (self.resolutions.len() - 1) as u32
    }

    /// Appends one record; returns the bytes written.
    fn write(&mut self, m: &HeldMessage) -> io::Result<u64> {
        let resolution = self.resolution_index(&m.resolved);
        let len = u32::try_from(m.bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message over 4 GiB"))?;
        let flags = u8::from(m.in_stream) | (u8::from(m.subxid.is_some()) << 1);
        self.file.write_all(&m.lsn.to_ne_bytes())?;
        self.file.write_all(&[flags])?;
        self.file.write_all(&m.subxid.unwrap_or(0).to_ne_bytes())?;
        self.file.write_all(&resolution.to_ne_bytes())?;
        self.file.write_all(&len.to_ne_bytes())?;
        self.file.write_all(&m.bytes)?;
        Ok((RECORD_HEADER + m.bytes.len()) as u64)
    }

    fn into_reader(self) -> io::Result<SpillReader> {
        let mut file = self
            .file
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?;
        file.seek(SeekFrom::Start(0))?;
        Ok(SpillReader {
            file: BufReader::with_capacity(1 << 20, file),
            resolutions: self.resolutions,
        })
    }
}

struct RecordHeader {
    lsn: Lsn,
    in_stream: bool,
    subxid: Option<u32>,
    resolution: usize,
}

#[derive(Debug)]
struct SpillReader {
    file: BufReader<File>,
    resolutions: Vec<Resolved>,
}

impl SpillReader {
    /// Reads the next record's header, and its bytes into `buf`.
    fn next_header(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<RecordHeader>> {
        let mut lsn = [0u8; 8];
        match self.file.read_exact(&mut lsn) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut flags = [0u8; 1];
        self.file.read_exact(&mut flags)?;
        let subxid = read_u32(&mut self.file)?;
        let resolution = read_u32(&mut self.file)?;
        let len = read_u32(&mut self.file)?;
        buf.clear();
        buf.resize(len as usize, 0);
        self.file.read_exact(buf)?;
        let [flags] = flags;
        Ok(Some(RecordHeader {
            lsn: Lsn::from_ne_bytes(lsn),
            in_stream: flags & 1 != 0,
            subxid: (flags & 2 != 0).then_some(subxid),
            resolution: resolution as usize,
        }))
    }
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_ne_bytes(b))
}

fn with_path(e: &io::Error, dir: &std::path::Path) -> io::Error {
    io::Error::new(e.kind(), format!("spill directory {}: {e}", dir.display()))
}
