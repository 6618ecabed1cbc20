//! The turn API's answer (`POST /v1/turns`): what the kernel made of the turn, with the
//! turn's identity, its project and binding, and its duration.

use super::{Answered, TurnFacts};
use crate::contract::TurnResponse;

impl Answered<'_> {
    /// The `200` answer of the turn.
    pub(crate) fn respond(self, turn: &TurnFacts<'_>) -> TurnResponse {
        TurnResponse {
            turn_id: turn.turn_id.to_owned(),
            project: self.called.project.id().to_owned(),
            project_version: self.called.project.doc.version.clone(),
            build_digest: self.called.project.digest.clone(),
            binding_revision: turn.binding.map(|(revision, _)| revision.to_owned()),
            binding_digest: turn.binding.map(|(_, digest)| digest.to_owned()),
            profile: self.called.profile.to_owned(),
            objective: turn.ask.objective.map(str::to_owned),
            consumer: turn.ask.consumer.map(str::to_owned),
            result: self.result,
            duration_ms: turn.duration.as_millis() as u64,
        }
    }
}
