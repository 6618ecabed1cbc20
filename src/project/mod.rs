//! Context Projects: the authored document, its refusals and validation, its normalized
//! runtime form, and the Build (digest, pinned static layers, `RUNTIME_PROVIDER` entries).
//!
//! Loading is parse → refuse deployment details → typed parse → validate, collecting
//! every problem with its JSON path before anything is used.

mod build;
mod model;
pub mod refusal;
mod validate;

pub use build::{BUILD_FORMAT, Build, BuildEntry};
pub use model::{
    Budget, ContextTest, CurrentnessRule, Expectations, Fixture, Layer, LayerBinding, Lookup,
    Profile, ProjectDoc, ProviderRequirement, Scope, TestRequest,
};
pub use validate::{
    BASE_VALUE_GRAMMAR, DEFAULT_MAX_BYTES, DEFAULT_MAX_ITEMS, DEFAULT_PROFILE, MAX_BUDGET_BYTES,
    MIN_BUDGET_BYTES,
};

use crate::validation::Problem;
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

impl LoadError {
    /// The individual problems, for reporting each on its own line.
    pub fn problems(&self) -> Vec<String> {
        match self {
            LoadError::Read { .. } => vec![self.to_string()],
            LoadError::Invalid { errors, .. } => errors.0.iter().map(|e| e.to_string()).collect(),
        }
    }
}

/// A validated, normalized Project ready for gating and rendering.
#[derive(Debug, Clone)]
pub struct Project {
    /// The normalized document (defaults filled in); the Build digest is over this.
    pub doc: ProjectDoc,
    /// `sha256:<hex>` over the canonical JSON of `doc`.
    pub digest: String,
    pub providers: Vec<ProviderSpec>,
    pub layers: Vec<LayerSpec>,
    pub profiles: Vec<ProfileSpec>,
}

/// A provider requirement with its pattern compiled.
#[derive(Debug, Clone)]
pub struct ProviderSpec {
    pub id: String,
    pub name: String,
    /// Name of the turn input that carries the lookup value.
    pub input: String,
    /// The declared pattern, applied in addition to the base grammar.
    pub pattern: Option<Regex>,
    pub max_items: u32,
}

#[derive(Debug, Clone)]
pub struct LayerSpec {
    pub id: String,
    pub name: String,
    pub kind: LayerKind,
    pub required: bool,
    pub requires_input: Vec<String>,
    /// `None`: any objective. `Some(list)`: only those.
    pub objectives: Option<Vec<String>>,
    /// `None`: any consumer. `Some(list)`: only those.
    pub consumers: Option<Vec<String>>,
    pub currentness: CurrentnessRule,
    /// Items that do not fit are kept behind handles (bound layers only).
    pub handles: bool,
}

#[derive(Debug, Clone)]
pub enum LayerKind {
    /// Authored text, pinned in the Build by its digest.
    Static { content: String, digest: String },
    /// Indexes into `Project::providers`, in binding order.
    Bound { providers: Vec<usize> },
}

#[derive(Debug, Clone)]
pub struct ProfileSpec {
    pub id: String,
    /// Per layer index: whether the profile includes it.
    pub includes: Vec<bool>,
}

impl Project {
    /// Validates an authored document (already parsed) into a Project.
    pub fn from_doc(doc: ProjectDoc) -> Result<Project, ProjectErrors> {
        validate::validate(doc, "$")
    }

    /// Parses and validates a Project or a Build from JSON text.
    pub fn from_json(text: &str) -> Result<Project, ProjectErrors> {
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

    pub fn id(&self) -> &str {
        &self.doc.id
    }

    pub fn tests(&self) -> &[ContextTest] {
        &self.doc.tests
    }

    pub fn provider_index(&self, id: &str) -> Option<usize> {
        self.providers.iter().position(|p| p.id == id)
    }

    pub fn layer_index(&self, id: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.id == id)
    }

    pub fn profile(&self, id: &str) -> Option<&ProfileSpec> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// The project's byte budget for rendered context.
    pub fn max_bytes(&self) -> usize {
        self.doc
            .budget
            .map(|b| b.max_bytes)
            .unwrap_or(DEFAULT_MAX_BYTES)
    }

    /// The Build of this Project.
    pub fn build(&self) -> Build {
        Build::of(self)
    }
}

/// Refusal scan, typed parse and validation of one raw Project document.
fn load_document(value: Value, root: &str) -> Result<Project, ProjectErrors> {
    let refusals = refusal::scan(&value, root);
    if !refusals.is_empty() {
        return Err(ProjectErrors(refusals));
    }
    let doc: ProjectDoc = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = json_path(root, &e.path().to_string());
        ProjectErrors(vec![Problem::new(path, e.into_inner().to_string())])
    })?;
    validate::validate(doc, root)
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
