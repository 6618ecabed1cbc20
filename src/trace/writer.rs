//! The TraceWriter: persists provenance off the request path, as an actor on its own
//! thread.
//!
//! - **Owner.** The thread `ctxd-trace-writer` owns the [`TraceStore`] — this process's
//!   only write connection to it — and the batch being built. Nothing else touches
//!   either.
//! - **Mailbox.** A bounded crossbeam channel of `queue_capacity` traces (default 8192).
//!   [`TraceSender::enqueue`] serializes and seals a trace on the caller's thread (so the
//!   single writer thread only runs SQL), then `try_send`s it; while the queue is full
//!   it retries with short async sleeps until `wait` has passed and then returns
//!   [`Backpressure`]: the turn is answered 503, never silently untraced. Handle
//!   operation records ([`TraceSender::enqueue_handle_operation`]) share the queue, the
//!   batches and these rules: an operation whose record cannot be queued is answered
//!   503 too. Flush and shutdown go through a separate unbounded control channel, so
//!   they are heard even while the queue is full.
//! - **Batching.** A batch commits, in one transaction, when it holds `batch_size`
//!   traces or when its oldest trace has waited `batch_delay`, whichever comes first.
//!   The first trace of a batch wakes the writer; while the batch is open the writer
//!   does not wait on the queue (so enqueuing wakes no thread) but takes what is queued
//!   every [`OPEN_BATCH_POLL`] and at the deadline: a full batch commits at most that
//!   long after it fills, and a busy replica's writer wakes a few hundred times a
//!   second instead of once per turn.
//!   At start and every `purge_interval` the writer deletes retained content past its
//!   expiry.
//! - **Keep.** Between batches, as often as [`RecordKeeping::check_every`] says, the
//!   writer deletes each tenant's records past their keep (`[trace] keep`, a tenant's
//!   `trace_keep`): at most [`PRUNE_BATCH`] turns per tenant and transaction, then the
//!   next batch of traces; while a tenant has more to delete the next check comes after
//!   [`PRUNE_BACKLOG_PAUSE`]. Freed pages go back to the filesystem (new stores use
//!   incremental auto-vacuum) or stay on the free list for new rows.
//! - **Room.** After every commit and prune the writer measures the store (pages in use
//!   and the WAL) and the room on its filesystem. Every trace reserves
//!   [`DISK_BYTES_PER_RECORD_BYTE`](super::upkeep::DISK_BYTES_PER_RECORD_BYTE) times its encoded size while it is queued or being
//!   written; `enqueue` refuses a trace that would take the store past
//!   `max_store_bytes` or leave less than `min_free_bytes` on the disk
//!   ([`Backpressure::NoRoom`]), so a turn is refused with 503 before it could be
//!   answered untraced. The writer logs when the store runs out of room and when it has
//!   room again.
//! - **Failures.** A failed commit keeps its batch and retries it with backoff (10 ms
//!   doubling to 2 s), logging counts and the store error — never record content — and
//!   counting `write_errors`. While it retries it reads no new traces, so the queue
//!   fills and `enqueue` answers [`Backpressure::Full`]: if the disk stays broken, turns
//!   get `503 RUNTIME_UNAVAILABLE` rather than losing traces, memory stays bounded by the
//!   queue, and the writer keeps retrying until the disk recovers or shutdown. A
//!   [`TraceWriterHandle::flush`] waiting on a failing batch gets an error after
//!   [`FLUSH_GIVE_UP_ATTEMPTS`] attempts (the batch is still kept).
//! - **Shutdown.** [`TraceWriterHandle::shutdown`] — last in the ordered shutdown —
//!   closes the queue to new traces (`enqueue` then answers [`Backpressure::Stopped`]),
//!   drains everything already queued, commits it, and joins the thread. If the store
//!   still fails after [`SHUTDOWN_ATTEMPTS`] tries per batch, it returns
//!   [`WriterError::NotWritten`] with the number of traces lost, and logs it. Dropping the
//!   handle without `shutdown` does the same drain in the background without waiting;
//!   a killed process keeps every committed batch (WAL), and loses the queue.
//! - **Stores.** The thread writes through a [`TraceBackend`]: a SQLite file, or one
//!   connection to the PostgreSQL store replicas share ([`spawn_on`]). The rules above
//!   hold for both; on PostgreSQL the room check has no local disk to measure.
//! - **Errors.** [`WriterError`] is what the writer tells its owner (`serve`'s ordered
//!   start and shutdown) and flushing callers: the store could not be opened, the
//!   thread could not start, a batch keeps failing, traces were lost at shutdown. A
//!   single commit's [`StoreError`] stays inside the thread, where it is retried.

use super::record::TurnTrace;
use super::store::{
    HandleOperationRow, Pruned, Queued, RowEncoder, StoreError, StoreTarget, TraceBackend,
    TraceRows, Written, disk_available,
};
use super::upkeep::{NoRoom, RecordKeeping, StoreBounds, StoreUsage};
use crate::digest::DigestKey;
use crate::trace::record::HandleOpRecord;
use crossbeam_channel::{
    Receiver, RecvTimeoutError, Sender, TrySendError, bounded, select, unbounded,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the trace writer reports to its owner and to flushing callers. Messages name
/// the store and counts, never record content.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// Opening (or migrating) the store at start failed.
    #[error(transparent)]
    Open(#[from] StoreError),
    #[error("cannot start the trace writer thread: {0}")]
    Spawn(std::io::Error),
    #[error(
        "trace store {path}: {attempts} commit attempts in a row failed (last: {last_error}); the writer keeps the batch and retries"
    )]
    WriteFailing {
        path: PathBuf,
        attempts: u32,
        last_error: String,
    },
    #[error(
        "trace store {path}: {traces} traces could not be written before the writer stopped (last error: {last_error})"
    )]
    NotWritten {
        path: PathBuf,
        traces: usize,
        last_error: String,
    },
    #[error("the trace writer has stopped")]
    Stopped,
}

