//! Context Projects: the authored document, its refusals and validation, its normalized
//! runtime form, and the Build (digest, pinned static layers, `RUNTIME_PROVIDER` entries).
//!
//! Loading is parse → refuse deployment details → typed parse → validate, collecting
//! every problem with its JSON path before anything is used.

mod build;
mod model;
pub(crate) mod refusal;
mod shape;
mod validate;

pub(crate) use build::Build;
pub(crate) use model::{Budget, ContextTest, CurrentnessRule, Expectations, Fixture, ProjectDoc};
#[cfg(test)]
pub(crate) use validate::DEFAULT_MAX_ITEMS;
pub(crate) use validate::{
    BASE_VALUE_GRAMMAR, DEFAULT_MAX_BYTES, MAX_BUDGET_BYTES, MIN_BUDGET_BYTES,
};

use crate::validation::{Notation, Problem, in_words};
use regex::Regex;
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// Every problem found in a Project, each at a JSON path such as
/// `$.providers[0].lookup.pattern`; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProjectErrors(pub Vec<Problem>);

impl fmt::Display for ProjectErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.0.len();
        write!(
            f,
            "{count} problem{} in the project",
            if count == 1 { "" } else { "s" }
        )?;
        for error in &self.0 {
            write!(f, "\n  {error}")?;
        }
        Ok(())
    }
}

/// Errors of loading a Project file: unreadable, or invalid.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {errors}")]
    Invalid { path: String, errors: ProjectErrors },
}

impl LoadError {}

/// A validated, normalized Project ready for gating and rendering.
#[derive(Debug, Clone)]
pub struct Project {
    /// The normalized document (defaults filled in); the Build digest is over this.
    pub(crate) doc: ProjectDoc,
    /// `sha256:<hex>` over the canonical JSON of `doc`.
    pub(crate) digest: String,
    pub(crate) providers: Vec<ProviderSpec>,
    pub(crate) layers: Vec<LayerSpec>,
    pub(crate) profiles: Vec<ProfileSpec>,
}

/// A provider requirement with its pattern compiled.
#[derive(Debug, Clone)]
pub(crate) struct ProviderSpec {
    pub(crate) id: String,
    /// Name of the turn input that carries the lookup value.
    pub(crate) input: String,
    /// The declared pattern, applied in addition to the base grammar.
    pub(crate) pattern: Option<Regex>,
    pub(crate) max_items: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct LayerSpec {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) kind: LayerKind,
    pub(crate) required: bool,
    pub(crate) requires_input: Vec<String>,
    /// `None`: any objective. `Some(list)`: only those.
    pub(crate) objectives: Option<Vec<String>>,
    /// `None`: any consumer. `Some(list)`: only those.
    pub(crate) consumers: Option<Vec<String>>,
    pub(crate) currentness: CurrentnessRule,
    /// Items that do not fit are kept behind handles (bound layers only).
    pub(crate) handles: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum LayerKind {
    /// Authored text, pinned in the Build by its digest.
    Static { content: String, digest: String },
    /// Indexes into `Project::providers`, in binding order.
    Bound { providers: Vec<usize> },
}

#[derive(Debug, Clone)]
pub struct ProfileSpec {
    pub(crate) id: String,
    /// Per layer index: whether the profile includes it.
    pub(crate) includes: Vec<bool>,
}

impl Project {
    /// Validates an authored document (already parsed) into a Project.
    #[cfg(test)]
    pub(crate) fn from_doc(doc: ProjectDoc) -> Result<Project, ProjectErrors> {
        validate::validate(doc, "$", true)
    }

    /// Parses and validates a Project or a Build from JSON text.
    pub(crate) fn from_json(text: &str) -> Result<Project, ProjectErrors> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            ProjectErrors(vec![Problem::new(
                "$",
                format!(
                    "not valid JSON: {e} (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            )])
        })?;
        if build::is_build(&value) {
            build::load_build(value)
        } else {
            load_document(value, "$")
        }
    }

    /// Reads and validates a Project or a Build file.
    pub fn load(path: &Path) -> Result<Project, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Project::from_json(&text).map_err(|errors| LoadError::Invalid {
            path: path.display().to_string(),
            errors,
        })
    }

    pub(crate) fn id(&self) -> &str {
        &self.doc.id
    }

    pub(crate) fn tests(&self) -> &[ContextTest] {
        &self.doc.tests
    }

    pub(crate) fn provider_index(&self, id: &str) -> Option<usize> {
        self.providers.iter().position(|p| p.id == id)
    }

    pub fn profile(&self, id: &str) -> Option<&ProfileSpec> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// The project's byte budget for rendered context.
    pub(crate) fn max_bytes(&self) -> usize {
        self.doc
            .budget
            .map(|b| b.max_bytes)
            .unwrap_or(DEFAULT_MAX_BYTES)
    }

    /// The Build of this Project.
    pub(crate) fn build(&self) -> Build {
        Build::of(self)
    }
}

/// Refusal scan, shape check, typed parse and validation of one raw Project document,
/// reporting every problem of every step at once: a refused key is removed and a value
/// of the wrong type replaced, so each later step still checks all the rest.
fn load_document(mut value: Value, root: &str) -> Result<Project, ProjectErrors> {
    let mut problems = refusal::refuse(&mut value, root);
    let mut replaced: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
    let checked = shape::check(&mut value, &shape::PROJECT, root);
    problems.extend(checked.problems);
    replaced.extend(checked.replaced);
    let doc: ProjectDoc = match serde_path_to_error::deserialize(value) {
        Ok(doc) => doc,
        // The shapes mirror the model, so this is a backstop: typed parsing decides.
        Err(e) => {
            let path = json_path(root, &e.path().to_string());
            problems.push(Problem::new(
                path,
                in_words(&e.into_inner().to_string(), Notation::Json),
            ));
            return Err(ProjectErrors(problems));
        }
    };
    let references = !replaced.iter().any(|path| declares_ids(path, root));
    match validate::validate(doc, root, references) {
        Ok(project) if problems.is_empty() => Ok(project),
        Ok(_) => Err(ProjectErrors(problems)),
        Err(ProjectErrors(found)) => {
            // What the checks say of a stand-in is not the author's problem.
            problems.extend(
                found
                    .into_iter()
                    .filter(|p| !replaced.iter().any(|r| is_at_or_below(&p.path, r))),
            );
            Err(ProjectErrors(problems))
        }
    }
}

/// Whether `path` holds ids that other parts of the document refer to: a list of
/// providers, layers or profiles, one of them, or its id.
fn declares_ids(path: &str, root: &str) -> bool {
    let Some(rest) = path.strip_prefix(root) else {
        return false;
    };
    ["providers", "layers", "profiles"].iter().any(|list| {
        rest.strip_prefix('.')
            .and_then(|rest| rest.strip_prefix(list))
            .is_some_and(|rest| {
                let element = rest
                    .strip_prefix('[')
                    .and_then(|rest| rest.split_once(']'))
                    .map(|(index, tail)| (index.chars().all(|c| c.is_ascii_digit()), tail));
                rest.is_empty() || matches!(element, Some((true, "" | ".id")))
            })
    })
}

/// Whether `path` is `at` or inside it (`$.a.b` and `$.a[0]` are inside `$.a`).
fn is_at_or_below(path: &str, at: &str) -> bool {
    path.strip_prefix(at)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// Joins serde_path_to_error's `a.b[0]` form onto a root such as `$`.
fn json_path(root: &str, inner: &str) -> String {
    if inner.is_empty() || inner == "." {
        root.to_owned()
    } else {
        format!("{root}.{inner}")
    }
}

#[cfg(test)]
mod tests;
