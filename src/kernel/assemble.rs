//! Assembly of a turn: layer and provider statuses, the blocked rule, currentness, and
//! the rendered text cut to the byte budget — lowest-priority material truncated or
//! dropped first, every cut recorded, every rendered material recorded as a selection.

use super::Outcome;
use super::render;
use crate::contract::{
    Currentness, CutAction, Item, LayerReason, LayerStatus, ProviderStatus, Source,
};
use crate::digest::{canonical_digest, sha256_tagged};
use crate::gate::{LayerDecision, Plan, ProviderDecision};
use crate::handles::HandleRef;
use crate::project::{CurrentnessRule, LayerKind, Project};
use serde::Serialize;

/// Material that would show fewer content bytes than this is dropped, not truncated.
const MIN_SHOWN_BYTES: usize = 64;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnResult {
    pub layers: Vec<LayerResult>,
    pub providers: Vec<ProviderResult>,
    pub blocked: bool,
    pub blocking_layers: Vec<String>,
    /// `None` when the turn is blocked.
    pub rendered: Option<String>,
    pub rendered_digest: Option<String>,
    pub selections: Vec<Selection>,
    pub cuts: Vec<Cut>,
    pub budget: BudgetUse,
    /// The fence nonce actually used (never found inside any material).
    #[serde(skip)]
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerResult {
    pub id: String,
    pub status: LayerStatus,
    pub reason: LayerReason,
    pub required: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Names of missing inputs, for `PROVIDER_INPUT_NOT_PROVIDED`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_inputs: Vec<String>,
    /// Worst currentness of the layer's provider data, for bound layers that got data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currentness: Option<Currentness>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderResult {
    pub id: String,
    pub status: ProviderStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Set when the provider was invoked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currentness: Option<Currentness>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub items: usize,
}

/// One rendered material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    pub layer: String,
    /// The provider that supplied it; `None` for static layer text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// 1-based position among the provider's items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    /// The provider's record id, from which a trace derives a keyed locator. Never
    /// serialized: responses and traces carry only the locator.
    #[serde(skip)]
    pub item_id: Option<String>,
    /// SHA-256 of the canonical item (or of the static text).
    pub fingerprint: String,
    /// Content bytes rendered.
    pub bytes: usize,
    pub truncated: bool,
    /// The handle the item is kept behind when it did not fit (a reference is rendered
    /// instead of its content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<HandleRef>,
}

/// One budget cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cut {
    pub layer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    /// The provider's record id, for a keyed locator. Never serialized.
    #[serde(skip)]
    pub item_id: Option<String>,
    pub action: CutAction,
    pub bytes_before: usize,
    pub bytes_after: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUse {
    pub max_bytes: usize,
    pub used_bytes: usize,
}

/// Where items that do not fit go when their layer offers handles.
pub trait HandleSink {
    /// Keeps `item` behind a handle and returns it; `None` declines (the item is then
    /// truncated or dropped like any other).
    fn offer(&mut self, layer: &str, provider: &str, item: &Item) -> Option<HandleRef>;
}

/// A sink that never keeps anything: handles are not offered.
pub struct NoHandles;

impl HandleSink for NoHandles {
    fn offer(&mut self, _: &str, _: &str, _: &Item) -> Option<HandleRef> {
        None
    }
}

/// Assembles a turn. `outcomes[i]` answers `plan.invocations[i]`; `nonce` is the
/// candidate fence nonce (replaced deterministically if any material contains it).
/// Handles are not offered; see [`assemble_with_handles`].
pub fn assemble(
    project: &Project,
    plan: &Plan,
    outcomes: &[Outcome],
    max_bytes: usize,
    nonce: &str,
) -> TurnResult {
    assemble_with_handles(project, plan, outcomes, max_bytes, nonce, &mut NoHandles)
}

