//! The turn pipeline: one sequence for every way ctxd answers a turn.
//!
//! 1. [`plan`]: gating decides every layer and the exact invocations of the turn;
//! 2. [`Planned::call`]: an [`OutcomeSource`] answers every invocation, concurrently, and
//!    each answer becomes one [`Call`] (invocation, outcome, call facts, fingerprints);
//! 3. [`Called::assemble`]: the kernel decides statuses and the blocked rule and renders
//!    the text within the budget;
//! 4. [`Answered::capture`] builds the turn's provenance and [`Answered::respond`] its
//!    API answer.
//!
//! The sources are the bound providers (`actors::coordinator`), Context Test fixtures
//! (`fixtures`: Context Tests, Preview and `serve --fixtures`) and a recorded trace
//! ([`replay`]). Everything here is pure except what a source does to answer.

pub(crate) mod capture;
pub(crate) mod replay;
mod respond;

pub use capture::{ProviderTraceSettings, TurnFacts};

use crate::contract::TurnResult;
use crate::gate::{self, Decisions, GateRequest, Invocation, Plan};
use crate::kernel::{self, Rendering};
use crate::outcome::{Call, CallFacts, Outcome};
use crate::project::Project;
use futures_util::FutureExt;
use futures_util::future::join_all;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::time::SystemTime;

/// What a turn asks for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// `None` means `default`.
    pub profile: Option<&'a str>,
    pub objective: Option<&'a str>,
    pub consumer: Option<&'a str>,
    pub inputs: &'a BTreeMap<String, String>,
}

/// The profile a turn names is not in the project.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile {0:?}")]
pub struct UnknownProfile(pub String);

/// Where the outcomes of a turn's invocations come from.
pub trait OutcomeSource {
    /// Why the source cannot answer at all (a replay whose records disagree with the
    /// plan); provider failures are outcomes, never errors.
    type Error;

    /// Whether the deployment binds the provider (gating step 5).
    fn is_bound(&self, provider: &str) -> bool;

    /// Answers one invocation.
    fn answer(
        &self,
        invocation: &Invocation,
    ) -> impl Future<Output = Result<(Outcome, CallFacts), Self::Error>>;
}

/// A turn planned by gating, before any provider answered.
#[derive(Debug)]
pub struct Planned<'p> {
    project: &'p Project,
    profile: &'p str,
    plan: Plan,
}

/// Plans a turn: `ask` against the project, with the source saying what is bound.
pub fn plan<'p>(
    project: &'p Project,
    ask: &Ask<'_>,
    source: &impl OutcomeSource,
) -> Result<Planned<'p>, UnknownProfile> {
    let profile_id = ask.profile.unwrap_or("default");
    let profile = project
        .profile(profile_id)
        .ok_or_else(|| UnknownProfile(profile_id.to_owned()))?;
    let request = GateRequest {
        profile,
        objective: ask.objective,
        consumer: ask.consumer,
        inputs: ask.inputs,
    };
    let plan = gate::plan(project, &request, &|id| source.is_bound(id));
    Ok(Planned {
        project,
        profile: &profile.id,
        plan,
    })
}

impl<'p> Planned<'p> {
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The turn's budget: what it asks for, never more than the project allows.
    pub(crate) fn budget(&self, requested: Option<usize>) -> usize {
        let ceiling = self.project.max_bytes();
        requested.map_or(ceiling, |requested| requested.min(ceiling))
    }

    /// Has every invocation answered by `source`, all at once; the calls keep the plan's
    /// order. The first error of the source, in that order, ends the turn.
    pub(crate) async fn call<S: OutcomeSource>(self, source: &S) -> Result<Called<'p>, S::Error> {
        let answers = join_all(self.plan.invocations.iter().map(|i| source.answer(i))).await;
        let mut calls = Vec::with_capacity(answers.len());
        for (invocation, answer) in self.plan.invocations.into_iter().zip(answers) {
            let (outcome, facts) = answer?;
            calls.push(Call::new(invocation, outcome, facts));
        }
        Ok(Called {
            project: self.project,
            profile: self.profile,
            decisions: self.plan.decisions,
            calls,
        })
    }

    /// [`Planned::call`] for a source that answers without waiting (fixtures, a
    /// recorded trace).
    pub fn call_now<S: OutcomeSource>(self, source: &S) -> Result<Called<'p>, S::Error> {
        self.call(source)
            .now_or_never()
            .expect("a source that never waits answers in one poll")
    }
}

/// A turn whose invocations have all been answered.
#[derive(Debug)]
pub struct Called<'p> {
    pub(crate) project: &'p Project,
    /// The profile's id.
    pub(crate) profile: &'p str,
    pub(crate) decisions: Decisions,
    /// One per invocation of the plan, in its order.
    pub calls: Vec<Call>,
}

impl<'p> Called<'p> {
    /// Statuses, the blocked rule and the text within the budget (the kernel).
    pub fn assemble(self, rendering: Rendering<'_>) -> Answered<'p> {
        let result = kernel::assemble_with(self.project, &self.decisions, &self.calls, rendering);
        Answered {
            called: self,
            result,
        }
    }

    /// The call of a provider, by its index in the project.
    pub(crate) fn call_of(&self, provider: usize) -> Option<&Call> {
        match self.decisions.providers.get(provider)? {
            gate::ProviderDecision::Invoke(i) => self.calls.get(*i),
            _ => None,
        }
    }
}

/// A turn assembled: what the kernel made of it, with the calls behind it.
#[derive(Debug)]
pub struct Answered<'p> {
    pub(crate) called: Called<'p>,
    pub(crate) result: TurnResult,
}

/// A source that answers every invocation at once from a function, untimed: Context
/// Tests and Preview answer from fixtures through it.
pub struct Immediate<B, F> {
    is_bound: B,
    answer: F,
    observed_at: SystemTime,
}

impl<B, F> Immediate<B, F>
where
    B: Fn(&str) -> bool,
    F: Fn(&Invocation) -> Outcome,
{
    pub fn new(is_bound: B, answer: F) -> Self {
        Immediate {
            is_bound,
            answer,
            observed_at: SystemTime::now(),
        }
    }

    /// Reports every answer as observed at `time` (a fixed clock for tests).
    #[cfg(test)]
    pub(crate) fn observed_at(mut self, time: SystemTime) -> Self {
        self.observed_at = time;
        self
    }
}

impl<B, F> OutcomeSource for Immediate<B, F>
where
    B: Fn(&str) -> bool,
    F: Fn(&Invocation) -> Outcome,
{
    type Error = Infallible;

    fn is_bound(&self, provider: &str) -> bool {
        (self.is_bound)(provider)
    }

    async fn answer(&self, invocation: &Invocation) -> Result<(Outcome, CallFacts), Infallible> {
        let outcome = (self.answer)(invocation);
        let mut facts = CallFacts::untimed(&outcome);
        facts.observed_at = self.observed_at;
        Ok((outcome, facts))
    }
}
