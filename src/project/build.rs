//! The Build: a Project validated and normalized, with a digest over its canonical form,
//! static layers pinned by their own digests and one unpinned `RUNTIME_PROVIDER` entry
//! per provider requirement. A Build loads like a Project after its digest is verified.

use super::model::ProjectDoc;
use super::{LayerKind, Project, ProjectErrors};
use crate::validation::Problem;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `format` marker that tells a Build from a Project.
pub(crate) const BUILD_FORMAT: &str = "ctxd.build.v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Build {
    pub(crate) format: String,
    /// `sha256:<hex>` over the canonical JSON of `project`.
    pub(crate) digest: String,
    pub(crate) project: ProjectDoc,
    pub(crate) entries: Vec<BuildEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum BuildEntry {
    /// Static text, fixed by the Build.
    #[serde(rename_all = "camelCase")]
    StaticLayer {
        layer: String,
        pinned: bool,
        digest: String,
        bytes: usize,
    },
    /// Data resolved at run time from whatever the Deployment Binding binds.
    #[serde(rename_all = "camelCase")]
    RuntimeProvider {
        provider: String,
        pinned: bool,
        lookup_input: String,
        max_items: u32,
        layers: Vec<String>,
    },
}

impl Build {
    pub(crate) fn of(project: &Project) -> Build {
        let mut entries = Vec::new();
        for layer in &project.layers {
            if let LayerKind::Static { content, digest } = &layer.kind {
                entries.push(BuildEntry::StaticLayer {
                    layer: layer.id.clone(),
                    pinned: true,
                    digest: digest.clone(),
                    bytes: content.len(),
                });
            }
        }
        for (index, provider) in project.providers.iter().enumerate() {
            let layers = project
                .layers
                .iter()
                .filter(|l| matches!(&l.kind, LayerKind::Bound { providers } if providers.contains(&index)))
                .map(|l| l.id.clone())
                .collect();
            entries.push(BuildEntry::RuntimeProvider {
                provider: provider.id.clone(),
                pinned: false,
                lookup_input: provider.input.clone(),
                max_items: provider.max_items,
                layers,
            });
        }
        Build {
            format: BUILD_FORMAT.to_owned(),
            digest: project.digest.clone(),
            project: project.doc.clone(),
            entries,
        }
    }

    /// Pretty JSON with a trailing newline, as `ctxd build` writes it.
    pub(crate) fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a Build always serializes");
        text.push('\n');
        text
    }
}

pub(super) fn is_build(value: &Value) -> bool {
    value.get("format").and_then(Value::as_str) == Some(BUILD_FORMAT)
}

pub(super) fn load_build(mut value: Value) -> Result<Project, ProjectErrors> {
    let single = |path: &str, message: String| ProjectErrors(vec![Problem::new(path, message)]);
    let object = value
        .as_object_mut()
        .ok_or_else(|| single("$", "a Build is a JSON object".to_owned()))?;
    for key in object.keys() {
        if !matches!(key.as_str(), "format" | "digest" | "project" | "entries") {
            return Err(single(
                &format!("$.{key}"),
                format!("unknown field `{key}` in a Build"),
            ));
        }
    }
    let recorded_digest = match object.get("digest") {
        Some(Value::String(d)) => d.clone(),
        _ => {
            return Err(single(
                "$.digest",
                "a Build needs its digest string".to_owned(),
            ));
        }
    };
    let recorded_entries = object.remove("entries");
    let document = object
        .remove("project")
        .ok_or_else(|| single("$.project", "a Build needs its project".to_owned()))?;
    let project = super::load_document(document, "$.project")?;
    if project.digest != recorded_digest {
        return Err(single(
            "$.digest",
            format!(
                "digest mismatch: the Build records {recorded_digest} but its project digests to {}; it was edited after it was built — rebuild it",
                project.digest
            ),
        ));
    }
    let expected_entries =
        serde_json::to_value(Build::of(&project).entries).expect("entries always serialize");
    if recorded_entries.as_ref() != Some(&expected_entries) {
        return Err(single(
            "$.entries",
            "entries do not match the project: the Build was edited after it was built — rebuild it"
                .to_owned(),
        ));
    }
    Ok(project)
}