/// Assembles a turn; items of layers with `handles: true` that do not fit are offered
/// to `handles` and referenced in the text.
pub fn assemble_with_handles(
    project: &Project,
    plan: &Plan,
    outcomes: &[Outcome],
    max_bytes: usize,
    nonce: &str,
    handles: &mut dyn HandleSink,
) -> TurnResult {
    assert_eq!(
        outcomes.len(),
        plan.invocations.len(),
        "one outcome per invocation"
    );
    let provider_outcome = |p: usize| match plan.providers[p] {
        ProviderDecision::Invoke(i) => Some(&outcomes[i]),
        _ => None,
    };
    let providers = provider_results(project, plan, &provider_outcome);
    let layers = layer_results(project, plan, &provider_outcome);

    let blocking_layers: Vec<String> = project
        .layers
        .iter()
        .zip(&layers)
        .filter(|(spec, result)| {
            spec.required
                && result.status.blocks_when_required()
                && !(plan.blocked && result.reason == LayerReason::NotEvaluated)
        })
        .map(|(spec, _)| spec.id.clone())
        .collect();
    let blocked = !blocking_layers.is_empty();

    if blocked {
        return TurnResult {
            layers,
            providers,
            blocked,
            blocking_layers,
            rendered: None,
            rendered_digest: None,
            selections: Vec::new(),
            cuts: Vec::new(),
            budget: BudgetUse {
                max_bytes,
                used_bytes: 0,
            },
            nonce: nonce.to_owned(),
        };
    }

    let nonce = safe_nonce(project, plan, outcomes, nonce);
    let mut layout = Layout::build(project, &layers, &providers, &provider_outcome, &nonce);
    let cuts = layout.fit(max_bytes, handles);
    let rendered = layout.render();
    let selections = layout.selections();
    TurnResult {
        layers,
        providers,
        blocked,
        blocking_layers,
        rendered_digest: Some(sha256_tagged(rendered.as_bytes())),
        budget: BudgetUse {
            max_bytes,
            used_bytes: rendered.len(),
        },
        rendered: Some(rendered),
        selections,
        cuts,
        nonce,
    }
}

fn provider_results<'o>(
    project: &Project,
    plan: &Plan,
    provider_outcome: &dyn Fn(usize) -> Option<&'o Outcome>,
) -> Vec<ProviderResult> {
    let mut results = Vec::new();
    for (p, decision) in plan.providers.iter().enumerate() {
        let id = project.providers[p].id.clone();
        let result = match (decision.final_status(), provider_outcome(p)) {
            (Some(status), _) => ProviderResult {
                id,
                status,
                detail: match decision {
                    ProviderDecision::InvalidRequest(invalid) => Some(invalid.detail().to_owned()),
                    _ => None,
                },
                source: None,
                currentness: None,
                version: None,
                revision: None,
                items: 0,
            },
            (None, Some(outcome)) => ProviderResult {
                id,
                status: outcome.status,
                detail: outcome.detail.clone(),
                source: Some(outcome.source),
                currentness: outcome.status.is_success().then_some(outcome.currentness),
                version: outcome.version.clone(),
                revision: outcome.revision.clone(),
                items: outcome.items.len(),
            },
            (None, None) => continue,
        };
        results.push(result);
    }
    results
}

fn layer_results<'o>(
    project: &Project,
    plan: &Plan,
    provider_outcome: &dyn Fn(usize) -> Option<&'o Outcome>,
) -> Vec<LayerResult> {
    project
        .layers
        .iter()
        .zip(&plan.layers)
        .map(|(spec, decision)| {
            let bound: &[usize] = match &spec.kind {
                LayerKind::Bound { providers } => providers,
                LayerKind::Static { .. } => &[],
            };
            let mut result = LayerResult {
                id: spec.id.clone(),
                status: LayerStatus::Included,
                reason: LayerReason::Static,
                required: spec.required,
                providers: bound
                    .iter()
                    .map(|&p| project.providers[p].id.clone())
                    .collect(),
                missing_inputs: Vec::new(),
                currentness: None,
            };
            let (status, reason) = match decision {
                LayerDecision::Excluded => (LayerStatus::Excluded, LayerReason::ProfileExcluded),
                LayerDecision::NotRequested(reason) => (LayerStatus::NotRequested, *reason),
                LayerDecision::MissingInput(keys) => {
                    result.missing_inputs = keys.clone();
                    (LayerStatus::Unknown, LayerReason::ProviderInputNotProvided)
                }
                LayerDecision::Static => (LayerStatus::Included, LayerReason::Static),
                LayerDecision::Refused => (LayerStatus::Unavailable, LayerReason::ProviderFailed),
                LayerDecision::Fetch => {
                    let outcomes: Vec<Option<&Outcome>> =
                        bound.iter().map(|&p| provider_outcome(p)).collect();
                    result.currentness = worst_currentness(&outcomes);
                    fetched_layer_status(spec.currentness, &outcomes)
                }
            };
            result.status = status;
            result.reason = reason;
            result
        })
        .collect()
}