/// Name of the writer thread.
pub(crate) const THREAD_NAME: &str = "ctxd-trace-writer";
/// Failed attempts at one batch after which waiting flushes are answered with an error.
pub(crate) const FLUSH_GIVE_UP_ATTEMPTS: u32 = 5;
/// Attempts per batch at shutdown before the writer gives up on it.
pub(crate) const SHUTDOWN_ATTEMPTS: u32 = 3;
/// How often the writer takes what is queued while a batch is open.
pub(crate) const OPEN_BATCH_POLL: Duration = Duration::from_millis(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// First and longest sleep of `enqueue` while the queue is full.
const FIRST_PAUSE: Duration = Duration::from_micros(250);
const MAX_PAUSE: Duration = Duration::from_millis(10);
/// Most turns of one tenant one prune transaction deletes.
pub(crate) const PRUNE_BATCH: usize = 500;
/// The next prune check while a tenant still has records past their keep.
pub(crate) const PRUNE_BACKLOG_PAUSE: Duration = Duration::from_millis(50);
/// Free pages given back to the filesystem after a prune batch, at most.
const RELEASED_PAGES: u32 = 4096;
/// How often the store is measured and its oldest record's age exported when no keep
/// asks for more frequent checks.
const MEASURE_INTERVAL: Duration = Duration::from_secs(10);
/// How old the measure of the store's filesystem may be when a trace asks for room.
const DISK_RECHECK: Duration = Duration::from_millis(50);
/// The least size of "a typical trace" the room check keeps free for the next turn.
const MIN_TYPICAL_BYTES: u64 = 4096;

/// How the writer batches and how large its mailbox is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSettings {
    /// Traces the queue holds before `enqueue` waits (8192).
    pub(crate) queue_capacity: usize,
    /// Traces per transaction, at most (256).
    pub(crate) batch_size: usize,
    /// Longest a trace waits in a partial batch (50 ms).
    pub(crate) batch_delay: Duration,
    /// How often expired retained content is purged (60 s).
    pub(crate) purge_interval: Duration,
    /// How long each tenant's records are kept (kept until pruned by hand by default).
    pub(crate) keeping: RecordKeeping,
    /// The room the store may take (no bound of its own, nothing kept free by default).
    pub(crate) bounds: StoreBounds,
}

impl Default for WriterSettings {
    fn default() -> Self {
        WriterSettings {
            queue_capacity: 8192,
            batch_size: 256,
            batch_delay: Duration::from_millis(50),
            purge_interval: Duration::from_secs(60),
            keeping: RecordKeeping::default(),
            bounds: StoreBounds::default(),
        }
    }
}

/// Why a trace was not queued. Either way the caller answers 503: the trace was not
/// dropped silently, the turn was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Backpressure {
    #[error("the trace writer is not keeping up: its queue stayed full for {waited:?}")]
    Full { waited: Duration },
    #[error("the trace writer has stopped")]
    Stopped,
    /// Writing the trace would cross the store's or the disk's bound.
    #[error("{0}")]
    NoRoom(NoRoom),
}

/// A snapshot of the writer's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Batches committed.
    pub(crate) batches: u64,
    /// Turn records plus provider records committed.
    pub records: u64,
    /// Turns committed.
    pub(crate) turns: u64,
    /// Handle operation records committed.
    pub(crate) handle_operations: u64,
    /// Failed commit attempts (each retry counts).
    pub write_errors: u64,
    /// Retained items purged after their expiry.
    pub(crate) purged: u64,
    /// Turn records plus provider records deleted past their keep.
    pub(crate) pruned: u64,
    /// How long the last committed batch took.
    pub(crate) last_batch: Duration,
}

/// State shared by the senders, the handle and the thread.
#[derive(Default)]
struct Shared {
    bounds: StoreBounds,
    /// The store's file: its filesystem is measured again by whoever checks for room
    /// once the last measure is [`DISK_RECHECK`] old, so space taken by another process
    /// counts within that time even while no batch commits. `None` for PostgreSQL: the
    /// server's disk is not measured from here.
    store_path: Option<PathBuf>,
    /// When the filesystem was last measured, in ms since the epoch.
    disk_checked_ms: AtomicU64,
    /// Bytes of encoded rows queued or in the batch being written (see
    /// [`Queued::encoded_bytes`]).
    pending_bytes: AtomicU64,
    /// The writer's last measure of the store ([`StoreUsage`]); `disk_available` is
    /// `u64::MAX` when the filesystem could not be measured.
    used_bytes: AtomicU64,
    reusable_bytes: AtomicU64,
    disk_available: AtomicU64,
    pruned: AtomicU64,
    /// The mean encoded size of the last batch's traces (at least [`MIN_TYPICAL_BYTES`]):
    /// the room a turn about to start is expected to need.
    typical_bytes: AtomicU64,
    batches: AtomicU64,
    records: AtomicU64,
    turns: AtomicU64,
    handle_operations: AtomicU64,
    write_errors: AtomicU64,
    purged: AtomicU64,
    last_batch_micros: AtomicU64,
    /// Set when the writer starts its final drain: `enqueue` refuses from then on.
    closed: AtomicBool,
    /// `enqueue` calls between reading `closed` and finishing their `try_send`. The
    /// final drain waits for zero, so no trace lands in a queue nobody will read.
    sending: AtomicUsize,
}

impl Shared {
    fn snapshot(&self) -> WriterStats {
        WriterStats {
            batches: self.batches.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            turns: self.turns.load(Ordering::Relaxed),
            handle_operations: self.handle_operations.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            purged: self.purged.load(Ordering::Relaxed),
            pruned: self.pruned.load(Ordering::Relaxed),
            last_batch: Duration::from_micros(self.last_batch_micros.load(Ordering::Relaxed)),
        }
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage {
            used_bytes: self.used_bytes.load(Ordering::Relaxed),
            reusable_bytes: self.reusable_bytes.load(Ordering::Relaxed),
            disk_available: match self.disk_available.load(Ordering::Relaxed) {
                u64::MAX => None,
                bytes => Some(bytes),
            },
        }
    }

    /// Measures the store's filesystem again when the last measure is stale.
    fn recheck_disk(&self) {
        let now = now_ms();
        let last = self.disk_checked_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < DISK_RECHECK.as_millis() as u64
            || self
                .disk_checked_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Some(available) = self.store_path.as_deref().and_then(disk_available) {
            self.disk_available.store(available, Ordering::Relaxed);
        }
    }

