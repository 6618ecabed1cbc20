//! Assembly of a turn: layer and provider statuses, the blocked rule, currentness, and
//! the rendered text cut to the byte budget — lowest-priority material truncated or
//! dropped first, every cut recorded, every rendered material recorded as a selection.

use super::render;
use crate::contract::HandleRef;
use crate::contract::{
    BudgetReport, Currentness, CutAction, CutReport, Item, LayerReason, LayerReport, LayerStatus,
    ProviderReport, ProviderStatus, SelectionReport, TurnResult,
};
use crate::digest::DigestKey;
use crate::digest::sha256_tagged;
use crate::gate::{Decisions, LayerDecision, ProviderDecision};
use crate::outcome::{Call, Outcome};
use crate::project::{CurrentnessRule, LayerKind, Project};

/// Material that would show fewer content bytes than this is dropped, not truncated.
const MIN_SHOWN_BYTES: usize = 64;

/// Where items that do not fit go when their layer offers handles.
///
/// Fitting the text may put an item behind a handle and later drop even its reference
/// for budget, so handles are decided and kept in two steps: [`HandleSink::offer`]
/// while the text is fitted (nothing is kept yet), [`HandleSink::withdraw`] when an
/// offered item is dropped after all, and [`HandleSink::keep`] once the text is final,
/// for exactly the handles it references. A sink never keeps an item the turn does not
/// return.
pub trait HandleSink {
    /// The handle `item` would be kept behind; `None` declines (the item is then
    /// truncated or dropped like any other). Nothing is kept yet.
    fn offer(&mut self, layer: &str, provider: &str, item: &Item) -> Option<HandleRef>;

    /// The item offered behind `handle` was dropped after all: the text does not
    /// reference it, so it must not be kept.
    fn withdraw(&mut self, _handle: &HandleRef) {}

    /// Keeps `item` behind `handle` (one it offered): the final text references it.
    /// Called once per such handle, after fitting.
    fn keep(&mut self, _handle: &HandleRef, _item: &Item) {}
}

/// A sink that never keeps anything: handles are not offered.
pub struct NoHandles;

impl HandleSink for NoHandles {
    fn offer(&mut self, _: &str, _: &str, _: &Item) -> Option<HandleRef> {
        None
    }
}

/// How one turn is rendered.
pub struct Rendering<'a> {
    /// The byte budget of the rendered text.
    pub max_bytes: usize,
    /// The candidate fence nonce (replaced deterministically if any material contains it).
    pub nonce: &'a str,
    /// Where items that do not fit go when their layer offers handles.
    pub handles: &'a mut dyn HandleSink,
    /// Keys the locators of selections and cuts; `None` leaves them out (Context Tests
    /// and Preview, which have no deployment key).
    pub locators: Option<&'a DigestKey>,
}

/// Assembles a turn without handles or locators. `calls[i]` answers the plan's
/// invocation `i`; see [`assemble_with`].
pub fn assemble(
    project: &Project,
    decisions: &Decisions,
    calls: &[Call],
    max_bytes: usize,
    nonce: &str,
) -> TurnResult {
    let rendering = Rendering {
        max_bytes,
        nonce,
        handles: &mut NoHandles,
        locators: None,
    };
    assemble_with(project, decisions, calls, rendering)
}

/// Assembles a turn: statuses, the blocked rule, and — unless blocked — the text cut to
/// the budget. Items of layers with `handles: true` that do not fit are offered to
/// `rendering.handles` and referenced in the text.
pub fn assemble_with(
    project: &Project,
    decisions: &Decisions,
    calls: &[Call],
    rendering: Rendering<'_>,
) -> TurnResult {
    let Rendering {
        max_bytes,
        nonce,
        handles,
        locators,
    } = rendering;
    let quotable = render::quotable(calls);
    let calls: &[Call] = &quotable;
    let provider_call = |p: usize| match decisions.providers[p] {
        ProviderDecision::Invoke(i) => {
            let call = &calls[i];
            debug_assert_eq!(
                call.invocation.provider, p,
                "calls answer invocations in order"
            );
            Some(call)
        }
        _ => None,
    };
    let providers = provider_results(project, decisions, &provider_call);
    let layers = layer_results(project, decisions, &provider_call);

    let blocking_layers: Vec<String> = project
        .layers
        .iter()
        .zip(&layers)
        .filter(|(spec, result)| {
            spec.required
                && result.status.blocks_when_required()
                && !(decisions.blocked && result.reason == LayerReason::NotEvaluated)
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
            budget: BudgetReport {
                max_bytes,
                used_bytes: 0,
            },
            nonce: nonce.to_owned(),
        };
    }

    let nonce = safe_nonce(project, calls, nonce);
    let mut layout = Layout::build(project, &layers, &providers, &provider_call, &nonce);
    layout.locators = locators;
    let cuts = layout.fit(max_bytes, handles);
    layout.keep_handles(handles);
    let rendered = layout.render();
    let selections = layout.selections();
    TurnResult {
        layers,
        providers,
        blocked,
        blocking_layers,
        rendered_digest: Some(sha256_tagged(rendered.as_bytes())),
        budget: BudgetReport {
            max_bytes,
            used_bytes: rendered.len(),
        },
        rendered: Some(rendered),
        selections,
        cuts,
        nonce,
    }
}