/// Status of a layer whose providers were invoked (or not evaluated).
fn fetched_layer_status(
    rule: CurrentnessRule,
    outcomes: &[Option<&Outcome>],
) -> (LayerStatus, LayerReason) {
    if outcomes
        .iter()
        .any(|o| o.is_none_or(|o| o.status == ProviderStatus::NotEvaluated))
    {
        return (LayerStatus::Unknown, LayerReason::NotEvaluated);
    }
    let outcomes: Vec<&Outcome> = outcomes.iter().flatten().copied().collect();
    if outcomes.iter().any(|o| !o.status.is_success()) {
        return (LayerStatus::Unavailable, LayerReason::ProviderFailed);
    }
    let answered: Vec<&&Outcome> = outcomes.iter().filter(|o| o.found_anything()).collect();
    if rule == CurrentnessRule::Required
        && answered
            .iter()
            .any(|o| o.currentness != Currentness::Current)
    {
        return (LayerStatus::Unknown, LayerReason::NotCurrent);
    }
    if answered.is_empty() {
        (LayerStatus::Empty, LayerReason::NotFound)
    } else {
        (LayerStatus::Included, LayerReason::ProviderItems)
    }
}

fn worst_currentness(outcomes: &[Option<&Outcome>]) -> Option<Currentness> {
    let rank = |c: Currentness| match c {
        Currentness::Current => 0,
        Currentness::Stale => 1,
        Currentness::Unknown => 2,
    };
    outcomes
        .iter()
        .flatten()
        .filter(|o| o.found_anything())
        .map(|o| o.currentness)
        .max_by_key(|c| rank(*c))
}

/// The first nonce in the candidate chain that occurs in no text the render quotes.
fn safe_nonce(project: &Project, plan: &Plan, outcomes: &[Outcome], candidate: &str) -> String {
    let mut texts: Vec<&str> = Vec::new();
    for layer in &project.layers {
        texts.push(&layer.name);
        if let LayerKind::Static { content, .. } = &layer.kind {
            texts.push(content);
        }
    }
    let metadata: Vec<String> = outcomes
        .iter()
        .flat_map(|o| &o.items)
        .filter(|item| !item.metadata.is_empty())
        .map(|item| serde_json::to_string(&item.metadata).expect("metadata serializes"))
        .collect();
    texts.extend(metadata.iter().map(String::as_str));
    for item in outcomes.iter().flat_map(|o| &o.items) {
        texts.push(&item.content);
        texts.extend(item.title.as_deref());
        texts.extend(item.updated_at.as_deref());
    }
    debug_assert_eq!(outcomes.len(), plan.invocations.len());
    let mut nonce = candidate.to_owned();
    while texts.iter().any(|t| t.contains(nonce.as_str())) {
        nonce = render::next_nonce(&nonce);
    }
    nonce
}

/// How much of a material is rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    Full,
    Truncated(usize),
    /// Replaced by a reference to a handle (the reference text, ready to render).
    Handle(HandleRef, String),
    Dropped,
}

/// One quotable piece: static text or one provider item.
struct Material<'a> {
    section: usize,
    provider: Option<usize>,
    item: Option<(usize, &'a Item)>,
    /// Labels of a provider item, for a handle reference.
    label: Option<render::ItemLabel<'a>>,
    /// The layer offers handles for material that does not fit.
    handles: bool,
    fingerprint: String,
    prefix: String,
    content: &'a str,
    suffix: String,
    shown: Shown,
}

