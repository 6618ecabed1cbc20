//! The circuit breaker: a pure state machine over call results and an injected clock.
//!
//! One per provider binding, inside the `ProviderGate` its `ProviderActor` creates and
//! owns. The gate runs on the callers' threads (the coordinators'): it asks
//! [`Breaker::admit`] before a call and reports the call's [`CallResult`] (see
//! [`classify`]) with [`Breaker::record`], each under a lock held for that one step. No
//! async, no locks here, and no reading of the clock: every method takes `now`, so tests
//! drive time explicitly.
//!
//! - **Closed**: calls are allowed. The last `window` Success/Failure results are kept in
//!   a ring buffer (Neutral results are not stored). After each stored result the circuit
//!   opens when the window holds at least `min_calls` results and failures/results ≥
//!   `failure_rate`, or when `consecutive_failures` failures came in a row (a Success
//!   resets the run; a Neutral leaves it alone).
//! - **Open**: every admission is rejected with the remaining open time until `open` has
//!   elapsed since opening; the first admission after that moves to HalfOpen.
//! - **HalfOpen**: at most `half_open_probes` probes are in flight at once; other
//!   admissions are rejected with [`HALF_OPEN_RETRY_AFTER`]. A probe Failure reopens the
//!   circuit (fresh open period); `half_open_probes` probe Successes close it with an empty
//!   window; a Neutral probe frees its slot without counting. If the phase has lasted
//!   `half_open_max` without resolving (probe reports lost, say), the next admission
//!   treats it as failed and reopens, so a lost report delays recovery but never stops it.
//!
//! Every transition bumps a generation and every [`Ticket`] carries the generation it was
//! issued in; a ticket from an older generation is ignored by `record`. A slow call
//! admitted while Closed therefore cannot reopen a circuit that is HalfOpen now, and a
//! probe from an earlier half-open phase cannot close it.

use crate::outcome::{Answer, Outcome};
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// Circuit breaker thresholds: the circuit opens when, over the last `window` calls (at
/// least `min_calls` of them), the failure rate reaches `failure_rate`, or after
/// `consecutive_failures` in a row; it stays open for `open`, then lets
/// `half_open_probes` calls through; `half_open_max` bounds the half-open phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CircuitSettings {
    pub(crate) failure_rate: f64,
    pub(crate) min_calls: u32,
    pub(crate) window: u32,
    pub(crate) consecutive_failures: u32,
    pub(crate) open: Duration,
    pub(crate) half_open_probes: u32,
    pub(crate) half_open_max: Duration,
}

impl Default for CircuitSettings {
    fn default() -> Self {
        CircuitSettings {
            failure_rate: 0.5,
            min_calls: 20,
            window: 50,
            consecutive_failures: 5,
            open: Duration::from_millis(5000),
            half_open_probes: 3,
            half_open_max: Duration::from_millis(30_000),
        }
    }
}

/// How long a caller turned away in HalfOpen (all probe slots taken) should wait.
///
/// Short and fixed: a probe slot frees as soon as any probe answers, which is usually
/// well within a call timeout, whereas the remaining `half_open_max` is only an upper
/// bound and would hold callers back far longer than needed.
pub(crate) const HALF_OPEN_RETRY_AFTER: Duration = Duration::from_millis(100);

/// The breaker's state, as reported to metrics, logs and `Observe` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BreakerState {
    /// Calls flow; results are counted in the sliding window.
    Closed,
    /// Calls are rejected until the open period has elapsed.
    Open,
    /// A limited number of probe calls test whether the provider has recovered.
    HalfOpen,
}

impl BreakerState {
    /// The state's name for logs and labels: `closed`, `open` or `half_open`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The state as a gauge value: 0 closed, 1 open, 2 half-open.
    pub(crate) fn as_gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finished call says about the provider's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CallResult {
    /// The provider answered.
    Success,
    /// The provider failed to answer: timed out or unavailable.
    Failure,
    /// The call says nothing about the provider's health (it never reached the provider,
    /// or it was refused before being made); it frees a probe slot and is otherwise
    /// ignored.
    Neutral,
}

/// The answer to [`Breaker::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Make the call, then hand the ticket back to [`Breaker::record`] with its result.
    Allowed(Ticket),
    /// Do not call the provider; the circuit may admit calls again after `retry_after`.
    Rejected { retry_after: Duration },
}

/// Proof of admission, handed back to [`Breaker::record`] exactly once per call.
///
/// `Copy` for convenience: recording the same ticket twice would free a probe slot twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// The breaker generation the call was admitted in; a result from an older
    /// generation describes a circuit that no longer exists and is ignored.
    generation: u64,
    /// Whether the call holds one of the half-open probe slots.
    probe: bool,
}

impl Ticket {
    /// Whether this call is a half-open probe (holds a probe slot until recorded).
    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }
}

/// A state change caused by an event, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transition {
    pub(crate) from: BreakerState,
    pub(crate) to: BreakerState,
}

/// What the breaker looks like at an instant: for `Observe` messages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerSnapshot {
    /// The state as of the instant (an elapsed open period reads as HalfOpen).
    pub(crate) state: BreakerState,
    /// Success and Failure results in the sliding window (Closed only; 0 otherwise).
    pub(crate) calls_in_window: u32,
    /// Failures among them.
    pub(crate) failures_in_window: u32,
    /// Failures in a row since the last Success (Closed only; 0 otherwise).
    pub(crate) consecutive_failures: u32,
    /// Probe tickets issued in this half-open phase and not yet recorded.
    pub(crate) probes_in_flight: u32,
    /// Probe Successes so far in this half-open phase.
    pub(crate) probe_successes: u32,
}

/// The circuit breaker for one provider binding. See the module docs for the rules.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    /// Thresholds, with zero counts raised to one so the machine can neither divide by
    /// zero nor wedge (validation already rejects zeros).
    settings: CircuitSettings,
    phase: Phase,
    /// Bumped by every transition; tickets carry it so stale results can be told apart.
    generation: u64,
    /// The last `window` results while Closed; emptied on every transition.
    window: Window,
    /// Failures in a row while Closed; zeroed on every transition.
    consecutive_failures: u32,
}

