//! Meaning checks of a parsed Project and its normalization (defaults filled in).
//! Pure: no files, no environment. Every problem is collected with its JSON path.

use super::model::{ContextTest, CurrentnessRule, Layer, Profile, ProjectDoc};
use super::{LayerKind, LayerSpec, ProfileSpec, Project, ProjectErrors, ProviderSpec};
use crate::bounds::{MAX_ITEMS, check_items_refusing};
use crate::contract::ProviderStatus;
use crate::digest::{canonical_digest, sha256_tagged};
use crate::validation::Problems;
use regex::{Regex, RegexBuilder};
use std::collections::HashSet;
use std::sync::LazyLock;

/// Every lookup value must match this before any declared pattern is tried.
pub(crate) const BASE_VALUE_GRAMMAR: &str = "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$";
/// `maxItems` when a provider requirement does not set it.
pub(crate) const DEFAULT_MAX_ITEMS: u32 = 10;
/// Budget when the Project sets none.
pub(crate) const DEFAULT_MAX_BYTES: usize = 16 * 1024;
/// Largest budget a Project or a turn may ask for.
pub(crate) const MAX_BUDGET_BYTES: usize = 1024 * 1024;
/// Smallest budget: room for the data notice and one fenced item header.
pub(crate) const MIN_BUDGET_BYTES: usize = 256;
/// Name of the profile used when a turn names none.
pub(crate) const DEFAULT_PROFILE: &str = "default";

static INPUT_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[A-Za-z_][A-Za-z0-9_.-]{0,63}$").unwrap());

/// Statuses a fixture may declare: what a provider could answer. Runtime decisions
/// (`NOT_BOUND`, `INVALID_REQUEST`, `NOT_EVALUATED`) and `OK` (use `items`) are not.
const FIXTURE_STATUSES: &[ProviderStatus] = &[
    ProviderStatus::NotFound,
    ProviderStatus::Timeout,
    ProviderStatus::Unavailable,
    ProviderStatus::LimitExceeded,
    ProviderStatus::InvalidResponse,
    ProviderStatus::SecretDetected,
    ProviderStatus::Incompatible,
];

/// Checks a turn input name (`lookup.input`, `requiresInput`, a test's inputs).
fn check_input_key(problems: &mut Problems, path: &str, key: &str) {
    if !INPUT_KEY.is_match(key) {
        problems.add(
            path,
            format!(
                "input name {key:?} is invalid: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or '_'"
            ),
        );
    }
}
/// Checks and normalizes a parsed document. `references` false: ids that other parts
/// refer to could not all be read (the shape check replaced some), so a reference to an
/// undeclared id is not reported.
pub(super) fn validate(
    mut doc: ProjectDoc,
    root: &str,
    references: bool,
) -> Result<Project, ProjectErrors> {
    let mut problems = Problems::under(root);
    if !references {
        problems = problems.ignoring_references();
    }
    problems.id("id", "project", &doc.id);
    if doc.version.trim().is_empty() {
        problems.add("version", "must not be empty");
    }
    if let Some(budget) = doc.budget {
        check_budget(&mut problems, "budget.maxBytes", budget.max_bytes);
    }

    let providers = validate_providers(&mut problems, &doc);
    let layers = validate_layers(&mut problems, &doc, &providers);
    if doc.layers.is_empty() {
        problems.add("layers", "a project needs at least one layer");
    }
    let mut profiles = validate_profiles(&mut problems, &doc.profiles, &doc.layers);
    if !doc.profiles.iter().any(|p| p.id == DEFAULT_PROFILE) {
        // A turn that names no profile uses `default`; without one declared, it is
        // every layer. Appended so authored profiles keep their paths.
        doc.profiles.push(Profile {
            id: DEFAULT_PROFILE.to_owned(),
            include: None,
            exclude: None,
        });
        profiles.push(ProfileSpec {
            id: DEFAULT_PROFILE.to_owned(),
            includes: vec![true; doc.layers.len()],
        });
    }
    for (i, test) in doc.tests.iter().enumerate() {
        validate_test(&mut problems, i, test, &doc, &providers);
    }
    let mut seen_tests = HashSet::new();
    for (i, test) in doc.tests.iter().enumerate() {
        if !seen_tests.insert(test.id.as_str()) {
            problems.add(
                &format!("tests[{i}].id"),
                format!("duplicate test id {:?}", test.id),
            );
        }
    }

    if !problems.is_empty() {
        return Err(ProjectErrors(problems.into_problems()));
    }
    normalize(&mut doc);
    let digest = canonical_digest(&doc);
    Ok(Project {
        doc,
        digest,
        providers,
        layers,
        profiles,
    })
}

fn check_budget(problems: &mut Problems, path: &str, max_bytes: usize) {
    if !(MIN_BUDGET_BYTES..=MAX_BUDGET_BYTES).contains(&max_bytes) {
        problems.add(
            path,
            format!(
                "{max_bytes} is out of range: use {MIN_BUDGET_BYTES}..={MAX_BUDGET_BYTES} bytes"
            ),
        );
    }
}