impl Material<'_> {
    fn shown_bytes(&self) -> usize {
        match self.shown {
            Shown::Full => self.content.len(),
            Shown::Truncated(n) => n,
            Shown::Handle(..) | Shown::Dropped => 0,
        }
    }

    fn rendered_len(&self) -> usize {
        match &self.shown {
            Shown::Dropped => 0,
            Shown::Handle(_, reference) => reference.len(),
            Shown::Full => self.prefix.len() + self.content.len() + self.suffix.len(),
            Shown::Truncated(n) => {
                self.prefix.len()
                    + n
                    + render::truncation_marker(*n, self.content.len()).len()
                    + self.suffix.len()
            }
        }
    }

    fn write(&self, out: &mut String) {
        match &self.shown {
            Shown::Dropped => {}
            Shown::Handle(_, reference) => out.push_str(reference),
            Shown::Full => {
                out.push_str(&self.prefix);
                out.push_str(self.content);
                out.push_str(&self.suffix);
            }
            Shown::Truncated(n) => {
                out.push_str(&self.prefix);
                out.push_str(&self.content[..*n]);
                out.push_str(&render::truncation_marker(*n, self.content.len()));
                out.push_str(&self.suffix);
            }
        }
    }
}

/// A rendered layer: heading, notes before its materials, statements after them.
struct Section {
    layer: usize,
    heading: String,
    notes: String,
    statements: String,
    dropped: bool,
}

struct Layout<'a> {
    project: &'a Project,
    nonce: String,
    notice: String,
    sections: Vec<Section>,
    materials: Vec<Material<'a>>,
}

impl<'a> Layout<'a> {
    fn build(
        project: &'a Project,
        layers: &[LayerResult],
        provider_results: &[ProviderResult],
        provider_outcome: &dyn Fn(usize) -> Option<&'a Outcome>,
        nonce: &str,
    ) -> Self {
        let mut sections = Vec::new();
        let mut materials = Vec::new();
        for (index, (spec, result)) in project.layers.iter().zip(layers).enumerate() {
            if matches!(
                result.status,
                LayerStatus::Excluded | LayerStatus::NotRequested
            ) {
                continue;
            }
            let section = sections.len();
            let mut notes = String::new();
            let mut statements = String::new();
            match &spec.kind {
                _ if result.reason == LayerReason::ProviderInputNotProvided => {
                    statements = format!(
                        "{}: input {} was not provided.\n",
                        render::UNKNOWN_FACTS,
                        result.missing_inputs.join(", ")
                    );
                }
                LayerKind::Static { content, digest } => materials.push(Material {
                    section,
                    provider: None,
                    item: None,
                    label: None,
                    handles: false,
                    fingerprint: digest.clone(),
                    prefix: String::new(),
                    content,
                    suffix: "\n".to_owned(),
                    shown: Shown::Full,
                }),
                LayerKind::Bound { providers } => {
                    for &p in providers {
                        let provider_id = &project.providers[p].id;
                        let outcome = provider_outcome(p);
                        if result.status == LayerStatus::Included {
                            let outcome = outcome.expect("an included layer's providers answered");
                            if outcome.found_anything()
                                && outcome.currentness != Currentness::Current
                            {
                                notes.push_str(&render::stale_note(
                                    provider_id,
                                    outcome.currentness,
                                ));
                            }
                            let count = outcome.items.len();
                            for (i, item) in outcome.items.iter().enumerate() {
                                let label = render::ItemLabel {
                                    layer: &spec.id,
                                    provider: provider_id,
                                    position: (i + 1, count),
                                    currentness: outcome.currentness,
                                };
                                materials.push(Material {
                                    section,
                                    provider: Some(p),
                                    item: Some((i + 1, item)),
                                    label: Some(label),
                                    handles: spec.handles,
                                    fingerprint: canonical_digest(item),
                                    prefix: render::item_prefix(nonce, &label, item),
                                    content: &item.content,
                                    suffix: render::item_suffix(nonce),
                                    shown: Shown::Full,
                                });
                            }
                        }
                        let status = providers_by_id(provider_results, provider_id);
                        statements.push_str(&statement(result, provider_id, status, outcome));
                    }
                }
            }
            sections.push(Section {
                layer: index,
                heading: render::layer_heading(&spec.name, &spec.id),
                notes,
                statements,
                dropped: false,
            });
        }
        Layout {
            project,
            nonce: nonce.to_owned(),
            notice: render::data_notice(nonce),
            sections,
            materials,
        }
    }

