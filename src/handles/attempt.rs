//! One attempt on a handle — an operation or a delete — from the parsed request to its
//! answer and trace record, with no HTTP: the store resolves the handle and sequences
//! the attempt, the request is checked against it, the operation runs, and the record
//! says what happened.
//!
//! - **Order.** The handle answers first (unknown, then stale), then the request, then
//!   the operation: a stale handle is reported even for a request that does not parse.
//! - **Nothing of the tenant's** is [`NotHeld`]: answered `unknown_handle` and counted,
//!   never sequenced or traced — there is no per-handle sequence to give it, and
//!   recording caller-chosen ids would let anyone fill the store.
//! - **A handle the tenant holds** (live or tombstoned) makes every attempt a
//!   [`Finished`] — successful or not — with the handle's next sequence number and the
//!   record to queue.
//! - **Running is a separate step** ([`Prepared::Ready`], then [`Ready::run`]) so the
//!   caller can run the operation off its own thread while the store access stays a
//!   few map updates under a lock.
//!
//! The store is asked first (`HandleStore::begin`/`delete`, which may wait on Redis);
//! what it answered comes here, so everything in this module is pure. The clock is
//! injected: the operation's time limit reads it.

use super::bounds::Clock;
use super::ops;
use super::output::{Inspected, OpOutput};
use super::request::{Limits, OpRequest, ParseFailure};
use super::store::Attempt;
#[cfg(test)]
use super::store::MemoryStore;
use super::{HandleError, HandleMaterial};
use crate::contract::HandleRef;
use crate::trace::record::HandleOpRecord;
use crate::trace::record::RecordLimits;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The operation name of a delete, in its record and the operations metric.
pub(crate) const DELETE: &str = "delete";

/// The id resolves to nothing of the tenant's: never sequenced or traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotHeld {
    /// The operation the request named (`unknown` when it did not say), or `delete`.
    pub(crate) op: &'static str,
    pub(crate) id: String,
}

impl NotHeld {
    /// `unknown_handle`, the answer for it.
    pub(crate) fn into_error(self) -> HandleError {
        HandleError::UnknownHandle { id: self.id }
    }
}

/// An attempt on a handle the tenant holds: sequenced, and traced by `record` whatever
/// its result. `T` is what a success carries: an [`Answer`] for an operation, `()` for
/// a delete.
#[derive(Debug)]
pub(crate) struct Finished<T> {
    /// An operation name from `request::OPERATIONS`, `unknown` (a request that did not
    /// name one) or `delete`.
    pub(crate) op: &'static str,
    /// The handle and its version (for a stale handle: its current or deleted version).
    pub(crate) handle: HandleRef,
    /// The handle's sequence number given to this attempt.
    pub(crate) sequence: u64,
    /// The record to queue before answering.
    pub(crate) record: HandleOpRecord,
    pub(crate) result: Result<T, HandleError>,
}

/// A successful operation: its output, the limits it ran under, what it inspected and
/// how long it took.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) limits: Limits,
    pub(crate) output: OpOutput,
    pub(crate) inspected: Inspected,
    pub(crate) elapsed: Duration,
}

/// A sequenced operation, refused already or ready to run.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// The handle is stale or the request did not parse.
    Refused(Finished<Answer>),
    Ready(Ready),
}

/// A sequenced operation with its material and request: [`Ready::run`] it where
/// blocking is fine.
#[derive(Debug)]
pub(crate) struct Ready {
    sequenced: Sequenced,
    material: Arc<HandleMaterial>,
    request: OpRequest,
}

impl Ready {
    /// The operation's name, for counting a failure to run it at all.
    pub(crate) fn op(&self) -> &'static str {
        self.sequenced.op
    }

    /// Runs the operation within its limits; the record gets what it inspected,
    /// returned and cost.
    pub(crate) fn run(self, clock: &dyn Clock) -> Finished<Answer> {
        let Ready {
            sequenced,
            material,
            request,
        } = self;
        let limits = request.limits;
        let execution = ops::run(&material, &request.op, &limits, clock);
        let (inspected, elapsed) = (execution.inspected, execution.elapsed);
        sequenced.finish(
            Some(&limits),
            inspected,
            elapsed,
            execution.result.map(|output| Answer {
                limits,
                output,
                inspected,
                elapsed,
            }),
        )
    }
}