fn validate_providers(problems: &mut Problems, doc: &ProjectDoc) -> Vec<ProviderSpec> {
    let mut seen = HashSet::new();
    let mut specs = Vec::with_capacity(doc.providers.len());
    for (i, provider) in doc.providers.iter().enumerate() {
        let at = |field: &str| format!("providers[{i}].{field}");
        problems.id(&at("id"), "provider", &provider.id);
        if !seen.insert(provider.id.as_str()) {
            problems.add(
                &at("id"),
                format!("duplicate provider id {:?}", provider.id),
            );
        }
        if provider.name.trim().is_empty() {
            problems.add(&at("name"), "must not be empty");
        }
        check_input_key(problems, &at("lookup.input"), &provider.lookup.input);
        let pattern =
            provider.lookup.pattern.as_deref().and_then(|source| {
                match RegexBuilder::new(source).size_limit(1 << 20).build() {
                    Ok(regex) => Some(regex),
                    Err(e) => {
                        problems.add(&at("lookup.pattern"), format!("invalid regex: {e}"));
                        None
                    }
                }
            });
        let max_items = provider.max_items.unwrap_or(DEFAULT_MAX_ITEMS);
        if max_items == 0 || max_items as usize > MAX_ITEMS {
            problems.add(
                &at("maxItems"),
                format!("{max_items} is out of range: use 1..={MAX_ITEMS}"),
            );
        }
        specs.push(ProviderSpec {
            id: provider.id.clone(),
            input: provider.lookup.input.clone(),
            pattern,
            max_items,
        });
    }
    specs
}

fn validate_layers(
    problems: &mut Problems,
    doc: &ProjectDoc,
    providers: &[ProviderSpec],
) -> Vec<LayerSpec> {
    let mut seen = HashSet::new();
    let mut specs = Vec::with_capacity(doc.layers.len());
    for (i, layer) in doc.layers.iter().enumerate() {
        let at = |field: &str| format!("layers[{i}].{field}");
        problems.id(&at("id"), "layer", &layer.id);
        if !seen.insert(layer.id.as_str()) {
            problems.add(&at("id"), format!("duplicate layer id {:?}", layer.id));
        }
        if layer.name.trim().is_empty() {
            problems.add(&at("name"), "must not be empty");
        }
        let kind = layer_kind(problems, i, layer, providers);
        if matches!(kind, LayerKind::Static { .. }) && layer.currentness.is_some() {
            problems.add(
                &at("currentness"),
                "currentness applies only to layers with bindings",
            );
        }
        if matches!(kind, LayerKind::Static { .. }) && layer.handles.is_some() {
            problems.add(&at("handles"), "handles apply only to layers with bindings");
        }
        let requires_input = layer.requires_input.clone().unwrap_or_default();
        for (k, key) in requires_input.iter().enumerate() {
            check_input_key(problems, &at(&format!("requiresInput[{k}]")), key);
        }
        let scope = layer.scope.clone().unwrap_or_default();
        for (field, list) in [
            ("objectives", &scope.objectives),
            ("consumers", &scope.consumers),
        ] {
            if let Some(list) = list {
                if list.is_empty() {
                    problems.add(
                        &at(&format!("scope.{field}")),
                        "must list at least one value (omit it to allow any)",
                    );
                }
                for (k, value) in list.iter().enumerate() {
                    problems.id(&at(&format!("scope.{field}[{k}]")), "scope", value);
                }
            }
        }
        specs.push(LayerSpec {
            id: layer.id.clone(),
            name: layer.name.clone(),
            kind,
            required: layer.required.unwrap_or(false),
            requires_input,
            objectives: scope.objectives,
            consumers: scope.consumers,
            currentness: layer.currentness.unwrap_or_default(),
            handles: layer.handles.unwrap_or(false),
        });
    }
    specs
}

fn layer_kind(
    problems: &mut Problems,
    i: usize,
    layer: &Layer,
    providers: &[ProviderSpec],
) -> LayerKind {
    match (&layer.content, &layer.bindings) {
        (Some(content), None) => {
            if content.trim().is_empty() {
                problems.add(&format!("layers[{i}].content"), "must not be empty");
            }
            LayerKind::Static {
                content: content.clone(),
                digest: sha256_tagged(content.as_bytes()),
            }
        }
        (None, Some(bindings)) => {
            if bindings.is_empty() {
                problems.add(
                    &format!("layers[{i}].bindings"),
                    "must bind at least one provider",
                );
            }
            let mut indexes = Vec::with_capacity(bindings.len());
            for (b, binding) in bindings.iter().enumerate() {
                let path = format!("layers[{i}].bindings[{b}].provider");
                match providers.iter().position(|p| p.id == binding.provider) {
                    Some(index) if indexes.contains(&index) => problems.add(
                        &path,
                        format!(
                            "provider {:?} is bound twice in this layer",
                            binding.provider
                        ),
                    ),
                    Some(index) => indexes.push(index),
                    None => problems.reference(
                        &path,
                        format!(
                            "binds undeclared provider {:?}: declare it under providers",
                            binding.provider
                        ),
                    ),
                }
            }
            LayerKind::Bound { providers: indexes }
        }
        (Some(_), Some(_)) => {
            problems.add(
                &format!("layers[{i}]"),
                "a layer has either static content or bindings, not both",
            );
            LayerKind::Bound { providers: vec![] }
        }
        (None, None) => {
            problems.add(
                &format!("layers[{i}]"),
                "a layer needs static content or bindings",
            );
            LayerKind::Bound { providers: vec![] }
        }
    }
}