    fn has_provider_material(&self) -> bool {
        self.materials
            .iter()
            .any(|m| m.provider.is_some() && m.shown != Shown::Dropped)
    }

    fn omission_line(&self, section: usize) -> Option<String> {
        let dropped = self
            .materials
            .iter()
            .filter(|m| m.section == section && m.shown == Shown::Dropped)
            .count();
        (dropped > 0).then(|| format!("[{dropped} item(s) omitted to fit the context budget]\n"))
    }

    fn total_len(&self) -> usize {
        let mut total = if self.has_provider_material() {
            self.notice.len()
        } else {
            0
        };
        for (s, section) in self.sections.iter().enumerate() {
            if section.dropped {
                continue;
            }
            total += section.heading.len() + section.notes.len() + section.statements.len();
            total += render::section_end().len();
            total += self.omission_line(s).map_or(0, |l| l.len());
        }
        total
            + self
                .materials
                .iter()
                .filter(|m| !self.sections[m.section].dropped)
                .map(Material::rendered_len)
                .sum::<usize>()
    }

    /// Cuts lowest-priority material first until the text fits `max_bytes`.
    fn fit(&mut self, max_bytes: usize, handles: &mut dyn HandleSink) -> Vec<Cut> {
        let mut cuts = Vec::new();
        loop {
            let total = self.total_len();
            if total <= max_bytes {
                return cuts;
            }
            let over = total - max_bytes;
            if let Some(m) = self
                .materials
                .iter()
                .rposition(|m| m.shown != Shown::Dropped && !self.sections[m.section].dropped)
            {
                let cut = self.cut_material(m, over, handles);
                cuts.push(cut);
            } else if let Some(s) = self.sections.iter().rposition(|s| !s.dropped) {
                let before = self.section_len(s);
                self.sections[s].dropped = true;
                cuts.push(Cut {
                    layer: self.project.layers[self.sections[s].layer].id.clone(),
                    provider: None,
                    item: None,
                    item_id: None,
                    action: CutAction::SectionDropped,
                    bytes_before: before,
                    bytes_after: 0,
                });
            } else {
                return cuts;
            }
        }
    }

    fn section_len(&self, s: usize) -> usize {
        let section = &self.sections[s];
        section.heading.len() + section.notes.len() + section.statements.len()
    }

    fn cut_material(&mut self, m: usize, over: usize, handles: &mut dyn HandleSink) -> Cut {
        let nonce = &self.nonce;
        let material = &mut self.materials[m];
        let before = material.shown_bytes();
        // In a layer that offers handles, an item that does not fit is kept whole behind a
        // handle and referenced, instead of being truncated.
        if material.handles
            && material.shown == Shown::Full
            && let (Some((_, item)), Some(label)) = (material.item, material.label)
            && let Some(handle) = handles.offer(label.layer, label.provider, item)
        {
            let bytes = crate::digest::canonical_json_of(item).len();
            let reference = render::handle_reference(nonce, &label, item, bytes, &handle);
            material.shown = Shown::Handle(handle, reference);
            return self.cut_record(m, CutAction::Handle, before, 0);
        }
        let marker_now = match material.shown {
            Shown::Truncated(n) => render::truncation_marker(n, material.content.len()).len(),
            _ => 0,
        };
        // The marker's length is bounded by the one showing every byte.
        let marker_max =
            render::truncation_marker(material.content.len(), material.content.len()).len();
        let target = (before + marker_now).checked_sub(over + marker_max);
        let (action, after) = match target {
            Some(target)
                if target >= MIN_SHOWN_BYTES && !matches!(material.shown, Shown::Handle(..)) =>
            {
                let cut_at = floor_char_boundary(material.content, target);
                material.shown = Shown::Truncated(cut_at);
                (CutAction::Truncated, cut_at)
            }
            _ => {
                material.shown = Shown::Dropped;
                (CutAction::Dropped, 0)
            }
        };
        self.cut_record(m, action, before, after)
    }