/// The operation a request names (`unknown` when it did not say) and the version it
/// asks for: what the store needs to sequence the attempt.
pub(crate) fn requested(request: &Result<OpRequest, ParseFailure>) -> (&'static str, Option<u64>) {
    match request {
        Ok(request) => (request.op.name(), Some(request.version)),
        Err(failure) => (failure.op, failure.version),
    }
}

/// Starts an operation on `tenant`'s handle `id` with the parsed `request`, started at
/// `at` (the record's time), from what the store answered for it (`held`: from
/// `HandleStore::begin` with the version of [`requested`]).
pub(crate) fn prepare_held(
    held: Attempt<Arc<HandleMaterial>>,
    tenant: &str,
    id: &str,
    request: Result<OpRequest, ParseFailure>,
    at: SystemTime,
) -> Result<Prepared, NotHeld> {
    let (op, _) = requested(&request);
    let Attempt::Held {
        sequence,
        version,
        outcome,
    } = held
    else {
        return Err(NotHeld {
            op,
            id: id.to_owned(),
        });
    };
    let sequenced = Sequenced::new(op, tenant, id, version, sequence, at);
    Ok(match (outcome, request) {
        (Err(stale), request) => {
            let limits = request.ok().map(|request| request.limits);
            Prepared::Refused(sequenced.refused(limits.as_ref(), stale))
        }
        (Ok(_), Err(failure)) => Prepared::Refused(sequenced.refused(None, failure.error)),
        (Ok(material), Ok(request)) => Prepared::Ready(Ready {
            sequenced,
            material,
            request,
        }),
    })
}

/// Deletes `tenant`'s handle `id` from what the store answered for the delete
/// (`HandleStore::delete`: a tombstone left, or `stale_handle`). Started at `at` (the
/// record's time).
pub(crate) fn delete_held(
    held: Attempt<()>,
    tenant: &str,
    id: &str,
    at: SystemTime,
) -> Result<Finished<()>, NotHeld> {
    match held {
        Attempt::Unknown => Err(NotHeld {
            op: DELETE,
            id: id.to_owned(),
        }),
        Attempt::Held {
            sequence,
            version,
            outcome,
        } => Ok(
            Sequenced::new(DELETE, tenant, id, version, sequence, at).finish(
                None,
                Inspected::default(),
                Duration::ZERO,
                outcome,
            ),
        ),
    }
}

/// [`prepare_held`] on an in-memory store.
#[cfg(test)]
fn prepare(
    store: &MemoryStore,
    tenant: &str,
    id: &str,
    request: Result<OpRequest, ParseFailure>,
    at: SystemTime,
    clock: &dyn Clock,
) -> Result<Prepared, NotHeld> {
    let (_, version) = requested(&request);
    prepare_held(
        store.begin(tenant, id, version, clock.now()),
        tenant,
        id,
        request,
        at,
    )
}

/// [`delete_held`] on an in-memory store.
#[cfg(test)]
fn delete(
    store: &MemoryStore,
    tenant: &str,
    id: &str,
    at: SystemTime,
    clock: &dyn Clock,
) -> Result<Finished<()>, NotHeld> {
    delete_held(store.delete(tenant, id, clock.now()), tenant, id, at)
}

/// What is known of an attempt once the store has sequenced it.
#[derive(Debug)]
struct Sequenced {
    op: &'static str,
    handle: HandleRef,
    sequence: u64,
    record: HandleOpRecord,
}

impl Sequenced {
    fn new(
        op: &'static str,
        tenant: &str,
        id: &str,
        version: u64,
        sequence: u64,
        at: SystemTime,
    ) -> Sequenced {
        Sequenced {
            op,
            handle: HandleRef {
                id: id.to_owned(),
                version,
            },
            sequence,
            record: HandleOpRecord::new(tenant, id, version, sequence, op, at),
        }
    }

    /// Refused before running: nothing inspected, no time spent.
    fn refused(self, limits: Option<&Limits>, error: HandleError) -> Finished<Answer> {
        self.finish(limits, Inspected::default(), Duration::ZERO, Err(error))
    }