fn provider_results<'c>(
    project: &Project,
    decisions: &Decisions,
    provider_call: &dyn Fn(usize) -> Option<&'c Call>,
) -> Vec<ProviderReport> {
    let mut results = Vec::new();
    for (p, decision) in decisions.providers.iter().enumerate() {
        let id = project.providers[p].id.clone();
        let result = match (decision.final_status(), provider_call(p)) {
            (Some(status), _) => ProviderReport {
                id,
                status,
                detail: match decision {
                    ProviderDecision::InvalidRequest(invalid) => Some(invalid.detail().to_owned()),
                    _ => None,
                },
                source: None,
                currentness: None,
                version: None,
                version_source: None,
                revision: None,
                items: 0,
                duration_ms: None,
                age_ms: None,
                redactions: Default::default(),
                items_dropped: 0,
            },
            (None, Some(call)) => {
                let outcome = &call.outcome;
                ProviderReport {
                    id,
                    status: outcome.status(),
                    detail: outcome.detail().map(str::to_owned),
                    source: Some(outcome.source),
                    currentness: outcome.currentness(),
                    version: outcome.version.clone(),
                    version_source: call.facts.version_source,
                    revision: outcome.revision.clone(),
                    items: outcome.items_found().len(),
                    duration_ms: call.facts.duration.map(|d| d.as_millis() as u64),
                    age_ms: call.facts.age.map(|age| age.as_millis() as u64),
                    redactions: outcome.redactions.clone(),
                    items_dropped: outcome.items_dropped,
                }
            }
            (None, None) => continue,
        };
        results.push(result);
    }
    results
}