    fn cut_record(&self, m: usize, action: CutAction, before: usize, after: usize) -> Cut {
        let material = &self.materials[m];
        Cut {
            layer: self.project.layers[self.sections[material.section].layer]
                .id
                .clone(),
            provider: material
                .provider
                .map(|p| self.project.providers[p].id.clone()),
            item: material.item.map(|(position, _)| position),
            item_id: material.item.map(|(_, item)| item.id.clone()),
            action,
            bytes_before: before,
            bytes_after: after,
        }
    }

    fn render(&self) -> String {
        let mut out = String::with_capacity(self.total_len());
        if self.has_provider_material() {
            out.push_str(&self.notice);
        }
        for (s, section) in self.sections.iter().enumerate() {
            if section.dropped {
                continue;
            }
            out.push_str(&section.heading);
            out.push_str(&section.notes);
            for material in self.materials.iter().filter(|m| m.section == s) {
                material.write(&mut out);
            }
            if let Some(line) = self.omission_line(s) {
                out.push_str(&line);
            }
            out.push_str(&section.statements);
            out.push_str(render::section_end());
        }
        debug_assert_eq!(out.len(), self.total_len());
        out
    }

    fn selections(&self) -> Vec<Selection> {
        self.materials
            .iter()
            .filter(|m| m.shown != Shown::Dropped && !self.sections[m.section].dropped)
            .map(|m| Selection {
                layer: self.project.layers[self.sections[m.section].layer]
                    .id
                    .clone(),
                provider: m.provider.map(|p| self.project.providers[p].id.clone()),
                item: m.item.map(|(position, _)| position),
                item_id: m.item.map(|(_, item)| item.id.clone()),
                fingerprint: m.fingerprint.clone(),
                bytes: m.shown_bytes(),
                truncated: matches!(m.shown, Shown::Truncated(_)),
                handle: match &m.shown {
                    Shown::Handle(handle, _) => Some(handle.clone()),
                    _ => None,
                },
            })
            .collect()
    }
}

fn providers_by_id(results: &[ProviderResult], id: &str) -> Option<ProviderStatus> {
    results.iter().find(|r| r.id == id).map(|r| r.status)
}

/// The statement rendered for one provider of a layer, saying what is known of it.
fn statement(
    layer: &LayerResult,
    provider: &str,
    status: Option<ProviderStatus>,
    outcome: Option<&Outcome>,
) -> String {
    let unknown = render::UNKNOWN_FACTS;
    match (layer.status, layer.reason) {
        (LayerStatus::Included | LayerStatus::Empty, _) => match outcome {
            Some(o) if !o.found_anything() => {
                format!("No matching records: provider {provider} has none.\n")
            }
            _ => String::new(),
        },
        (LayerStatus::Unknown, LayerReason::NotCurrent) => match outcome {
            Some(o) if o.found_anything() && o.currentness != Currentness::Current => format!(
                "{unknown}: provider {provider} reports {} data and this layer requires current data.\n",
                o.currentness.as_str()
            ),
            _ => String::new(),
        },
        (LayerStatus::Unknown, LayerReason::NotEvaluated) => {
            format!("{unknown}: provider {provider} was not evaluated.\n")
        }
        (LayerStatus::Unavailable, _) => match (status, outcome) {
            (Some(status), Some(_)) if !status.is_success() => {
                format!("{unknown}: provider {provider} returned {status}.\n")
            }
            (Some(status), None) => {
                format!("{unknown}: provider {provider} was not invoked ({status}).\n")
            }
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// The largest index ≤ `index` that is a char boundary of `text`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    (0..=index)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}