fn validate_profiles(
    problems: &mut Problems,
    profiles: &[Profile],
    layers: &[Layer],
) -> Vec<ProfileSpec> {
    let mut seen = HashSet::new();
    let mut specs = Vec::with_capacity(profiles.len());
    for (i, profile) in profiles.iter().enumerate() {
        let at = |field: &str| format!("profiles[{i}].{field}");
        problems.id(&at("id"), "profile", &profile.id);
        if !seen.insert(profile.id.as_str()) {
            problems.add(&at("id"), format!("duplicate profile id {:?}", profile.id));
        }
        let mut check_refs = |field: &str, list: &[String]| {
            for (k, layer_id) in list.iter().enumerate() {
                if !layers.iter().any(|l| &l.id == layer_id) {
                    problems.reference(
                        &at(&format!("{field}[{k}]")),
                        format!("unknown layer {layer_id:?}"),
                    );
                }
            }
        };
        let includes = match (&profile.include, &profile.exclude) {
            (Some(_), Some(_)) => {
                problems.add(
                    &format!("profiles[{i}]"),
                    "a profile lists either include or exclude, not both",
                );
                vec![false; layers.len()]
            }
            (Some(include), None) => {
                check_refs("include", include);
                layers.iter().map(|l| include.contains(&l.id)).collect()
            }
            (None, Some(exclude)) => {
                check_refs("exclude", exclude);
                layers.iter().map(|l| !exclude.contains(&l.id)).collect()
            }
            (None, None) => vec![true; layers.len()],
        };
        specs.push(ProfileSpec {
            id: profile.id.clone(),
            includes,
        });
    }
    specs
}

fn validate_test(
    problems: &mut Problems,
    i: usize,
    test: &ContextTest,
    doc: &ProjectDoc,
    providers: &[ProviderSpec],
) {
    let at = |field: &str| format!("tests[{i}].{field}");
    problems.id(&at("id"), "test", &test.id);
    let request = &test.request;
    if let Some(profile) = &request.profile
        && !doc.profiles.iter().any(|p| &p.id == profile)
    {
        problems.reference(
            &at("request.profile"),
            format!("unknown profile {profile:?}"),
        );
    }
    for key in request.inputs.keys() {
        check_input_key(problems, &at(&format!("request.inputs.{key}")), key);
    }
    if let Some(budget) = request.budget {
        check_budget(problems, &at("request.budget.maxBytes"), budget.max_bytes);
    }
    for (provider_id, fixture) in &test.providers {
        let path = at(&format!("providers.{provider_id}"));
        let Some(spec) = providers.iter().find(|p| &p.id == provider_id) else {
            problems.reference(
                &path,
                format!("fixture for undeclared provider {provider_id:?}"),
            );
            continue;
        };
        match (&fixture.items, fixture.status) {
            (Some(_), Some(_)) => {
                problems.add(&path, "a fixture has either items or status, not both")
            }
            (None, None) => problems.add(&path, "a fixture needs items or status"),
            (Some(items), None) => {
                // A fixture must be something a conforming provider could have sent.
                if let Err(violation) = check_items_refusing(items, spec.max_items) {
                    problems.add(&format!("{path}.items"), violation.to_string());
                }
            }
            (None, Some(status)) => {
                if !FIXTURE_STATUSES.contains(&status) {
                    let allowed: Vec<_> = FIXTURE_STATUSES.iter().map(|s| s.as_str()).collect();
                    problems.add(
                        &format!("{path}.status"),
                        format!(
                            "{status} cannot be a fixture status: use items, or one of {}",
                            allowed.join(", ")
                        ),
                    );
                }
            }
        }
    }
    for layer_id in test.expect.layers.keys() {
        if !doc.layers.iter().any(|l| &l.id == layer_id) {
            problems.reference(
                &at(&format!("expect.layers.{layer_id}")),
                format!("unknown layer {layer_id:?}"),
            );
        }
    }
    for provider_id in test.expect.providers.keys() {
        if !providers.iter().any(|p| &p.id == provider_id) {
            problems.reference(
                &at(&format!("expect.providers.{provider_id}")),
                format!("unknown provider {provider_id:?}"),
            );
        }
    }
}

/// Fills in every default so the normalized document says exactly what runs.
fn normalize(doc: &mut ProjectDoc) {
    for provider in &mut doc.providers {
        provider.max_items.get_or_insert(DEFAULT_MAX_ITEMS);
    }
    for layer in &mut doc.layers {
        layer.required.get_or_insert(false);
        if layer.bindings.is_some() {
            layer.currentness.get_or_insert(CurrentnessRule::Preferred);
            layer.handles.get_or_insert(false);
        }
    }
    doc.budget.get_or_insert(super::Budget {
        max_bytes: DEFAULT_MAX_BYTES,
    });
}