fn layer_results<'c>(
    project: &Project,
    decisions: &Decisions,
    provider_call: &dyn Fn(usize) -> Option<&'c Call>,
) -> Vec<LayerReport> {
    project
        .layers
        .iter()
        .zip(&decisions.layers)
        .map(|(spec, decision)| {
            let bound: &[usize] = match &spec.kind {
                LayerKind::Bound { providers } => providers,
                LayerKind::Static { .. } => &[],
            };
            let mut result = LayerReport {
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
                    let outcomes: Vec<Option<&Outcome>> = bound
                        .iter()
                        .map(|&p| provider_call(p).map(|call| &call.outcome))
                        .collect();
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
        .any(|o| o.is_none_or(|o| o.status() == ProviderStatus::NotEvaluated))
    {
        return (LayerStatus::Unknown, LayerReason::NotEvaluated);
    }
    let outcomes: Vec<&Outcome> = outcomes.iter().flatten().copied().collect();
    if outcomes.iter().any(|o| !o.is_success()) {
        return (LayerStatus::Unavailable, LayerReason::ProviderFailed);
    }
    let answered: Vec<&&Outcome> = outcomes.iter().filter(|o| o.found_anything()).collect();
    if rule == CurrentnessRule::Required
        && answered
            .iter()
            .any(|o| o.currentness() != Some(Currentness::Current))
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
        .filter_map(|o| o.currentness())
        .max_by_key(|c| rank(*c))
}

/// The first nonce in the candidate chain that occurs in no text the render quotes.
fn safe_nonce(project: &Project, calls: &[Call], candidate: &str) -> String {
    let mut texts: Vec<&str> = Vec::new();
    for layer in &project.layers {
        texts.push(&layer.name);
        if let LayerKind::Static { content, .. } = &layer.kind {
            texts.push(content);
        }
    }
    let items = || calls.iter().flat_map(|call| call.outcome.items_found());
    let metadata: Vec<String> = items()
        .filter(|item| !item.metadata.is_empty())
        .map(|item| serde_json::to_string(&item.metadata).expect("metadata serializes"))
        .collect();
    texts.extend(metadata.iter().map(String::as_str));
    for item in items() {
        texts.push(&item.content);
        texts.extend(item.title.as_deref());
        texts.extend(item.updated_at.as_deref());
    }
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
    /// Keys the locators of selections and cuts; `None` leaves them out.
    locators: Option<&'a DigestKey>,
    nonce: String,
    notice: String,
    sections: Vec<Section>,
    materials: Vec<Material<'a>>,
}

impl<'a> Layout<'a> {
    fn build(
        project: &'a Project,
        layers: &[LayerReport],
        provider_results: &[ProviderReport],
        provider_call: &dyn Fn(usize) -> Option<&'a Call>,
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
                        let call = provider_call(p);
                        let outcome = call.map(|call| &call.outcome);
                        if let Some(call) = call.filter(|_| result.status == LayerStatus::Included)
                        {
                            let outcome = &call.outcome;
                            let currentness = outcome.currentness().unwrap_or_default();
                            if outcome.found_anything() && currentness != Currentness::Current {
                                notes.push_str(&render::stale_note(provider_id, currentness));
                            }
                            let items = outcome.items_found();
                            let count = items.len();
                            for (i, (item, fingerprint)) in
                                items.iter().zip(&call.fingerprints).enumerate()
                            {
                                let label = render::ItemLabel {
                                    layer: &spec.id,
                                    provider: provider_id,
                                    position: (i + 1, count),
                                    currentness,
                                };
                                materials.push(Material {
                                    section,
                                    provider: Some(p),
                                    item: Some((i + 1, item)),
                                    label: Some(label),
                                    handles: spec.handles,
                                    fingerprint: fingerprint.clone(),
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
            locators: None,
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
    fn fit(&mut self, max_bytes: usize, handles: &mut dyn HandleSink) -> Vec<CutReport> {
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
                cuts.push(CutReport {
                    layer: self.project.layers[self.sections[s].layer].id.clone(),
                    provider: None,
                    locator: None,
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

    fn cut_material(&mut self, m: usize, over: usize, handles: &mut dyn HandleSink) -> CutReport {
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
                // A reference that does not fit either: the handle is not returned, so
                // it is never kept.
                if let Shown::Handle(handle, _) = &material.shown {
                    handles.withdraw(handle);
                }
                material.shown = Shown::Dropped;
                (CutAction::Dropped, 0)
            }
        };
        self.cut_record(m, action, before, after)
    }

    /// Has the sink keep every item the fitted text references behind a handle.
    fn keep_handles(&self, handles: &mut dyn HandleSink) {
        for material in &self.materials {
            if let (Shown::Handle(handle, _), Some((_, item))) = (&material.shown, material.item)
                && !self.sections[material.section].dropped
            {
                handles.keep(handle, item);
            }
        }
    }

    fn cut_record(&self, m: usize, action: CutAction, before: usize, after: usize) -> CutReport {
        let material = &self.materials[m];
        CutReport {
            layer: self.project.layers[self.sections[material.section].layer]
                .id
                .clone(),
            provider: material
                .provider
                .map(|p| self.project.providers[p].id.clone()),
            locator: self.locator(material),
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

    /// The keyed locator of a provider item (never its record id); `None` for static
    /// text or without a key.
    fn locator(&self, material: &Material<'_>) -> Option<String> {
        let (key, p, (_, item)) = (self.locators?, material.provider?, material.item?);
        Some(key.locator(&self.project.providers[p].id, &item.id))
    }

    fn selections(&self) -> Vec<SelectionReport> {
        self.materials
            .iter()
            .filter(|m| m.shown != Shown::Dropped && !self.sections[m.section].dropped)
            .map(|m| SelectionReport {
                layer: self.project.layers[self.sections[m.section].layer]
                    .id
                    .clone(),
                provider: m.provider.map(|p| self.project.providers[p].id.clone()),
                locator: self.locator(m),
                fingerprint: Some(m.fingerprint.clone()),
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

fn providers_by_id(results: &[ProviderReport], id: &str) -> Option<ProviderStatus> {
    results.iter().find(|r| r.id == id).map(|r| r.status)
}

/// The statement rendered for one provider of a layer, saying what is known of it.
fn statement(
    layer: &LayerReport,
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
            Some(o) if o.found_anything() && o.currentness() != Some(Currentness::Current) => {
                format!(
                    "{unknown}: provider {provider} reports {} data and this layer requires current data.\n",
                    o.currentness().unwrap_or_default().as_str()
                )
            }
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