    fn measured(&self, usage: StoreUsage) {
        self.disk_checked_ms.store(now_ms(), Ordering::Relaxed);
        self.used_bytes.store(usage.used_bytes, Ordering::Relaxed);
        self.reusable_bytes
            .store(usage.reusable_bytes, Ordering::Relaxed);
        self.disk_available
            .store(usage.disk_available.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Whether the store has room for what is in flight plus `extra` bytes.
    fn no_room(&self, extra: u64) -> Option<NoRoom> {
        self.recheck_disk();
        let pending = self.pending_bytes.load(Ordering::Relaxed);
        self.bounds
            .refusal(&self.usage(), pending.saturating_add(extra))
    }

    /// Whether the store lacks room for one more typical trace beyond what is in flight:
    /// the state `/readyz`, the turn's early check and the writer's log report.
    fn out_of_room(&self) -> Option<NoRoom> {
        self.no_room(
            self.typical_bytes
                .load(Ordering::Relaxed)
                .max(MIN_TYPICAL_BYTES),
        )
    }

    /// Reserves `bytes` for a trace about to be queued, or says why there is no room.
    fn reserve(&self, bytes: u64) -> Result<(), NoRoom> {
        self.recheck_disk();
        let pending = self.pending_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        match self.bounds.refusal(&self.usage(), pending) {
            None => Ok(()),
            Some(no_room) => {
                self.pending_bytes.fetch_sub(bytes, Ordering::AcqRel);
                Err(no_room)
            }
        }
    }

    fn release(&self, bytes: u64) {
        self.pending_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn committed(&self, written: Written, took: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.turns.fetch_add(written.turns, Ordering::Relaxed);
        self.handle_operations
            .fetch_add(written.handle_operations, Ordering::Relaxed);
        self.records
            .fetch_add(written.turns + written.provider_records, Ordering::Relaxed);
        self.last_batch_micros
            .store(took.as_micros() as u64, Ordering::Relaxed);
        crate::telemetry::metrics::TraceBatchWritten {
            records: written.turns + written.provider_records,
            duration: took,
        }
        .emit();
    }
}

/// Starts the writer thread. Opens (and migrates) the store first, so a bad path or a
/// store newer than this code fails here, before anything is served.
pub fn spawn(
    path: &Path,
    key: &DigestKey,
    settings: WriterSettings,
) -> Result<(TraceSender, TraceWriterHandle), WriterError> {
    spawn_on(&StoreTarget::Sqlite(path.to_path_buf()), key, settings)
}

/// [`spawn`] on either store: a SQLite file, or the PostgreSQL store replicas share.
pub fn spawn_on(
    target: &StoreTarget,
    key: &DigestKey,
    settings: WriterSettings,
) -> Result<(TraceSender, TraceWriterHandle), WriterError> {
    // Measured before the first trace is taken, so a store that is already full refuses
    // the first turn.
    let (store, usage, tenants) = TraceBackend::open_surveyed(target, key)?;
    let path = target.label();
    let settings = WriterSettings {
        queue_capacity: settings.queue_capacity.max(1),
        batch_size: settings.batch_size.max(1),
        ..settings
    };
    let (queue_tx, queue_rx) = bounded(settings.queue_capacity);
    let (control_tx, control_rx) = unbounded();
    let shared = Arc::new(Shared {
        bounds: settings.bounds,
        store_path: target.local_file().map(Path::to_path_buf),
        ..Shared::default()
    });
    shared.measured(usage);
    let writer = Writer {
        path,
        store,
        shared: Arc::clone(&shared),
        batch: Vec::with_capacity(settings.batch_size),
        batch_deadline: None,
        // Content that expired while the server was down goes first.
        next_purge: Instant::now(),
        next_upkeep: Instant::now(),
        prune_next_tenant: 0,
        tenants: tenants.into_iter().collect(),
        out_of_room: None,
        settings,
    };
    let thread = std::thread::Builder::new()
        .name(THREAD_NAME.to_owned())
        .spawn(move || writer.run(&queue_rx, &control_rx))
        .map_err(WriterError::Spawn)?;
    Ok((
        TraceSender {
            queue_tx,
            encoder: Arc::new(RowEncoder::new(key)),
            shared: Arc::clone(&shared),
        },
        TraceWriterHandle {
            control_tx,
            thread,
            shared,
        },
    ))
}

/// The writer's mailbox, for turn coordinators. Cheap to clone.
#[derive(Clone)]
pub struct TraceSender {
    queue_tx: Sender<Queued>,
    encoder: Arc<RowEncoder>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TraceSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSender")
            .field("queue_depth", &self.queue_depth())
            .finish_non_exhaustive()
    }
}

enum SendFailure {
    Full(Queued),
    Stopped,
}

impl TraceSender {
    /// Never blocks the calling thread (callers are async actix workers): `try_send` at
    /// once, and while the queue is full retry with short async sleeps until `wait` has
    /// passed; then `Err(Backpressure)` — the caller answers 503. Never a silent drop.
    pub async fn enqueue(&self, trace: TurnTrace, wait: Duration) -> Result<(), Backpressure> {
        let rows = self.encoder.encode(&trace);
        drop(trace);
        self.enqueue_rows(rows, wait).await
    }

    /// [`Self::enqueue`] for a turn already encoded (by a [`RowEncoder`] under the same
    /// digest key): what the trace writer bench queues, so that the writer and a plain
    /// insert of the same rows are timed over the same work.
    pub async fn enqueue_rows(&self, rows: TraceRows, wait: Duration) -> Result<(), Backpressure> {
        let started = Instant::now();
        if let Some(no_room) = self.shared.no_room(0) {
            return Err(Backpressure::NoRoom(no_room));
        }
        self.send_within(Queued::Turn(Box::new(rows)), started, wait)
            .await
    }

    /// Queues one handle operation record, under the same rules as [`Self::enqueue`]:
    /// never blocks the thread, `Err(Backpressure)` after `wait` (the caller answers
    /// 503).
    pub(crate) async fn enqueue_handle_operation(
        &self,
        record: &HandleOpRecord,
        wait: Duration,
    ) -> Result<(), Backpressure> {
        let started = Instant::now();
        let row = Queued::HandleOperation(Box::new(HandleOperationRow::encode(record)));
        self.send_within(row, started, wait).await
    }

    async fn send_within(
        &self,
        mut rows: Queued,
        started: Instant,
        wait: Duration,
    ) -> Result<(), Backpressure> {
        let bytes = rows.encoded_bytes();
        self.shared.reserve(bytes).map_err(Backpressure::NoRoom)?;
        let mut pause = FIRST_PAUSE;
        loop {
            match self.try_send(rows) {
                Ok(()) => return Ok(()),
                Err(SendFailure::Stopped) => {
                    self.shared.release(bytes);
                    return Err(Backpressure::Stopped);
                }
                Err(SendFailure::Full(back)) => {
                    rows = back;
                    let waited = started.elapsed();
                    if waited >= wait {
                        self.shared.release(bytes);
                        return Err(Backpressure::Full { waited });
                    }
                    tokio::time::sleep(pause.min(wait - waited)).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }

    fn try_send(&self, rows: Queued) -> Result<(), SendFailure> {
        self.shared.sending.fetch_add(1, Ordering::SeqCst);
        let result = if self.shared.closed.load(Ordering::SeqCst) {
            Err(SendFailure::Stopped)
        } else {
            self.queue_tx.try_send(rows).map_err(|error| match error {
                TrySendError::Full(rows) => SendFailure::Full(rows),
                TrySendError::Disconnected(_) => SendFailure::Stopped,
            })
        };
        self.shared.sending.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Traces waiting in the queue.
    pub(crate) fn queue_depth(&self) -> usize {
        self.queue_tx.len()
    }

    /// Why a turn would be refused now for want of room in the store, if it would:
    /// checked before a turn calls its providers, and shown by `/readyz`.
    pub(crate) fn no_room(&self) -> Option<NoRoom> {
        self.shared.out_of_room()
    }
}

enum Control {
    /// Commit everything queued when the writer reads this, then answer.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "only tests flush: they need commits they can observe"
        )
    )]
    Flush(Sender<Result<(), WriterError>>),
    /// Drain, commit and stop.
    Shutdown,
}

/// Controls the writer thread: flush, stats, and the final shutdown.
pub struct TraceWriterHandle {
    control_tx: Sender<Control>,
    thread: JoinHandle<Result<WriterStats, WriterError>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TraceWriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriterHandle")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl TraceWriterHandle {
    /// Blocks until everything enqueued before the call is committed. Errors when the
    /// store keeps failing (the writer keeps the batch and retries) or the writer has
    /// stopped.
    #[cfg(test)]
    pub(crate) fn flush(&self) -> Result<(), WriterError> {
        let (reply_tx, reply_rx) = bounded(1);
        self.control_tx
            .send(Control::Flush(reply_tx))
            .map_err(|_| WriterError::Stopped)?;
        reply_rx.recv().map_err(|_| WriterError::Stopped)?
    }

    /// Drains the queue, commits, stops the thread and joins it. Call last in the
    /// ordered shutdown.
    pub fn shutdown(self) -> Result<WriterStats, WriterError> {
        let _ = self.control_tx.send(Control::Shutdown);
        self.thread.join().unwrap_or_else(|_| {
            tracing::error!("the trace writer thread panicked");
            Err(WriterError::Stopped)
        })
    }

    /// Batches, records, write errors and the last batch's duration, for metrics.
    pub(crate) fn stats(&self) -> WriterStats {
        self.shared.snapshot()
    }
}

/// What the writer does after a commit attempt.
enum Step {
    Continue,
    /// Shutdown was requested (or the handle dropped) while a batch was failing.
    Stop,
}

/// The thread's state.
struct Writer {
    path: PathBuf,
    store: TraceBackend,
    shared: Arc<Shared>,
    settings: WriterSettings,
    batch: Vec<Queued>,
    /// When the oldest trace in `batch` must be committed.
    batch_deadline: Option<Instant>,
    next_purge: Instant,
    /// The next upkeep round: records past their keep, the store's measure.
    next_upkeep: Instant,
    /// Where the next upkeep round starts among `tenants`, so each gets its turn.
    prune_next_tenant: usize,
    /// Tenants with records in the store: read at start, grown by every commit.
    tenants: std::collections::BTreeSet<String>,
    /// Why the store had no room at the last measure, for logging the change.
    out_of_room: Option<NoRoom>,
}

impl Writer {
    fn run(
        mut self,
        queue_rx: &Receiver<Queued>,
        control_rx: &Receiver<Control>,
    ) -> Result<WriterStats, WriterError> {
        let never = crossbeam_channel::never();
        let mut queue_open = true;
        loop {
            let now = Instant::now();
            let upkeep = self.next_upkeep.min(self.next_purge);
            let mut wake = self
                .batch_deadline
                .map_or(upkeep, |deadline| deadline.min(upkeep));
            // An open batch polls the queue instead of waiting on it: senders then find
            // no waiting receiver to wake.
            let polling = queue_open && !self.batch.is_empty();
            if polling {
                wake = wake.min(later(now, OPEN_BATCH_POLL));
            }
            let queue = if queue_open && !polling {
                queue_rx
            } else {
                &never
            };
            select! {
                recv(queue) -> message => match message {
                    Ok(rows) => {
                        self.push(rows);
                        if let Step::Stop = self.take_queued(queue_rx, control_rx) {
                            return self.finish(queue_rx);
                        }
                    }
                    // Every sender is gone: commit what is left, keep serving control.
                    Err(_) => queue_open = false,
                },
                recv(control_rx) -> message => match message {
                    Ok(Control::Flush(reply)) => {
                        // Everything enqueued before `flush` was called is in the queue
                        // now; later traces may wait for their own batch.
                        for _ in 0..queue_rx.len() {
                            let Ok(rows) = queue_rx.try_recv() else { break };
                            self.push(rows);
                            if self.batch.len() >= self.settings.batch_size
                                && let Step::Stop = self.commit(Vec::new(), control_rx)
                            {
                                let _ = reply.send(Err(WriterError::Stopped));
                                return self.finish(queue_rx);
                            }
                        }
                        if let Step::Stop = self.commit(vec![reply], control_rx) {
                            return self.finish(queue_rx);
                        }
                    }
                    Ok(Control::Shutdown) | Err(_) => return self.finish(queue_rx),
                },
                default(wake.saturating_duration_since(now)) => {
                    if polling && let Step::Stop = self.take_queued(queue_rx, control_rx) {
                        return self.finish(queue_rx);
                    }
                }
            }
            let now = Instant::now();
            let due = self.batch_deadline.is_some_and(|deadline| now >= deadline)
                || (!queue_open && !self.batch.is_empty());
            if due && let Step::Stop = self.commit(Vec::new(), control_rx) {
                return self.finish(queue_rx);
            }
            if now >= self.next_purge {
                self.purge();
            }
            if now >= self.next_upkeep {
                self.upkeep();
            }
        }
    }

    /// Takes what is already queued, up to a full batch, and commits a full batch.
    fn take_queued(&mut self, queue_rx: &Receiver<Queued>, control_rx: &Receiver<Control>) -> Step {
        while self.batch.len() < self.settings.batch_size {
            match queue_rx.try_recv() {
                Ok(rows) => self.push(rows),
                Err(_) => break,
            }
        }
        if self.batch.len() >= self.settings.batch_size {
            self.commit(Vec::new(), control_rx)
        } else {
            Step::Continue
        }
    }

    fn push(&mut self, rows: Queued) {
        if self.batch.is_empty() {
            self.batch_deadline = Some(later(Instant::now(), self.settings.batch_delay));
        }
        self.batch.push(rows);
    }

    /// Commits the batch, retrying with backoff until it succeeds or shutdown is
    /// requested. `waiters` are answered when the batch commits, or with an error once it
    /// has failed [`FLUSH_GIVE_UP_ATTEMPTS`] times.
    fn commit(
        &mut self,
        mut waiters: Vec<Sender<Result<(), WriterError>>>,
        control_rx: &Receiver<Control>,
    ) -> Step {
        self.batch_deadline = None;
        let mut attempts = 0u32;
        loop {
            if self.batch.is_empty() {
                answer(waiters, || Ok(()));
                return Step::Continue;
            }
            let started = Instant::now();
            match self.store.write_queued(&self.batch) {
                Ok(written) => {
                    self.shared.committed(written, started.elapsed());
                    self.after_commit();
                    if attempts > 0 {
                        tracing::info!(
                            store = %self.path.display(),
                            traces = self.batch.len(),
                            attempts = attempts + 1,
                            "trace batch committed after failures"
                        );
                    }
                    self.batch.clear();
                    answer(waiters, || Ok(()));
                    return Step::Continue;
                }
                Err(error) => {
                    attempts += 1;
                    self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
                    let backoff = backoff(attempts);
                    tracing::error!(
                        store = %self.path.display(),
                        traces = self.batch.len(),
                        attempt = attempts,
                        retry_in_ms = backoff.as_millis() as u64,
                        error = %error,
                        "trace batch commit failed; the batch is kept and retried"
                    );
                    let failing = || WriterError::WriteFailing {
                        path: self.path.clone(),
                        attempts,
                        last_error: error.to_string(),
                    };
                    if attempts >= FLUSH_GIVE_UP_ATTEMPTS {
                        answer(std::mem::take(&mut waiters), || Err(failing()));
                    }
                    match control_rx.recv_timeout(backoff) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(Control::Flush(reply)) if attempts >= FLUSH_GIVE_UP_ATTEMPTS => {
                            let _ = reply.send(Err(failing()));
                        }
                        Ok(Control::Flush(reply)) => waiters.push(reply),
                        Ok(Control::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                            answer(waiters, || Err(failing()));
                            return Step::Stop;
                        }
                    }
                }
            }
        }
    }

    /// The final drain: refuse new traces, wait out in-flight `enqueue`s, commit
    /// everything queued in batches, each tried [`SHUTDOWN_ATTEMPTS`] times.
    fn finish(mut self, queue_rx: &Receiver<Queued>) -> Result<WriterStats, WriterError> {
        self.shared.closed.store(true, Ordering::SeqCst);
        while self.shared.sending.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        let mut pending = std::mem::take(&mut self.batch);
        pending.extend(queue_rx.try_iter());
        let mut done = 0;
        while done < pending.len() {
            let end = (done + self.settings.batch_size).min(pending.len());
            let chunk = &pending[done..end];
            let mut attempts = 0;
            loop {
                let started = Instant::now();
                match self.store.write_queued(chunk) {
                    Ok(written) => {
                        self.shared.committed(written, started.elapsed());
                        self.shared.release(encoded_bytes(chunk));
                        break;
                    }
                    Err(error) => {
                        attempts += 1;
                        self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
                        if attempts >= SHUTDOWN_ATTEMPTS {
                            let lost = pending.len() - done;
                            tracing::error!(
                                store = %self.path.display(),
                                traces = lost,
                                attempts,
                                error = %error,
                                "trace writer stopped with traces not written"
                            );
                            return Err(WriterError::NotWritten {
                                path: self.path.clone(),
                                traces: lost,
                                last_error: error.to_string(),
                            });
                        }
                        std::thread::sleep(backoff(attempts));
                    }
                }
            }
            done = end;
        }
        Ok(self.shared.snapshot())
    }

    /// After a committed batch: remember its tenants, release its reservation, measure
    /// the store again.
    fn after_commit(&mut self) {
        for queued in &self.batch {
            let tenant = match queued {
                Queued::Turn(rows) => &rows.turn.tenant,
                Queued::HandleOperation(row) => &row.tenant,
            };
            if !self.tenants.contains(tenant) {
                self.tenants.insert(tenant.clone());
            }
        }
        let bytes = encoded_bytes(&self.batch);
        if let Some(mean) = bytes.checked_div(self.batch.len() as u64) {
            self.shared
                .typical_bytes
                .store(mean.max(MIN_TYPICAL_BYTES), Ordering::Relaxed);
        }
        // Measured before the reservation goes, so the written rows are always counted
        // once: in the measure or in the reservation.
        self.measure();
        self.shared.release(bytes);
    }

    /// Measures the store and its disk, exports them, and logs when the store runs out
    /// of room or has room again.
    fn measure(&mut self) {
        match self.store.usage() {
            Ok(usage) => {
                self.shared.measured(usage);
                crate::telemetry::metrics::trace_store_measured(
                    usage.used_bytes,
                    usage.disk_available,
                );
            }
            Err(error) => tracing::warn!(
                store = %self.path.display(),
                error = %error,
                "cannot measure the trace store; its last measure stands"
            ),
        }
        let no_room = self.shared.out_of_room();
        match (&self.out_of_room, &no_room) {
            (None, Some(no_room)) => tracing::error!(
                store = %self.path.display(),
                reason = no_room.code(),
                "{no_room}"
            ),
            (Some(_), None) => tracing::info!(
                store = %self.path.display(),
                "the trace store has room again: turns are answered"
            ),
            _ => {}
        }
        crate::telemetry::metrics::trace_store_out_of_room(no_room.is_some());
        self.out_of_room = no_room;
    }

    /// One upkeep round: deletes one batch of the first tenant (in turn) that has
    /// records past their keep, gives freed pages back, exports the oldest record's age
    /// and measures the store.
    fn upkeep(&mut self) {
        let now_ms = now_ms() as i64;
        let mut backlog = false;
        let tenants: Vec<String> = self.tenants.iter().cloned().collect();
        let start = self.prune_next_tenant.min(tenants.len());
        for (index, tenant) in tenants
            .iter()
            .enumerate()
            .cycle()
            .skip(start)
            .take(tenants.len())
        {
            let Some(cutoff) = self.settings.keeping.cutoff_ms(tenant, now_ms) else {
                continue;
            };
            match self.store.prune_batch(tenant, cutoff, PRUNE_BATCH) {
                Ok(pruned) if pruned == Pruned::default() => {}
                Ok(pruned) => {
                    self.pruned(tenant, pruned);
                    backlog = true;
                    self.prune_next_tenant = index + 1;
                    break;
                }
                Err(error) => {
                    tracing::error!(
                        store = %self.path.display(),
                        tenant = %tenant,
                        error = %error,
                        "pruning trace records past their keep failed; retrying at the next check"
                    );
                    break;
                }
            }
        }
        match self.store.oldest_started_ms() {
            Ok(oldest) => crate::telemetry::metrics::trace_oldest_record_age(
                oldest.map_or(0, |started| now_ms.saturating_sub(started)),
            ),
            Err(error) => tracing::warn!(
                store = %self.path.display(),
                error = %error,
                "cannot read the oldest trace record"
            ),
        }
        self.measure();
        let every = self
            .settings
            .keeping
            .check_every()
            .unwrap_or(MEASURE_INTERVAL);
        let pause = if backlog { PRUNE_BACKLOG_PAUSE } else { every };
        self.next_upkeep = later(Instant::now(), pause);
    }

    fn pruned(&mut self, tenant: &str, pruned: Pruned) {
        if let Err(error) = self.store.release_free_pages(RELEASED_PAGES) {
            tracing::warn!(
                store = %self.path.display(),
                error = %error,
                "cannot give freed trace store pages back; they stay for new rows"
            );
        }
        self.shared
            .pruned
            .fetch_add(pruned.records(), Ordering::Relaxed);
        crate::telemetry::metrics::trace_records_pruned(pruned.records());
        tracing::debug!(
            tenant = %tenant,
            turns = pruned.turns,
            provider_records = pruned.provider_records,
            handle_operations = pruned.handle_operations,
            "pruned trace records past their keep"
        );
    }

    fn purge(&mut self) {
        self.next_purge = later(Instant::now(), self.settings.purge_interval);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        match self.store.purge_expired(now_ms) {
            Ok(rows) => {
                self.shared.purged.fetch_add(rows as u64, Ordering::Relaxed);
                if rows > 0 {
                    tracing::debug!(rows, "purged expired retained content");
                }
            }
            Err(error) => tracing::error!(
                store = %self.path.display(),
                error = %error,
                "purging expired retained content failed; retrying at the next interval"
            ),
        }
    }
}

/// Milliseconds since the epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The bytes a batch reserved.
fn encoded_bytes(batch: &[Queued]) -> u64 {
    batch.iter().map(Queued::encoded_bytes).sum()
}

fn answer(
    waiters: Vec<Sender<Result<(), WriterError>>>,
    result: impl Fn() -> Result<(), WriterError>,
) {
    for waiter in waiters {
        let _ = waiter.send(result());
    }
}

/// 10 ms doubling per attempt, at most 2 s.
fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempts.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

/// `from + by`, or far in the future when that overflows.
fn later(from: Instant, by: Duration) -> Instant {
    from.checked_add(by)
        .unwrap_or_else(|| from + Duration::from_secs(86_400 * 365))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{LayerStatus, ProviderStatus};
    use crate::trace::store::testing::{self, ProviderSpec, item, key};
    use crate::trace::store::{StoreCounts, TraceReader, TraceStore};
    use rusqlite::Connection;
    use std::io::{BufRead, BufReader};

    const LONG: Duration = Duration::from_secs(3600);
    const PATIENT: Duration = Duration::from_secs(30);

    fn settings(queue_capacity: usize, batch_size: usize, batch_delay: Duration) -> WriterSettings {
        WriterSettings {
            queue_capacity,
            batch_size,
            batch_delay,
            purge_interval: LONG,
            ..WriterSettings::default()
        }
    }

    /// Turn `i`: two provider records, so 3 records per turn.
    fn trace(i: usize) -> TurnTrace {
        testing::simple(
            &key(),
            &format!("turn-{i}"),
            "acme",
            i as i64,
            &[
                ("crm", ProviderStatus::Ok),
                ("orders", ProviderStatus::Timeout),
            ],
            &[("profile", LayerStatus::Included)],
        )
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    fn enqueue(
        sender: &TraceSender,
        range: std::ops::Range<usize>,
        wait: Duration,
    ) -> Vec<Result<(), Backpressure>> {
        runtime().block_on(async {
            let mut results = Vec::new();
            for i in range {
                results.push(sender.enqueue(trace(i), wait).await);
            }
            results
        })
    }

    fn enqueue_ok(sender: &TraceSender, range: std::ops::Range<usize>) {
        for result in enqueue(sender, range, PATIENT) {
            result.unwrap();
        }
    }

    /// Waits (bounded) for a condition the writer reaches on its own.
    fn eventually(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + PATIENT;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn counts(path: &Path) -> StoreCounts {
        TraceReader::open(path, None).unwrap().counts().unwrap()
    }

    fn temp_store() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces.db");
        (dir, path)
    }

    #[test]
    fn batches_commit_when_full() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(64, 4, LONG)).unwrap();
        enqueue_ok(&sender, 0..8);
        eventually("two full batches", || handle.stats().turns == 8);
        let stats = handle.stats();
        assert_eq!(
            (stats.batches, stats.records, stats.write_errors),
            (2, 24, 0)
        );
        assert_eq!(counts(&path).turns, 8);
        enqueue_ok(&sender, 8..9);
        handle.flush().unwrap();
        assert_eq!(handle.stats().batches, 3, "the partial batch on flush");
        let stats = handle.shutdown().unwrap();
        assert_eq!((stats.batches, stats.turns, stats.records), (3, 9, 27));
    }

    #[test]
    fn a_partial_batch_commits_after_the_delay() {
        let (_dir, path) = temp_store();
        let (sender, handle) =
            spawn(&path, &key(), settings(64, 1000, Duration::from_millis(20))).unwrap();
        enqueue_ok(&sender, 0..3);
        // No flush, and far from a full batch: only the delay commits it.
        eventually("the delayed batch", || handle.stats().turns == 3);
        assert!(handle.stats().batches >= 1);
        assert!(handle.stats().last_batch > Duration::ZERO);
        assert_eq!(counts(&path).turns, 3);
        handle.shutdown().unwrap();
    }

    #[test]
    fn flush_commits_everything_enqueued_before_it() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(64, 1000, LONG)).unwrap();
        handle.flush().unwrap();
        assert_eq!(handle.stats().batches, 0, "nothing to commit");
        enqueue_ok(&sender, 0..5);
        handle.flush().unwrap();
        assert_eq!(handle.stats().batches, 1);
        assert_eq!(
            counts(&path),
            StoreCounts {
                turns: 5,
                provider_records: 10,
                retained_items: 0
            }
        );
        handle.shutdown().unwrap();
    }

    #[test]
    fn shutdown_drains_the_queue_and_then_refuses() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(1024, 1000, LONG)).unwrap();
        enqueue_ok(&sender, 0..300);
        let stats = handle.shutdown().unwrap();
        assert_eq!((stats.turns, stats.records), (300, 900));
        assert_eq!(counts(&path).turns, 300);
        assert_eq!(
            enqueue(&sender, 300..301, PATIENT),
            [Err(Backpressure::Stopped)]
        );
    }

    #[test]
    fn dropping_the_handle_drains_in_the_background() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(64, 1000, LONG)).unwrap();
        enqueue_ok(&sender, 0..10);
        drop(handle);
        eventually("the background drain", || counts(&path).turns == 10);
        assert_eq!(
            enqueue(&sender, 10..11, PATIENT),
            [Err(Backpressure::Stopped)]
        );
    }

    #[test]
    fn a_full_queue_is_backpressure_after_the_wait() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(1, 1, LONG)).unwrap();
        // Another connection holds the write lock: the writer's first commit waits.
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        enqueue_ok(&sender, 0..1);
        // Accepted once the writer has taken turn 0 off the queue and is stuck on it.
        enqueue_ok(&sender, 1..2);
        assert_eq!(sender.queue_depth(), 1);
        let started = Instant::now();
        let refused = enqueue(&sender, 2..3, Duration::from_millis(30));
        assert!(
            matches!(refused[..], [Err(Backpressure::Full { waited })] if waited >= Duration::from_millis(30)),
            "{refused:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        let immediate = enqueue(&sender, 2..3, Duration::ZERO);
        assert!(
            matches!(immediate[..], [Err(Backpressure::Full { .. })]),
            "{immediate:?}"
        );
        blocker.execute_batch("ROLLBACK").unwrap();
        handle.flush().unwrap();
        let stats = handle.shutdown().unwrap();
        assert_eq!(stats.turns, 2, "the refused trace was never queued");
        assert_eq!(counts(&path).turns, 2);
    }

    fn refuse_writes(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse_turns BEFORE INSERT ON turns BEGIN SELECT RAISE(ABORT, 'disk broken'); END;",
        )
        .unwrap();
        conn
    }

    #[test]
    fn a_failing_store_keeps_the_batch_and_pushes_back() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(2, 1, Duration::ZERO)).unwrap();
        let breaker = refuse_writes(&path);
        enqueue_ok(&sender, 0..1);
        eventually("a failed commit", || handle.stats().write_errors >= 1);
        // The writer reads nothing while it retries: the queue fills, then refuses.
        enqueue_ok(&sender, 1..3);
        let refused = enqueue(&sender, 3..4, Duration::from_millis(20));
        assert!(
            matches!(refused[..], [Err(Backpressure::Full { .. })]),
            "{refused:?}"
        );
        let error = handle.flush().unwrap_err();
        assert!(matches!(error, WriterError::WriteFailing { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("traces.db") && message.contains("disk broken"),
            "{message}"
        );
        assert_eq!(counts(&path).turns, 0);

        breaker.execute_batch("DROP TRIGGER refuse_turns").unwrap();
        eventually("recovery", || handle.stats().turns == 3);
        handle.flush().unwrap();
        let stats = handle.shutdown().unwrap();
        assert!(
            stats.write_errors >= FLUSH_GIVE_UP_ATTEMPTS as u64,
            "{stats:?}"
        );
        assert_eq!(counts(&path).turns, 3, "nothing accepted was lost");
    }

    #[test]
    fn shutdown_on_a_broken_store_reports_what_was_not_written() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(8, 1, Duration::ZERO)).unwrap();
        let _breaker = refuse_writes(&path);
        enqueue_ok(&sender, 0..3);
        eventually("a failed commit", || handle.stats().write_errors >= 1);
        match handle.shutdown() {
            Err(WriterError::NotWritten { traces, .. }) => assert_eq!(traces, 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn expired_retained_content_is_purged_every_interval() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(
            &path,
            &key(),
            WriterSettings {
                purge_interval: Duration::from_millis(5),
                ..settings(64, 1000, LONG)
            },
        )
        .unwrap();
        let mut expired = testing::turn(
            &key(),
            "turn-expired",
            "acme",
            0,
            &[ProviderSpec::new("crm", ProviderStatus::Ok)
                .items(vec![item("CUST-1", "a", "b")])
                .retention("content")],
            &[],
        );
        expired.retained[0].expires_at_ms = 1;
        runtime()
            .block_on(sender.enqueue(expired, PATIENT))
            .unwrap();
        handle.flush().unwrap();
        eventually("the purge", || handle.stats().purged == 1);
        assert_eq!(counts(&path).retained_items, 0);
        assert_eq!(counts(&path).turns, 1);
        handle.shutdown().unwrap();
    }

    fn handle_operation(sequence: u64) -> HandleOpRecord {
        HandleOpRecord::new(
            "acme",
            "h_0123456789abcdef0123456789abcdef",
            1,
            sequence,
            "peek",
            UNIX_EPOCH,
        )
    }

    #[test]
    fn handle_operations_share_the_queue_batches_and_backpressure() {
        let (_dir, path) = temp_store();
        let (sender, handle) = spawn(&path, &key(), settings(1, 1, LONG)).unwrap();
        let enqueue_op = |sequence, wait| {
            runtime().block_on(sender.enqueue_handle_operation(&handle_operation(sequence), wait))
        };
        // Another connection holds the write lock: the writer's first commit waits.
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        enqueue_op(1, PATIENT).unwrap();
        // Accepted once the writer has taken operation 1 and is stuck on it.
        enqueue_ok(&sender, 0..1);
        assert_eq!(sender.queue_depth(), 1);
        let refused = enqueue_op(2, Duration::from_millis(30));
        assert!(
            matches!(refused, Err(Backpressure::Full { waited }) if waited >= Duration::from_millis(30)),
            "{refused:?}"
        );
        blocker.execute_batch("ROLLBACK").unwrap();
        enqueue_op(3, PATIENT).unwrap();
        handle.flush().unwrap();
        let stats = handle.shutdown().unwrap();
        assert_eq!((stats.turns, stats.handle_operations), (1, 2));
        let reader = TraceReader::open(&path, None).unwrap();
        let page = reader
            .handle_operations("acme", "h_0123456789abcdef0123456789abcdef", 0, 1000)
            .unwrap();
        let sequences: Vec<u64> = page.operations.iter().map(|r| r.sequence).collect();
        assert_eq!(sequences, [1, 3], "the refused record was never queued");
        assert_eq!(page.operations[0], handle_operation(1));
        assert_eq!(enqueue_op(4, PATIENT), Err(Backpressure::Stopped));
    }

    #[test]
    fn spawn_fails_on_a_bad_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let error = spawn(&file.join("traces.db"), &key(), WriterSettings::default()).unwrap_err();
        assert!(
            matches!(error, WriterError::Open(StoreError::CreateDir { .. })),
            "{error}"
        );
        assert!(error.to_string().contains("file"), "{error}");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(10));
        assert_eq!(backoff(2), Duration::from_millis(20));
        assert_eq!(backoff(5), Duration::from_millis(160));
        assert_eq!(backoff(9), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    // ---- kill -9: a real process killed mid-write keeps every committed batch -------

    const CRASH_CHILD_ENV: &str = "CTXD_TRACE_WRITER_CRASH_CHILD_STORE";
    const CRASH_COMMITTED: usize = 200;

    /// The child half of `kill_9_keeps_every_committed_batch`: commits
    /// `CRASH_COMMITTED` turns, says so, then writes until killed.
    #[test]
    #[ignore = "child process of kill_9_keeps_every_committed_batch"]
    fn crash_child() {
        let Ok(store) = std::env::var(CRASH_CHILD_ENV) else {
            return;
        };
        let (sender, handle) = spawn(
            Path::new(&store),
            &key(),
            settings(64, 16, Duration::from_millis(1)),
        )
        .unwrap();
        enqueue_ok(&sender, 0..CRASH_COMMITTED);
        handle.flush().unwrap();
        println!("ctxd-crash-child: committed {CRASH_COMMITTED}");
        runtime().block_on(async {
            for i in CRASH_COMMITTED.. {
                sender.enqueue(trace(i), PATIENT).await.unwrap();
                if i % 8 == 0 {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
        });
    }

    #[test]
    fn kill_9_keeps_every_committed_batch() {
        let (_dir, path) = temp_store();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "trace::writer::tests::crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD_ENV, &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let announced = format!("ctxd-crash-child: committed {CRASH_COMMITTED}");
        let mut seen = false;
        for line in stdout.lines() {
            if line.unwrap().contains(&announced) {
                seen = true;
                break;
            }
        }
        assert!(seen, "the child never committed its first turns");
        // Let it get some batches in flight, then SIGKILL (no destructors, no close).
        eventually("more writes", || {
            TraceReader::open(&path, None)
                .and_then(|reader| reader.counts())
                .is_ok_and(|counts| counts.turns as usize > CRASH_COMMITTED)
        });
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());

        let store = TraceStore::open(&path, &key()).unwrap();
        let check: String = store
            .connection()
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let reader = TraceReader::open(&path, None).unwrap();
        let counts = reader.counts().unwrap();
        assert!(counts.turns as usize > CRASH_COMMITTED, "{counts:?}");
        assert_eq!(counts.provider_records, 2 * counts.turns, "turns are whole");
        for i in [0, CRASH_COMMITTED / 2, CRASH_COMMITTED - 1] {
            let stored = reader.turn(None, &format!("turn-{i}")).unwrap().unwrap();
            assert_eq!(stored.providers.len(), 2);
        }
    }

    #[test]
    fn records_past_their_keep_go_in_batches_and_a_tenant_of_its_own_keeps_them() {
        let (_dir, path) = temp_store();
        let old = |i: i64| {
            let tenant = if i % 2 == 0 { "acme" } else { "archive" };
            testing::simple(
                &key(),
                &format!("old-{i}"),
                tenant,
                i,
                &[("crm", ProviderStatus::Ok)],
                &[("profile", LayerStatus::Included)],
            )
        };
        TraceStore::open(&path, &key())
            .unwrap()
            .write_batch(&(0..1200).map(old).collect::<Vec<_>>())
            .unwrap();
        let settings = WriterSettings {
            keeping: RecordKeeping {
                default_keep: Some(LONG),
                tenants: [("archive".to_owned(), None)].into_iter().collect(),
            },
            ..settings(64, 16, Duration::from_millis(5))
        };
        let (sender, handle) = spawn(&path, &key(), settings).unwrap();
        let new = testing::simple(
            &key(),
            "new",
            "acme",
            now_ms() as i64,
            &[("crm", ProviderStatus::Ok)],
            &[("profile", LayerStatus::Included)],
        );
        runtime().block_on(sender.enqueue(new, PATIENT)).unwrap();
        // 600 turns of acme, one provider record each, in two batches of at most 500.
        eventually("acme's old records pruned", || {
            handle.stats().pruned == 1200
        });
        handle.flush().unwrap();
        let reader = TraceReader::open(&path, None).unwrap();
        assert_eq!(reader.counts().unwrap().turns, 600 + 1);
        assert!(reader.turn(None, "old-0").unwrap().is_none());
        assert!(
            reader.turn(None, "old-1").unwrap().is_some(),
            "archive keeps"
        );
        assert!(reader.turn(None, "new").unwrap().is_some());
        handle.shutdown().unwrap();
    }

    #[test]
    fn a_store_at_its_bound_refuses_traces_and_writes_every_one_it_took() {
        let (_dir, path) = temp_store();
        let empty = TraceStore::open(&path, &key()).unwrap().usage().unwrap();
        let bound = empty.used_bytes + 6 * 1024 * 1024;
        let settings = WriterSettings {
            bounds: StoreBounds {
                max_store_bytes: Some(bound),
                min_free_bytes: 0,
            },
            ..settings(256, 32, Duration::from_millis(5))
        };
        let (sender, handle) = spawn(&path, &key(), settings).unwrap();
        assert_eq!(sender.no_room(), None);
        let (taken, refusal) = runtime().block_on(async {
            for i in 0..100_000 {
                if let Err(refused) = sender.enqueue(trace(i), PATIENT).await {
                    return (i, refused);
                }
            }
            panic!("the store never filled");
        });
        assert!(taken > 100, "{taken} traces before the first refusal");
        let Backpressure::NoRoom(no_room) = refusal else {
            panic!("{refusal:?}");
        };
        assert_eq!(no_room.code(), "trace_store_full");
        // Written one at a time, the store takes traces until one would cross the bound.
        let mut more = 0;
        loop {
            handle.flush().unwrap();
            let next = runtime().block_on(sender.enqueue(trace(taken + more), PATIENT));
            match next {
                Ok(()) => more += 1,
                Err(Backpressure::NoRoom(_)) => break,
                Err(other) => panic!("{other:?}"),
            }
            assert!(more < 10_000, "the store never refused again");
        }
        assert!(
            sender.no_room().is_some(),
            "the state turns see before they start"
        );
        handle.flush().unwrap();
        assert_eq!(
            counts(&path).turns,
            (taken + more) as u64,
            "every trace taken is written"
        );
        let usage = TraceStore::open(&path, &key()).unwrap().usage().unwrap();
        assert!(usage.used_bytes <= bound, "{usage:?} against {bound}");
        handle.shutdown().unwrap();
    }
}