    fn finish<T: Returned>(
        mut self,
        limits: Option<&Limits>,
        inspected: Inspected,
        elapsed: Duration,
        result: Result<T, HandleError>,
    ) -> Finished<T> {
        let record = &mut self.record;
        record.limits = limits.map(RecordLimits::from);
        record.bytes_inspected = inspected.bytes;
        record.items_inspected = inspected.items;
        record.elapsed_ms = elapsed.as_millis() as u64;
        match &result {
            Ok(success) => success.count_into(record),
            Err(error) => record.result = error.kind().to_owned(),
        }
        Finished {
            op: self.op,
            handle: self.handle,
            sequence: self.sequence,
            record: self.record,
            result,
        }
    }
}

/// What a success adds to its record.
trait Returned {
    fn count_into(&self, record: &mut HandleOpRecord);
}

impl Returned for Answer {
    fn count_into(&self, record: &mut HandleOpRecord) {
        record.bytes_returned = self.output.bytes_returned as u64;
        record.entries = self.output.entries.len() as u64;
        record.truncated = self.output.truncated;
    }
}

/// A delete returns nothing.
impl Returned for () {
    fn count_into(&self, _: &mut HandleOpRecord) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::{HandleSettings, StaleReason, request};
    use std::time::Instant;

    /// A clock that never moves: no operation runs out of time.
    struct Frozen(Instant);

    impl Clock for Frozen {
        fn now(&self) -> Instant {
            self.0
        }
    }

    const TEXT: &str = "one\ntwo ERROR\nthree\nfour ERROR";
    const METADATA: &str = r#"{"version": 1, "op": {"kind": "metadata"}}"#;
    /// Parses as far as its operation and version, then is `capability_denied`.
    const MAP_EVAL: &str = r#"{"version": 1, "op": {"kind": "map", "function": "eval"}}"#;
    const SLICE_PAST_THE_END: &str =
        r#"{"version": 1, "op": {"kind": "slice", "start": 99, "length": 1}}"#;

    fn store_with_handle() -> (MemoryStore, String, Frozen) {
        let store = MemoryStore::new(HandleSettings::default());
        let clock = Frozen(Instant::now());
        let handle = store
            .register("acme", HandleMaterial::Text(TEXT.into()), clock.0)
            .unwrap();
        (store, handle.id, clock)
    }