/// The stored phase; `since` is when it began, the origin of its time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    Open {
        since: Instant,
    },
    HalfOpen {
        since: Instant,
        in_flight: u32,
        successes: u32,
    },
}

impl Phase {
    fn state(self) -> BreakerState {
        match self {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

impl Breaker {
    /// A closed breaker with an empty window. `now` is accepted for symmetry with the
    /// other methods; a closed circuit has no time limit.
    pub(crate) fn new(settings: CircuitSettings, now: Instant) -> Self {
        let _ = now;
        let settings = CircuitSettings {
            min_calls: settings.min_calls.max(1),
            window: settings.window.max(1),
            consecutive_failures: settings.consecutive_failures.max(1),
            half_open_probes: settings.half_open_probes.max(1),
            ..settings
        };
        Breaker {
            window: Window::new(settings.window),
            settings,
            phase: Phase::Closed,
            generation: 0,
            consecutive_failures: 0,
        }
    }

    /// The state as of `now`. An elapsed open period reads as HalfOpen even before the
    /// next [`admit`](Self::admit) applies it; a half-open phase past `half_open_max`
    /// still reads HalfOpen until the next `admit` fails it.
    pub(crate) fn state(&self, now: Instant) -> BreakerState {
        match self.phase {
            Phase::Open { since } if self.open_elapsed(since, now) => BreakerState::HalfOpen,
            phase => phase.state(),
        }
    }

    /// Whether a call may be made now. Applies the transitions that time alone causes
    /// (see [`advance`](Self::advance)) first.
    pub(crate) fn admit(&mut self, now: Instant) -> Admission {
        self.advance(now);
        let generation = self.generation;
        match &mut self.phase {
            Phase::Closed => Admission::Allowed(Ticket {
                generation,
                probe: false,
            }),
            Phase::Open { since } => Admission::Rejected {
                retry_after: self
                    .settings
                    .open
                    .saturating_sub(now.saturating_duration_since(*since)),
            },
            Phase::HalfOpen { in_flight, .. } => {
                if *in_flight < self.settings.half_open_probes {
                    *in_flight += 1;
                    Admission::Allowed(Ticket {
                        generation,
                        probe: true,
                    })
                } else {
                    Admission::Rejected {
                        retry_after: HALF_OPEN_RETRY_AFTER,
                    }
                }
            }
        }
    }

    /// Applies the transition that the passage of time alone causes, if any: Open →
    /// HalfOpen once `open` has elapsed, and HalfOpen → Open (a fresh open period from
    /// `now`) once the half-open phase has lasted `half_open_max`.
    ///
    /// [`admit`](Self::admit) calls this itself; an owner that wants to log these
    /// transitions calls it just before `admit`, which then finds nothing left to do.
    pub(crate) fn advance(&mut self, now: Instant) -> Option<Transition> {
        match self.phase {
            Phase::Open { since } if self.open_elapsed(since, now) => {
                Some(self.enter(Phase::HalfOpen {
                    since: now,
                    in_flight: 0,
                    successes: 0,
                }))
            }
            Phase::HalfOpen { since, .. }
                if now.saturating_duration_since(since) >= self.settings.half_open_max =>
            {
                Some(self.enter(Phase::Open { since: now }))
            }
            _ => None,
        }
    }

    /// Counts the result of a call admitted with `ticket`; returns the transition it
    /// caused, if any. A ticket from an older generation changes nothing.
    pub(crate) fn record(
        &mut self,
        ticket: Ticket,
        result: CallResult,
        now: Instant,
    ) -> Option<Transition> {
        if ticket.generation != self.generation {
            return None;
        }
        match &mut self.phase {
            // Open never issues tickets, so a current-generation ticket cannot be for it;
            // the probe flag always matches the phase that issued the ticket.
            Phase::Open { .. } => None,
            Phase::Closed if ticket.probe => None,
            Phase::HalfOpen { .. } if !ticket.probe => None,
            Phase::Closed => {
                let failed = match result {
                    CallResult::Neutral => return None,
                    CallResult::Success => {
                        self.consecutive_failures = 0;
                        false
                    }
                    CallResult::Failure => {
                        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                        true
                    }
                };
                self.window.push(failed);
                self.should_trip()
                    .then(|| self.enter(Phase::Open { since: now }))
            }
            Phase::HalfOpen {
                in_flight,
                successes,
                ..
            } => {
                *in_flight = in_flight.saturating_sub(1);
                match result {
                    CallResult::Neutral => None,
                    CallResult::Failure => Some(self.enter(Phase::Open { since: now })),
                    CallResult::Success => {
                        *successes += 1;
                        (*successes >= self.settings.half_open_probes)
                            .then(|| self.enter(Phase::Closed))
                    }
                }
            }
        }
    }

    /// The breaker's counters as of `now`, for `Observe` messages and tests.
    pub(crate) fn snapshot(&self, now: Instant) -> BreakerSnapshot {
        let (probes_in_flight, probe_successes) = match self.phase {
            Phase::HalfOpen {
                in_flight,
                successes,
                ..
            } => (in_flight, successes),
            Phase::Closed | Phase::Open { .. } => (0, 0),
        };
        BreakerSnapshot {
            state: self.state(now),
            calls_in_window: self.window.len(),
            failures_in_window: self.window.failures,
            consecutive_failures: self.consecutive_failures,
            probes_in_flight,
            probe_successes,
        }
    }

    fn open_elapsed(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) >= self.settings.open
    }

    fn should_trip(&self) -> bool {
        if self.consecutive_failures >= self.settings.consecutive_failures {
            return true;
        }
        let calls = self.window.len();
        // Division rounds correctly, so a rate that is exactly the threshold (3 of 10
        // against 0.3) compares equal rather than a hair below it.
        calls >= self.settings.min_calls
            && f64::from(self.window.failures) / f64::from(calls) >= self.settings.failure_rate
    }

    /// Moves to `to`, starting a new generation with an empty window.
    fn enter(&mut self, to: Phase) -> Transition {
        let from = self.phase.state();
        self.phase = to;
        self.generation = self.generation.wrapping_add(1);
        self.window.clear();
        self.consecutive_failures = 0;
        Transition {
            from,
            to: to.state(),
        }
    }
}

/// A ring buffer of the last `capacity` results (`true` = failure) with a running count
/// of failures, so a push is O(1).
#[derive(Debug, Clone)]
struct Window {
    results: VecDeque<bool>,
    capacity: usize,
    failures: u32,
}

impl Window {
    fn new(capacity: u32) -> Self {
        let capacity = capacity as usize;
        Window {
            results: VecDeque::with_capacity(capacity),
            capacity,
            failures: 0,
        }
    }

    fn push(&mut self, failed: bool) {
        if self.results.len() == self.capacity && self.results.pop_front() == Some(true) {
            self.failures -= 1;
        }
        self.results.push_back(failed);
        self.failures += u32::from(failed);
    }

    fn len(&self) -> u32 {
        // At most `capacity`, which came from a u32.
        self.results.len() as u32
    }

    fn clear(&mut self) {
        self.results.clear();
        self.failures = 0;
    }
}

/// Whether a provider outcome counts toward the breaker.
///
/// Only a provider that failed to answer counts as a Failure. A provider that answered —
/// even with a bad answer for one value (too large, invalid, a secret, incompatible) —
/// counts as a Success: one bad value must not open the circuit for everyone. Outcomes
/// that never reached the provider (the circuit was open, the actor was overloaded, the
/// binding or request was refused, the provider was not evaluated) are Neutral.
pub(crate) fn classify(outcome: &Outcome) -> CallResult {
    match &outcome.answer {
        Answer::Items { .. } | Answer::NotFound => CallResult::Success,
        Answer::Failed(failure) if failure.counts_toward_breaker() => CallResult::Failure,
        Answer::Failed(failure) if failure.provider_answered() => CallResult::Success,
        Answer::Failed(_) => CallResult::Neutral,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerState::{Closed, HalfOpen, Open};
    use proptest::prelude::*;

    const OPEN: Duration = Duration::from_secs(10);
    const HALF_OPEN_MAX: Duration = Duration::from_secs(30);
    const NS: Duration = Duration::from_nanos(1);

    /// Rate 0.5 over at least 4 of the last 6, or 3 in a row; two probes.
    fn settings() -> CircuitSettings {
        CircuitSettings {
            failure_rate: 0.5,
            min_calls: 4,
            window: 6,
            consecutive_failures: 3,
            open: OPEN,
            half_open_probes: 2,
            half_open_max: HALF_OPEN_MAX,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn allowed(admission: Admission) -> Ticket {
        match admission {
            Admission::Allowed(ticket) => ticket,
            Admission::Rejected { retry_after } => {
                panic!("expected an admission, rejected for {retry_after:?}")
            }
        }
    }

    fn rejected(admission: Admission) -> Duration {
        match admission {
            Admission::Rejected { retry_after } => retry_after,
            Admission::Allowed(ticket) => panic!("expected a rejection, admitted {ticket:?}"),
        }
    }

    /// Admits one call at `now` and records `result` for it.
    fn call(breaker: &mut Breaker, result: CallResult, now: Instant) -> Option<Transition> {
        let ticket = allowed(breaker.admit(now));
        breaker.record(ticket, result, now)
    }

    /// Admits one half-open probe at `now` and records `result` for it.
    fn probe(breaker: &mut Breaker, result: CallResult, now: Instant) -> Option<Transition> {
        let ticket = allowed(breaker.admit(now));
        assert!(ticket.is_probe());
        breaker.record(ticket, result, now)
    }

    fn result(c: char) -> CallResult {
        match c {
            'S' => CallResult::Success,
            'F' => CallResult::Failure,
            'N' => CallResult::Neutral,
            other => panic!("unknown result {other:?}"),
        }
    }

    fn transition(from: BreakerState, to: BreakerState) -> Option<Transition> {
        Some(Transition { from, to })
    }

    /// A breaker opened at `t0` by consecutive failures.
    fn opened(t0: Instant) -> Breaker {
        let mut breaker = Breaker::new(settings(), t0);
        for _ in 0..2 {
            assert_eq!(call(&mut breaker, CallResult::Failure, t0), None);
        }
        assert_eq!(
            call(&mut breaker, CallResult::Failure, t0),
            transition(BreakerState::Closed, BreakerState::Open)
        );
        breaker
    }

    /// A breaker opened at `t0` and half-open from the returned instant, no probes issued.
    fn half_open(t0: Instant) -> (Breaker, Instant) {
        let mut breaker = opened(t0);
        let now = t0 + OPEN;
        assert_eq!(
            breaker.advance(now),
            transition(BreakerState::Open, BreakerState::HalfOpen)
        );
        (breaker, now)
    }

    struct ClosedCase {
        name: &'static str,
        failure_rate: f64,
        min_calls: u32,
        window: u32,
        consecutive_failures: u32,
        /// One call per character: S success, F failure, N neutral.
        script: &'static str,
        /// The index of the call that opens the circuit.
        opens_at: Option<usize>,
    }

    #[test]
    fn closed_opens_exactly_when_a_threshold_is_reached() {
        let cases = [
            ClosedCase {
                name: "all failures under min_calls stay closed",
                failure_rate: 0.5,
                min_calls: 4,
                window: 10,
                consecutive_failures: 100,
                script: "FFF",
                opens_at: None,
            },
            ClosedCase {
                name: "opens at min_calls when the rate is exactly the threshold",
                failure_rate: 0.5,
                min_calls: 4,
                window: 10,
                consecutive_failures: 100,
                script: "SFSF",
                opens_at: Some(3),
            },
            ClosedCase {
                name: "one failure below the threshold stays closed",
                failure_rate: 0.5,
                min_calls: 4,
                window: 10,
                consecutive_failures: 100,
                script: "SSSF",
                opens_at: None,
            },
            ClosedCase {
                name: "a fractional rate opens exactly at the threshold",
                failure_rate: 0.3,
                min_calls: 10,
                window: 10,
                consecutive_failures: 100,
                script: "SSSSSSSFFF",
                opens_at: Some(9),
            },
            ClosedCase {
                name: "a fractional rate one failure below stays closed",
                failure_rate: 0.3,
                min_calls: 10,
                window: 10,
                consecutive_failures: 100,
                script: "SSSSSSSSFF",
                opens_at: None,
            },
            ClosedCase {
                name: "the rate is checked after a success that completes min_calls",
                failure_rate: 0.5,
                min_calls: 4,
                window: 10,
                consecutive_failures: 100,
                script: "FFSS",
                opens_at: Some(3),
            },
            ClosedCase {
                name: "a rate of 1 needs every call in the window to fail",
                failure_rate: 1.0,
                min_calls: 3,
                window: 3,
                consecutive_failures: 100,
                script: "FFSFFF",
                opens_at: Some(5),
            },
            ClosedCase {
                name: "consecutive failures open below min_calls",
                failure_rate: 0.5,
                min_calls: 20,
                window: 50,
                consecutive_failures: 3,
                script: "FFF",
                opens_at: Some(2),
            },
            ClosedCase {
                name: "a success resets the consecutive count",
                failure_rate: 0.9,
                min_calls: 20,
                window: 50,
                consecutive_failures: 3,
                script: "FFSFFSFF",
                opens_at: None,
            },
            ClosedCase {
                name: "consecutive failures open after a reset",
                failure_rate: 0.9,
                min_calls: 20,
                window: 50,
                consecutive_failures: 3,
                script: "FFSFFF",
                opens_at: Some(5),
            },
            ClosedCase {
                name: "a neutral does not reset the consecutive count",
                failure_rate: 0.9,
                min_calls: 20,
                window: 50,
                consecutive_failures: 3,
                script: "FFNF",
                opens_at: Some(3),
            },
            ClosedCase {
                name: "neutrals never count toward min_calls",
                failure_rate: 0.1,
                min_calls: 1,
                window: 4,
                consecutive_failures: 100,
                script: "NNNNNNNN",
                opens_at: None,
            },
            ClosedCase {
                name: "neutrals are not stored: four results, two failures",
                failure_rate: 0.5,
                min_calls: 4,
                window: 4,
                consecutive_failures: 100,
                script: "SNNSNFNNF",
                opens_at: Some(8),
            },
            ClosedCase {
                name: "the window slides: old results fall out",
                failure_rate: 0.75,
                min_calls: 4,
                window: 4,
                consecutive_failures: 100,
                // Over all nine calls the rate is 5/9; over the last four it is 3/4.
                script: "FFSSSSFFF",
                opens_at: Some(8),
            },
        ];
        let t0 = Instant::now();
        for case in cases {
            let settings = CircuitSettings {
                failure_rate: case.failure_rate,
                min_calls: case.min_calls,
                window: case.window,
                consecutive_failures: case.consecutive_failures,
                ..settings()
            };
            let mut breaker = Breaker::new(settings, t0);
            let mut opened_at = None;
            for (i, c) in case.script.chars().enumerate() {
                let now = t0 + ms(i as u64);
                match call(&mut breaker, result(c), now) {
                    None => {}
                    Some(t) => {
                        assert_eq!(
                            t,
                            Transition {
                                from: Closed,
                                to: Open
                            },
                            "{}",
                            case.name
                        );
                        opened_at = Some(i);
                        break;
                    }
                }
                assert_eq!(breaker.state(now), Closed, "{}: call {i}", case.name);
            }
            assert_eq!(opened_at, case.opens_at, "{}", case.name);
        }
    }

    #[test]
    fn the_window_holds_only_the_last_results() {
        let settings = CircuitSettings {
            failure_rate: 1.0,
            min_calls: 3,
            window: 3,
            consecutive_failures: 100,
            ..settings()
        };
        let t0 = Instant::now();
        let mut breaker = Breaker::new(settings, t0);
        // (result, calls in window, failures in window, consecutive failures)
        let steps = [
            ('F', 1, 1, 1),
            ('F', 2, 2, 2),
            ('N', 2, 2, 2),
            ('S', 3, 2, 0),
            ('S', 3, 1, 0),
            ('F', 3, 1, 1),
            ('S', 3, 1, 0),
            ('S', 3, 1, 0),
            ('S', 3, 0, 0),
        ];
        for (i, (c, calls, failures, consecutive)) in steps.into_iter().enumerate() {
            assert_eq!(call(&mut breaker, result(c), t0), None, "step {i}");
            let snapshot = breaker.snapshot(t0);
            assert_eq!(
                (
                    snapshot.calls_in_window,
                    snapshot.failures_in_window,
                    snapshot.consecutive_failures
                ),
                (calls, failures, consecutive),
                "step {i}"
            );
        }
    }

    struct EdgeCase {
        name: &'static str,
        from: BreakerState,
        /// Acts on a breaker prepared in `from` at the given instant.
        act: fn(&mut Breaker, Instant) -> Option<Transition>,
        transition: Option<Transition>,
        after: BreakerState,
    }

    /// Every edge of the machine, and every event that is not one, from each state.
    #[test]
    fn every_transition_and_non_transition() {
        let cases = [
            EdgeCase {
                name: "closed: success",
                from: Closed,
                act: |b, now| call(b, CallResult::Success, now),
                transition: None,
                after: Closed,
            },
            EdgeCase {
                name: "closed: neutral",
                from: Closed,
                act: |b, now| call(b, CallResult::Neutral, now),
                transition: None,
                after: Closed,
            },
            EdgeCase {
                name: "closed: failures below both thresholds",
                from: Closed,
                act: |b, now| {
                    call(b, CallResult::Failure, now).or(call(b, CallResult::Failure, now))
                },
                transition: None,
                after: Closed,
            },
            EdgeCase {
                name: "closed: consecutive failures open",
                from: Closed,
                act: |b, now| {
                    call(b, CallResult::Failure, now);
                    call(b, CallResult::Failure, now);
                    call(b, CallResult::Failure, now)
                },
                transition: transition(Closed, Open),
                after: Open,
            },
            EdgeCase {
                name: "closed: failure rate opens",
                from: Closed,
                act: |b, now| {
                    call(b, CallResult::Failure, now);
                    call(b, CallResult::Success, now);
                    call(b, CallResult::Failure, now);
                    call(b, CallResult::Success, now)
                },
                transition: transition(Closed, Open),
                after: Open,
            },
            EdgeCase {
                name: "open: admit within the open period",
                from: Open,
                act: |b, now| {
                    rejected(b.admit(now + OPEN - NS));
                    b.advance(now + OPEN - NS)
                },
                transition: None,
                after: Open,
            },
            EdgeCase {
                name: "open: the open period elapses",
                from: Open,
                act: |b, now| b.advance(now + OPEN),
                transition: transition(Open, HalfOpen),
                after: HalfOpen,
            },
            EdgeCase {
                name: "half-open: a probe succeeds, more needed",
                from: HalfOpen,
                act: |b, now| probe(b, CallResult::Success, now),
                transition: None,
                after: HalfOpen,
            },
            EdgeCase {
                name: "half-open: the last needed probe succeeds",
                from: HalfOpen,
                act: |b, now| {
                    probe(b, CallResult::Success, now);
                    probe(b, CallResult::Success, now)
                },
                transition: transition(HalfOpen, Closed),
                after: Closed,
            },
            EdgeCase {
                name: "half-open: a probe fails",
                from: HalfOpen,
                act: |b, now| probe(b, CallResult::Failure, now),
                transition: transition(HalfOpen, Open),
                after: Open,
            },
            EdgeCase {
                name: "half-open: a probe is neutral",
                from: HalfOpen,
                act: |b, now| probe(b, CallResult::Neutral, now),
                transition: None,
                after: HalfOpen,
            },
            EdgeCase {
                name: "half-open: within half_open_max",
                from: HalfOpen,
                act: |b, now| b.advance(now + HALF_OPEN_MAX - NS),
                transition: None,
                after: HalfOpen,
            },
            EdgeCase {
                name: "half-open: half_open_max elapses",
                from: HalfOpen,
                act: |b, now| b.advance(now + HALF_OPEN_MAX),
                transition: transition(HalfOpen, Open),
                after: Open,
            },
        ];
        for case in cases {
            let t0 = Instant::now();
            let (mut breaker, now) = match case.from {
                Closed => (Breaker::new(settings(), t0), t0),
                Open => (opened(t0), t0),
                HalfOpen => half_open(t0),
            };
            assert_eq!(breaker.phase.state(), case.from, "{}", case.name);
            assert_eq!(
                (case.act)(&mut breaker, now),
                case.transition,
                "{}",
                case.name
            );
            assert_eq!(breaker.phase.state(), case.after, "{}", case.name);
        }
    }

    #[test]
    fn open_rejects_with_decreasing_retry_after() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        let steps = [
            (Duration::ZERO, OPEN),
            (ms(1), OPEN - ms(1)),
            (ms(5000), ms(5000)),
            (OPEN - ms(1), ms(1)),
            (OPEN - NS, NS),
        ];
        for (elapsed, retry_after) in steps {
            let now = t0 + elapsed;
            assert_eq!(rejected(breaker.admit(now)), retry_after, "{elapsed:?}");
            assert_eq!(breaker.state(now), Open, "{elapsed:?}");
        }
        assert_eq!(breaker.snapshot(t0).calls_in_window, 0);
    }

    #[test]
    fn open_becomes_half_open_exactly_when_the_period_elapses() {
        let t0 = Instant::now();
        let mut breaker = opened(t0);
        assert_eq!(rejected(breaker.admit(t0 + OPEN - NS)), NS);
        assert_eq!(breaker.state(t0 + OPEN - NS), Open);
        let ticket = allowed(breaker.admit(t0 + OPEN));
        assert!(ticket.is_probe());
        assert_eq!(breaker.state(t0 + OPEN), HalfOpen);
        assert_eq!(breaker.snapshot(t0 + OPEN).probes_in_flight, 1);
    }

    #[test]
    fn state_reads_half_open_after_the_open_period_before_any_admit() {
        let t0 = Instant::now();
        let breaker = opened(t0);
        assert_eq!(breaker.state(t0 + OPEN - NS), Open);
        assert_eq!(breaker.state(t0 + OPEN), HalfOpen);
        assert_eq!(breaker.state(t0 + OPEN * 100), HalfOpen);
        let snapshot = breaker.snapshot(t0 + OPEN);
        assert_eq!(snapshot.state, HalfOpen);
        assert_eq!(snapshot.probes_in_flight, 0);
        // Reading changes nothing: the stored phase moves on the next admit.
        assert_eq!(breaker.phase.state(), Open);
    }

    #[test]
    fn half_open_limits_probes_in_flight() {
        let (mut breaker, now) = half_open(Instant::now());
        let first = allowed(breaker.admit(now));
        let second = allowed(breaker.admit(now));
        assert!(first.is_probe() && second.is_probe());
        assert_eq!(rejected(breaker.admit(now)), HALF_OPEN_RETRY_AFTER);
        assert_eq!(rejected(breaker.admit(now + ms(5))), HALF_OPEN_RETRY_AFTER);
        assert_eq!(breaker.snapshot(now).probes_in_flight, 2);
        // A success frees a slot without closing (two successes are needed).
        assert_eq!(breaker.record(first, CallResult::Success, now), None);
        let third = allowed(breaker.admit(now));
        assert_eq!(rejected(breaker.admit(now)), HALF_OPEN_RETRY_AFTER);
        let snapshot = breaker.snapshot(now);
        assert_eq!(
            (snapshot.probes_in_flight, snapshot.probe_successes),
            (2, 1)
        );
        assert_eq!(
            breaker.record(third, CallResult::Success, now),
            transition(HalfOpen, Closed)
        );
        // The second probe's ticket now belongs to a past phase.
        assert_eq!(breaker.record(second, CallResult::Failure, now), None);
        assert_eq!(breaker.state(now), Closed);
    }

    #[test]
    fn a_probe_failure_reopens_with_a_fresh_period() {
        let (mut breaker, start) = half_open(Instant::now());
        let probe = allowed(breaker.admit(start));
        let failed_at = start + ms(700);
        assert_eq!(
            breaker.record(probe, CallResult::Failure, failed_at),
            transition(HalfOpen, Open)
        );
        assert_eq!(rejected(breaker.admit(failed_at)), OPEN);
        assert_eq!(rejected(breaker.admit(failed_at + OPEN - NS)), NS);
        assert_eq!(breaker.state(failed_at + OPEN - NS), Open);
        assert!(allowed(breaker.admit(failed_at + OPEN)).is_probe());
    }

    #[test]
    fn enough_probe_successes_close_with_everything_reset() {
        let (mut breaker, now) = half_open(Instant::now());
        let first = allowed(breaker.admit(now));
        let second = allowed(breaker.admit(now));
        assert_eq!(breaker.record(first, CallResult::Success, now), None);
        assert_eq!(breaker.state(now), HalfOpen);
        assert_eq!(
            breaker.record(second, CallResult::Success, now),
            transition(HalfOpen, Closed)
        );
        assert_eq!(
            breaker.snapshot(now),
            BreakerSnapshot {
                state: Closed,
                calls_in_window: 0,
                failures_in_window: 0,
                consecutive_failures: 0,
                probes_in_flight: 0,
                probe_successes: 0,
            }
        );
        // A fresh start: it takes the full three consecutive failures to open again.
        let ticket = allowed(breaker.admit(now));
        assert!(!ticket.is_probe());
        assert_eq!(breaker.record(ticket, CallResult::Failure, now), None);
        assert_eq!(call(&mut breaker, CallResult::Failure, now), None);
        assert_eq!(
            call(&mut breaker, CallResult::Failure, now),
            transition(Closed, Open)
        );
    }

    #[test]
    fn a_neutral_probe_frees_its_slot_without_counting() {
        let (mut breaker, now) = half_open(Instant::now());
        let first = allowed(breaker.admit(now));
        let _second = allowed(breaker.admit(now));
        rejected(breaker.admit(now));
        assert_eq!(breaker.record(first, CallResult::Neutral, now), None);
        let snapshot = breaker.snapshot(now);
        assert_eq!(
            (snapshot.probes_in_flight, snapshot.probe_successes),
            (1, 0)
        );
        assert!(allowed(breaker.admit(now)).is_probe());
        rejected(breaker.admit(now));
    }

    #[test]
    fn a_slow_call_from_closed_cannot_touch_half_open() {
        let t0 = Instant::now();
        let mut breaker = Breaker::new(settings(), t0);
        let slow_failure = allowed(breaker.admit(t0));
        let slow_success = allowed(breaker.admit(t0));
        for _ in 0..3 {
            call(&mut breaker, CallResult::Failure, t0);
        }
        let now = t0 + OPEN;
        let first_probe = allowed(breaker.admit(now));
        let before = breaker.snapshot(now);
        assert_eq!(breaker.record(slow_failure, CallResult::Failure, now), None);
        assert_eq!(breaker.record(slow_success, CallResult::Success, now), None);
        assert_eq!(breaker.record(slow_success, CallResult::Neutral, now), None);
        assert_eq!(breaker.snapshot(now), before);
        assert_eq!(breaker.state(now), HalfOpen);
        // Nor, once the probes close the circuit, can it count in the new window.
        assert_eq!(breaker.record(first_probe, CallResult::Success, now), None);
        probe(&mut breaker, CallResult::Success, now);
        assert_eq!(breaker.state(now), Closed);
        assert_eq!(breaker.record(slow_failure, CallResult::Failure, now), None);
        assert_eq!(breaker.snapshot(now).calls_in_window, 0);
        assert_eq!(breaker.snapshot(now).consecutive_failures, 0);
    }

    #[test]
    fn a_probe_from_an_earlier_half_open_phase_is_ignored() {
        let (mut breaker, start) = half_open(Instant::now());
        let old = allowed(breaker.admit(start));
        let failing = allowed(breaker.admit(start));
        breaker.record(failing, CallResult::Failure, start);
        let now = start + OPEN;
        let current = allowed(breaker.admit(now));
        let before = breaker.snapshot(now);
        assert_eq!((before.probes_in_flight, before.probe_successes), (1, 0));
        // Two successes would close a phase; the old one neither counts nor frees a slot.
        assert_eq!(breaker.record(old, CallResult::Success, now), None);
        assert_eq!(breaker.record(old, CallResult::Success, now), None);
        assert_eq!(breaker.record(old, CallResult::Failure, now), None);
        assert_eq!(breaker.snapshot(now), before);
        assert!(allowed(breaker.admit(now)).is_probe());
        rejected(breaker.admit(now));
        assert_eq!(breaker.record(current, CallResult::Success, now), None);
        assert_eq!(breaker.state(now), HalfOpen);
    }

    #[test]
    fn half_open_max_unsticks_lost_probes() {
        let (mut breaker, start) = half_open(Instant::now());
        let answered = allowed(breaker.admit(start));
        let _lost = allowed(breaker.admit(start));
        // A probe that does answer frees its slot but does not extend the phase.
        let later = start + ms(10);
        assert_eq!(breaker.record(answered, CallResult::Success, later), None);
        let lost = allowed(breaker.admit(later));
        assert_eq!(rejected(breaker.admit(later)), HALF_OPEN_RETRY_AFTER);
        let deadline = start + HALF_OPEN_MAX;
        assert_eq!(
            rejected(breaker.admit(deadline - NS)),
            HALF_OPEN_RETRY_AFTER
        );
        assert_eq!(breaker.state(deadline), HalfOpen);
        assert_eq!(rejected(breaker.admit(deadline)), OPEN);
        assert_eq!(breaker.state(deadline), Open);
        assert_eq!(breaker.snapshot(deadline).probes_in_flight, 0);
        // A report that turns up late belongs to the failed phase.
        assert_eq!(breaker.record(lost, CallResult::Success, deadline), None);
        assert!(allowed(breaker.admit(deadline + OPEN)).is_probe());
        assert_eq!(
            probe(&mut breaker, CallResult::Success, deadline + OPEN),
            None
        );
        assert_eq!(
            probe(&mut breaker, CallResult::Success, deadline + OPEN),
            transition(HalfOpen, Closed)
        );
    }

    #[test]
    fn advance_reports_what_admit_would_apply_silently() {
        let (mut breaker, start) = half_open(Instant::now());
        assert_eq!(breaker.advance(start), None);
        assert_eq!(
            breaker.advance(start + HALF_OPEN_MAX),
            transition(HalfOpen, Open)
        );
        let reopened = start + HALF_OPEN_MAX;
        assert_eq!(breaker.advance(reopened + OPEN - NS), None);
        assert_eq!(breaker.advance(reopened + OPEN), transition(Open, HalfOpen));
        // Nothing left for admit to do: it hands out a probe of the phase just entered.
        assert!(allowed(breaker.admit(reopened + OPEN)).is_probe());
        let mut closed = Breaker::new(settings(), start);
        assert_eq!(closed.advance(start + OPEN * 1000), None);
    }

    #[test]
    fn zero_counts_act_as_one() {
        let zeros = CircuitSettings {
            failure_rate: 0.0,
            min_calls: 0,
            window: 0,
            consecutive_failures: 0,
            open: Duration::ZERO,
            half_open_probes: 0,
            half_open_max: Duration::ZERO,
        };
        let t0 = Instant::now();
        let mut breaker = Breaker::new(zeros, t0);
        assert_eq!(call(&mut breaker, CallResult::Neutral, t0), None);
        assert_eq!(
            call(&mut breaker, CallResult::Failure, t0),
            transition(Closed, Open)
        );
        assert_eq!(breaker.state(t0), HalfOpen);
        assert_eq!(
            probe(&mut breaker, CallResult::Success, t0),
            transition(HalfOpen, Closed)
        );
        assert_eq!(breaker.snapshot(t0).calls_in_window, 0);
    }

    #[test]
    fn states_name_themselves_for_logs_and_metrics() {
        let cases = [
            (Closed, "closed", 0.0),
            (Open, "open", 1.0),
            (HalfOpen, "half_open", 2.0),
        ];
        for (state, name, gauge) in cases {
            assert_eq!(state.as_str(), name);
            assert_eq!(state.to_string(), name);
            assert_eq!(state.as_gauge(), gauge);
        }
    }

    #[test]
    fn classify_every_provider_status() {
        use crate::contract::{ProviderStatus, Source};
        use crate::outcome::Failure;
        use CallResult::{Failure as Failed, Neutral, Success};
        // Every status as a fixture or record states it, then the typed causes whose
        // status alone does not decide: admission refusals are neutral.
        let cases = [
            (ProviderStatus::Ok, Success),
            (ProviderStatus::NotFound, Success),
            (ProviderStatus::Timeout, Failed),
            (ProviderStatus::Unavailable, Failed),
            (ProviderStatus::LimitExceeded, Success),
            (ProviderStatus::InvalidResponse, Success),
            (ProviderStatus::SecretDetected, Success),
            (ProviderStatus::Incompatible, Success),
            (ProviderStatus::NotBound, Neutral),
            (ProviderStatus::InvalidRequest, Neutral),
            (ProviderStatus::NotEvaluated, Neutral),
        ];
        let covered: Vec<_> = cases.iter().map(|(status, _)| *status).collect();
        assert_eq!(covered, ProviderStatus::ALL);
        for (status, expected) in cases {
            let outcome = Outcome::stated(status, None, Source::Live);
            assert_eq!(classify(&outcome), expected, "{status}");
        }
        let typed = [
            (Failure::CircuitOpen, Neutral),
            (Failure::Overloaded, Neutral),
            (Failure::ConnectFailed, Failed),
            (Failure::Deadline, Failed),
            (Failure::HttpStatus(503), Failed),
            (Failure::PoolExhausted, Failed),
            (Failure::DatabaseError, Failed),
            (Failure::ResponseTooLarge, Success),
            (Failure::SecretPattern("github_token"), Success),
            (Failure::CredentialReflected, Success),
            (Failure::WrongContract, Success),
            (Failure::RequestNotBuilt, Neutral),
            (Failure::FixtureMissing, Neutral),
        ];
        for (failure, expected) in typed {
            let outcome = Outcome::failed(failure.clone(), Source::Live);
            assert_eq!(classify(&outcome), expected, "{failure:?}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Admit,
        /// Records the outstanding ticket at `pick` (modulo their number).
        Record(usize, CallResult),
        /// Forgets an outstanding ticket: its report is lost.
        Lose(usize),
        Wait(Duration),
        Advance,
    }

    fn call_result() -> impl Strategy<Value = CallResult> {
        prop_oneof![
            Just(CallResult::Success),
            Just(CallResult::Failure),
            Just(CallResult::Neutral),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Admit),
            4 => (any::<usize>(), call_result()).prop_map(|(pick, r)| Op::Record(pick, r)),
            1 => any::<usize>().prop_map(Op::Lose),
            3 => (0u64..60).prop_map(|n| Op::Wait(ms(n))),
            1 => Just(Op::Advance),
        ]
    }

    fn any_settings() -> impl Strategy<Value = CircuitSettings> {
        (1u32..8)
            .prop_flat_map(|window| {
                (
                    0.05f64..=1.0,
                    1..=window,
                    Just(window),
                    1u32..6,
                    1u64..40,
                    1u32..4,
                    1u64..80,
                )
            })
            .prop_map(
                |(failure_rate, min_calls, window, consecutive_failures, open, probes, max)| {
                    CircuitSettings {
                        failure_rate,
                        min_calls,
                        window,
                        consecutive_failures,
                        open: ms(open),
                        half_open_probes: probes,
                        half_open_max: ms(max),
                    }
                },
            )
    }

    /// The invariants that hold between any two events.
    fn check_invariants(breaker: &Breaker, issued: &[Ticket], now: Instant) {
        let settings = breaker.settings;
        let snapshot = breaker.snapshot(now);
        assert!(snapshot.probes_in_flight <= settings.half_open_probes);
        assert!(snapshot.calls_in_window <= settings.window);
        assert!(snapshot.failures_in_window <= snapshot.calls_in_window);
        match breaker.phase {
            Phase::Closed => {
                assert!(snapshot.consecutive_failures < settings.consecutive_failures);
                let calls = snapshot.calls_in_window;
                assert!(
                    calls < settings.min_calls
                        || f64::from(snapshot.failures_in_window) / f64::from(calls)
                            < settings.failure_rate
                );
            }
            Phase::Open { .. } | Phase::HalfOpen { .. } => {
                assert_eq!(
                    (snapshot.calls_in_window, snapshot.consecutive_failures),
                    (0, 0)
                );
            }
        }
        if let Phase::HalfOpen { in_flight, .. } = breaker.phase {
            // Every probe of this phase that was admitted and not recorded, lost or not.
            let unrecorded = issued
                .iter()
                .filter(|t| t.probe && t.generation == breaker.generation)
                .count();
            assert_eq!(in_flight as usize, unrecorded);
        }
    }

    proptest! {
        #[test]
        fn the_breaker_keeps_its_invariants(
            settings in any_settings(),
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut breaker = Breaker::new(settings, t0);
            // Admitted and not yet recorded: `outstanding` may still report, `lost` never.
            let mut outstanding: Vec<Ticket> = Vec::new();
            let mut lost: Vec<Ticket> = Vec::new();
            // When the current open period began, as seen from the outside.
            let mut opened_at: Option<Instant> = None;
            let note = |opened_at: &mut Option<Instant>, t: Option<Transition>, now: Instant| {
                if let Some(t) = t {
                    assert_ne!(t.from, t.to);
                    if t.to == Open {
                        *opened_at = Some(now);
                    }
                }
            };
            for op in ops {
                match op {
                    Op::Admit => {
                        let before = breaker.phase.state();
                        let admission = breaker.admit(now);
                        let after = breaker.phase.state();
                        if before == HalfOpen && after == Open {
                            note(&mut opened_at, Some(Transition { from: before, to: after }), now);
                        }
                        let within_open = opened_at.is_some_and(|at| now < at + settings.open);
                        match admission {
                            Admission::Allowed(ticket) => {
                                assert!(!within_open, "admitted within the open period");
                                assert_ne!(after, Open);
                                assert_eq!(ticket.is_probe(), after == HalfOpen);
                                assert_eq!(ticket.generation, breaker.generation);
                                outstanding.push(ticket);
                            }
                            Admission::Rejected { retry_after } => match after {
                                Open => {
                                    assert!(within_open);
                                    assert!(retry_after > Duration::ZERO);
                                    assert!(retry_after <= settings.open);
                                }
                                HalfOpen => assert_eq!(retry_after, HALF_OPEN_RETRY_AFTER),
                                Closed => panic!("closed rejected a call"),
                            },
                        }
                    }
                    Op::Record(pick, result) if !outstanding.is_empty() => {
                        let ticket = outstanding.swap_remove(pick % outstanding.len());
                        let stale = ticket.generation != breaker.generation;
                        let from = breaker.phase.state();
                        let before = breaker.snapshot(now);
                        let transition = breaker.record(ticket, result, now);
                        if stale {
                            assert_eq!(transition, None);
                            assert_eq!(breaker.snapshot(now), before);
                        }
                        if let Some(t) = transition {
                            assert_eq!(t.from, from);
                            assert_eq!(t.to, breaker.phase.state());
                            assert!(result != CallResult::Neutral);
                        }
                        note(&mut opened_at, transition, now);
                    }
                    Op::Record(..) => {}
                    Op::Lose(pick) if !outstanding.is_empty() => {
                        lost.push(outstanding.swap_remove(pick % outstanding.len()));
                    }
                    Op::Lose(_) => {}
                    Op::Wait(step) => now += step,
                    Op::Advance => {
                        let transition = breaker.advance(now);
                        note(&mut opened_at, transition, now);
                    }
                }
                let issued: Vec<Ticket> = outstanding.iter().chain(&lost).copied().collect();
                check_invariants(&breaker, &issued, now);
            }
            // Never stuck: whatever was lost, a healthy provider closes the circuit again.
            let pause = settings.open.max(settings.half_open_max);
            for _ in 0..3 {
                if breaker.state(now) == Closed {
                    break;
                }
                now += pause;
                while let Admission::Allowed(ticket) = breaker.admit(now) {
                    if breaker.record(ticket, CallResult::Success, now).is_some() {
                        break;
                    }
                }
            }
            prop_assert_eq!(breaker.state(now), Closed);
        }
    }
}