    fn parse(body: &str) -> Result<OpRequest, ParseFailure> {
        request::parse(body.as_bytes(), &HandleSettings::default().limits)
    }

    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_032_800)
    }

    fn run(
        store: &MemoryStore,
        tenant: &str,
        id: &str,
        body: &str,
        clock: &Frozen,
    ) -> Result<Finished<Answer>, NotHeld> {
        prepare(store, tenant, id, parse(body), at(), clock).map(|prepared| match prepared {
            Prepared::Refused(finished) => finished,
            Prepared::Ready(ready) => ready.run(clock),
        })
    }

    /// An attempt by acme, which holds `id`.
    fn run_held(store: &MemoryStore, id: &str, body: &str, clock: &Frozen) -> Finished<Answer> {
        run(store, "acme", id, body, clock).expect("acme holds the handle")
    }

    fn error_kind<T>(finished: &Finished<T>) -> &'static str {
        finished
            .result
            .as_ref()
            .err()
            .map_or("ok", HandleError::kind)
    }

    #[test]
    fn a_successful_operation_answers_and_records_its_counts() {
        let (store, id, clock) = store_with_handle();
        let body =
            r#"{"version": 1, "op": {"kind": "search", "pattern": "ERROR", "maxResults": 1}}"#;
        let Prepared::Ready(ready) = prepare(&store, "acme", &id, parse(body), at(), &clock)
            .expect("the tenant holds the handle")
        else {
            panic!("a current handle and a valid request are ready to run");
        };
        assert_eq!(ready.op(), "search");
        let finished = ready.run(&clock);
        assert_eq!(
            (finished.op, finished.sequence, &finished.handle),
            (
                "search",
                1,
                &HandleRef {
                    id: id.clone(),
                    version: 1
                }
            )
        );
        let answer = finished.result.as_ref().unwrap();
        assert_eq!(answer.output.entries.len(), 1);
        assert!(answer.output.truncated);
        assert_eq!(answer.limits.max_results, 1);
        assert_eq!(answer.elapsed, Duration::ZERO);
        let record = &finished.record;
        assert_eq!(
            (record.tenant.as_str(), record.handle.as_str()),
            ("acme", id.as_str())
        );
        assert_eq!((record.version, record.sequence), (1, 1));
        assert_eq!(
            (record.operation.as_str(), record.result.as_str()),
            ("search", "ok")
        );
        assert_eq!(record.entries, 1);
        assert!(record.truncated);
        assert_eq!(record.bytes_returned, answer.output.bytes_returned as u64);
        assert_eq!(record.bytes_inspected, answer.inspected.bytes);
        assert!(record.bytes_inspected > 0);
        assert_eq!(record.limits, Some(RecordLimits::from(&answer.limits)));
        assert_eq!(record.at_ms, 1_796_032_800_000);
    }

    #[test]
    fn a_failing_operation_is_sequenced_and_recorded_with_its_kind() {
        let (store, id, clock) = store_with_handle();
        let finished = run_held(&store, &id, SLICE_PAST_THE_END, &clock);
        assert_eq!(error_kind(&finished), "out_of_range");
        assert_eq!(finished.record.result, "out_of_range");
        assert_eq!(finished.record.operation, "slice");
        assert!(finished.record.limits.is_some(), "it ran under limits");
        assert_eq!(finished.record.entries, 0);
    }

    #[test]
    fn nothing_of_the_tenants_is_not_held_and_takes_no_sequence() {
        let (store, id, clock) = store_with_handle();
        let other = run(&store, "globex", &id, METADATA, &clock).unwrap_err();
        assert_eq!(
            other,
            NotHeld {
                op: "metadata",
                id: id.clone()
            }
        );
        assert_eq!(
            other.into_error(),
            HandleError::UnknownHandle { id: id.clone() }
        );
        let unknown = format!("h_{}", "0".repeat(32));
        assert_eq!(
            run(&store, "acme", &unknown, "{", &clock).unwrap_err().op,
            "unknown"
        );
        assert_eq!(
            delete(&store, "globex", &id, at(), &clock).unwrap_err().op,
            DELETE
        );
        let first = run_held(&store, &id, METADATA, &clock);
        assert_eq!(first.sequence, 1, "no sequence was given to the others");
    }

    #[test]
    fn a_request_that_does_not_parse_is_refused_under_the_handle() {
        let (store, id, clock) = store_with_handle();
        let Prepared::Refused(finished) =
            prepare(&store, "acme", &id, parse(MAP_EVAL), at(), &clock).unwrap()
        else {
            panic!("a request that does not parse is refused before running");
        };
        assert_eq!(error_kind(&finished), "capability_denied");
        assert_eq!(finished.op, "map");
        assert_eq!(finished.sequence, 1);
        assert_eq!(finished.record.result, "capability_denied");
        assert_eq!(finished.record.limits, None, "its limits did not parse");
        assert_eq!(finished.record.bytes_inspected, 0);
    }

    #[test]
    fn the_handle_answers_before_the_request() {
        let (store, id, clock) = store_with_handle();
        // A wrong version with a valid request: stale, under the request's limits.
        let wrong = run_held(
            &store,
            &id,
            r#"{"version": 2, "op": {"kind": "metadata", "maxBytes": 10}}"#,
            &clock,
        );
        assert!(matches!(
            wrong.result,
            Err(HandleError::StaleHandle {
                reason: StaleReason::WrongVersion,
                requested: Some(2),
                version: 1,
                ..
            })
        ));
        assert_eq!(wrong.record.limits.map(|l| l.max_bytes), Some(10));
        let deleted = delete(&store, "acme", &id, at(), &clock).unwrap();
        assert!(deleted.result.is_ok());
        assert_eq!(
            (deleted.op, deleted.sequence, deleted.record.result.as_str()),
            (DELETE, 2, "ok")
        );
        // A deleted handle is stale even for a request that does not parse.
        let refused = run_held(&store, &id, MAP_EVAL, &clock);
        assert_eq!(error_kind(&refused), "stale_handle");
        assert_eq!((refused.op, refused.sequence), ("map", 3));
        assert_eq!(refused.handle.version, 1);
        let again = delete(&store, "acme", &id, at(), &clock).unwrap();
        assert_eq!(error_kind(&again), "stale_handle");
        assert_eq!(
            (again.sequence, again.record.result.as_str()),
            (4, "stale_handle")
        );
        assert_eq!(again.record.limits, None);
    }
}
