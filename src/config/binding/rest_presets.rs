//! REST presets: `preset = "github.issue"` and friends expand to a full [`RestSpec`] —
//! paths, auth, headers and mapping of the public GitHub, GitLab and Jira APIs —
//! configured only by what differs between deployments: `endpoint` (GitHub Enterprise,
//! self-managed GitLab, the Jira site), `repository` / `project`, `token_env` and, for
//! Jira Cloud, `email`. `ctxd validate --explain PROVIDER` prints the expansion.

use super::rest::{
    Mapping, RawRest, RestAuth, RestMethod, RestSpec, Segment, Template, check_spec,
};
use crate::config::key_path;
use crate::validation::Problems;
use regex::Regex;
use serde_json_path::JsonPath;
use std::sync::LazyLock;
use url::Url;

/// Every preset name, as written in `preset`.
pub(crate) const PRESETS: &[&str] = &[
    "github.issue",
    "github.issues",
    "gitlab.issue",
    "gitlab.merge_requests",
    "jira.issue",
    "jira.search",
];

static GITHUB_REPOSITORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$").expect("valid regex")
});
static GITLAB_PROJECT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("^([0-9]{1,20}|[A-Za-z0-9_.-]{1,255}(/[A-Za-z0-9_.-]{1,255}){1,19})$")
        .expect("valid regex")
});
static JIRA_PROJECT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[A-Z][A-Z0-9_]{0,63}$").expect("valid regex"));

const GITHUB_API: &str = "https://api.github.com";
const GITLAB_API: &str = "https://gitlab.com/api/v4";
const JIRA_FIELDS: &str = "summary,description,updated,labels,status,assignee";

/// Expands `preset` with the preset keys of `raw` into a spec; `None` after recording
/// every problem.
pub(super) fn expand(
    problems: &mut Problems,
    path: &str,
    preset: &str,
    raw: RawRest,
    endpoint: Option<Url>,
    endpoint_written: bool,
) -> Option<RestSpec> {
    let before = problems.len();
    let preset_path = key_path(path, "preset");
    if !PRESETS.contains(&preset) {
        problems.add(
            &preset_path,
            format!("unknown preset {preset:?} (known: {})", PRESETS.join(", ")),
        );
        return None;
    }
    for key in raw.request_keys_written() {
        problems.add(
            &key_path(path, key),
            format!(
                "`{key}` is set by preset {preset:?}: remove it, or write the binding without a preset (`ctxd validate --explain` prints the expansion to start from)"
            ),
        );
    }
    let family = preset.split('.').next().unwrap_or_default();
    let allowed: &[&str] = match preset {
        "github.issue" | "github.issues" => &["repository", "token_env"],
        "gitlab.issue" | "gitlab.merge_requests" => &["project", "token_env"],
        "jira.issue" => &["token_env", "email"],
        _ => &["project", "token_env", "email"],
    };
    for (key, present) in [
        ("repository", raw.repository.is_some()),
        ("project", raw.project.is_some()),
        ("token_env", raw.token_env.is_some()),
        ("email", raw.email.is_some()),
    ] {
        if present && !allowed.contains(&key) {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is not a setting of preset {preset:?}"),
            );
        }
    }
    let required = |problems: &mut Problems, key: &str, value: &Option<String>, what: &str| {
        if value.is_none() && allowed.contains(&key) {
            problems.add(
                &key_path(path, key),
                format!("is required by preset {preset:?}: {what}"),
            );
        }
    };
    let endpoint = match (family, endpoint_written) {
        (_, true) => endpoint,
        ("github", false) => Url::parse(GITHUB_API).ok(),
        ("gitlab", false) => Url::parse(GITLAB_API).ok(),
        _ => {
            problems.add(
                &key_path(path, "endpoint"),
                format!(
                    "is required by preset {preset:?}: the Jira site, e.g. https://acme.atlassian.net"
                ),
            );
            None
        }
    };
    let probe_override = raw.probe_path(problems, path);

    let spec = match family {
        "github" => {
            required(
                problems,
                "repository",
                &raw.repository,
                "\"owner/name\", e.g. \"acme/widgets\"",
            );
            let repository = raw.repository.as_deref().unwrap_or_default();
            if raw.repository.is_some() && !valid_github_repository(repository) {
                problems.add(
                    &key_path(path, "repository"),
                    format!(
                        "{repository:?} is not \"owner/name\" (letters, digits, '.', '_', '-')"
                    ),
                );
            }
            let auth = raw
                .token_env
                .clone()
                .map_or(RestAuth::None, |token_env| RestAuth::Bearer { token_env });
            github(preset, repository, auth)
        }
        "gitlab" => {
            required(
                problems,
                "project",
                &raw.project,
                "the project id or full path, e.g. \"group/widgets\"",
            );
            let project = raw.project.as_deref().unwrap_or_default();
            if raw.project.is_some() && !valid_gitlab_project(project) {
                problems.add(
                    &key_path(path, "project"),
                    format!("{project:?} is not a project id or \"group/name\" path"),
                );
            }
            let auth = raw
                .token_env
                .clone()
                .map_or(RestAuth::None, |value_env| RestAuth::Header {
                    name: "PRIVATE-TOKEN".to_owned(),
                    value_env,
                });
            gitlab(preset, project, auth)
        }
        _ => {
            required(
                problems,
                "token_env",
                &raw.token_env,
                "the env var holding the API token",
            );
            required(
                problems,
                "project",
                &raw.project,
                "the project key to search in, e.g. \"SUP\"",
            );
            let project = raw.project.as_deref().unwrap_or_default();
            if raw.project.is_some() && !JIRA_PROJECT.is_match(project) {
                problems.add(
                    &key_path(path, "project"),
                    format!("{project:?} is not a Jira project key (A-Z, 0-9, '_')"),
                );
            }
            let token_env = raw.token_env.clone().unwrap_or_default();
            let auth = match &raw.email {
                Some(email) => RestAuth::Basic {
                    username: email.clone(),
                    password_env: token_env,
                },
                None => RestAuth::Bearer { token_env },
            };
            jira(preset, project, auth)
        }
    };
    let (Some(endpoint), Some(probe_override)) = (endpoint, probe_override) else {
        return None;
    };
    let mut spec = RestSpec {
        endpoint,
        probe_path: probe_override.or(spec.probe_path),
        ..spec
    };
    spec.preset = Some(preset.to_owned());
    check_spec(problems, path, &spec);
    (problems.len() == before).then_some(spec)
}

fn valid_github_repository(repository: &str) -> bool {
    GITHUB_REPOSITORY.is_match(repository)
        && repository
            .split('/')
            .all(|part| part != "." && part != "..")
}

fn valid_gitlab_project(project: &str) -> bool {
    GITLAB_PROJECT.is_match(project) && project.split('/').all(|part| part != "." && part != "..")
}

fn literal(segments: &[&str]) -> Vec<Segment> {
    segments
        .iter()
        .map(|s| Segment::Literal((*s).to_owned()))
        .collect()
}

fn path_of(text: &str) -> JsonPath {
    JsonPath::parse(text).expect("preset paths are valid JSONPath")
}

fn params(pairs: &[(&str, Template)]) -> Vec<(String, Template)> {
    pairs
        .iter()
        .map(|(name, template)| ((*name).to_owned(), template.clone()))
        .collect()
}

fn text(value: &str) -> Template {
    Template::Literal(value.to_owned())
}

/// An unfinished spec: the caller sets the endpoint and the preset name.
fn spec(
    path: Vec<Segment>,
    params: Vec<(String, Template)>,
    headers: Vec<(String, String)>,
    auth: RestAuth,
    mapping: Mapping,
    probe_path: Vec<Segment>,
) -> RestSpec {
    RestSpec {
        endpoint: Url::parse(GITHUB_API).expect("valid URL"),
        method: RestMethod::Get,
        path,
        params,
        body: None,
        headers,
        auth,
        mapping,
        probe_path: Some(probe_path),
        preset: None,
    }
}

/// GitHub's issue JSON: `number`, `title`, `body`, `updated_at`, `state`, nested
/// `labels[].name` and `user.login`.
fn github(preset: &str, repository: &str, auth: RestAuth) -> RestSpec {
    let (owner, name) = repository.split_once('/').unwrap_or_default();
    let mapping = |items: Option<&str>| Mapping {
        items: items.map(path_of),
        id: path_of("$.number"),
        title: Some(path_of("$.title")),
        content: Some(path_of("$.body")),
        updated_at: Some(path_of("$.updated_at")),
        metadata: vec![
            ("state".into(), path_of("$.state")),
            ("labels".into(), path_of("$.labels[*].name")),
            ("author".into(), path_of("$.user.login")),
            ("page".into(), path_of("$.html_url")),
        ],
    };
    let headers = vec![
        (
            "Accept".to_owned(),
            "application/vnd.github+json".to_owned(),
        ),
        ("X-GitHub-Api-Version".to_owned(), "2022-11-28".to_owned()),
    ];
    let probe = literal(&["repos", owner, name]);
    if preset == "github.issue" {
        let mut path = literal(&["repos", owner, name, "issues"]);
        path.push(Segment::Value);
        spec(path, Vec::new(), headers, auth, mapping(None), probe)
    } else {
        spec(
            literal(&["repos", owner, name, "issues"]),
            params(&[
                ("labels", Template::Value),
                ("state", text("all")),
                ("sort", text("updated")),
                ("per_page", Template::Limit),
            ]),
            headers,
            auth,
            mapping(Some("$")),
            probe,
        )
    }
}

/// GitLab's issue and merge request JSON: `iid`, `title`, `description`,
/// `updated_at`, `state`, `labels` (strings) and `author.username`.
fn gitlab(preset: &str, project: &str, auth: RestAuth) -> RestSpec {
    let mut metadata = vec![
        ("state".to_owned(), path_of("$.state")),
        ("labels".to_owned(), path_of("$.labels[*]")),
        ("author".to_owned(), path_of("$.author.username")),
        ("page".to_owned(), path_of("$.web_url")),
    ];
    let probe = literal(&["projects", project]);
    if preset == "gitlab.issue" {
        let mapping = Mapping {
            items: None,
            id: path_of("$.iid"),
            title: Some(path_of("$.title")),
            content: Some(path_of("$.description")),
            updated_at: Some(path_of("$.updated_at")),
            metadata,
        };
        let mut path = literal(&["projects", project, "issues"]);
        path.push(Segment::Value);
        spec(path, Vec::new(), Vec::new(), auth, mapping, probe)
    } else {
        metadata.push(("source_branch".to_owned(), path_of("$.source_branch")));
        let mapping = Mapping {
            items: Some(path_of("$")),
            id: path_of("$.iid"),
            title: Some(path_of("$.title")),
            content: Some(path_of("$.description")),
            updated_at: Some(path_of("$.updated_at")),
            metadata,
        };
        spec(
            literal(&["projects", project, "merge_requests"]),
            params(&[
                ("search", Template::Value),
                ("state", text("all")),
                ("order_by", text("updated_at")),
                ("per_page", Template::Limit),
            ]),
            Vec::new(),
            auth,
            mapping,
            probe,
        )
    }
}

/// Jira's issue JSON (REST API v2): `key` and the `fields` object (`summary`,
/// `description` as text, `updated`, `labels`, `status.name`, `assignee.displayName`).
/// Search puts the value only in a quoted JQL string literal.
fn jira(preset: &str, project: &str, auth: RestAuth) -> RestSpec {
    let mapping = |items: Option<&str>| Mapping {
        items: items.map(path_of),
        id: path_of("$.key"),
        title: Some(path_of("$.fields.summary")),
        content: Some(path_of("$.fields.description")),
        updated_at: Some(path_of("$.fields.updated")),
        metadata: vec![
            ("status".into(), path_of("$.fields.status.name")),
            ("labels".into(), path_of("$.fields.labels[*]")),
            ("assignee".into(), path_of("$.fields.assignee.displayName")),
        ],
    };
    let headers = vec![("Accept".to_owned(), "application/json".to_owned())];
    let probe = literal(&["rest", "api", "2", "myself"]);
    if preset == "jira.issue" {
        let mut path = literal(&["rest", "api", "2", "issue"]);
        path.push(Segment::Value);
        spec(
            path,
            params(&[("fields", text(JIRA_FIELDS))]),
            headers,
            auth,
            mapping(None),
            probe,
        )
    } else {
        let jql = format!("project = \"{project}\" AND text ~ \"{{value}}\" ORDER BY updated DESC");
        let jql = Template::parse(&jql).expect("a quoted value slot");
        spec(
            literal(&["rest", "api", "2", "search", "jql"]),
            params(&[
                ("jql", jql),
                ("maxResults", Template::Limit),
                ("fields", text(JIRA_FIELDS)),
            ]),
            headers,
            auth,
            mapping(Some("$.issues")),
            probe,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::config::binding::{Binding, ProviderKind};
    use crate::config::{RestAuth, Template};

    fn parse(keys: &str) -> Result<Binding, crate::config::ConfigErrors> {
        let text = format!(
            "revision = \"r1\"\n[providers.issues]\ntype = \"rest\"\nversion = \"v1\"\n{keys}"
        );
        Binding::parse(&text, std::path::Path::new("/srv"))
    }

    fn spec(keys: &str) -> super::RestSpec {
        match &parse(keys).unwrap_or_else(|e| panic!("{e}")).providers["issues"].kind {
            ProviderKind::Rest(spec) => (**spec).clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn presets_expand_with_defaults_and_explain_themselves() {
        let github = spec(
            "preset = \"github.issue\"\nrepository = \"acme/widgets\"\ntoken_env = \"GITHUB_TOKEN\"\n",
        );
        assert_eq!(github.endpoint.as_str(), "https://api.github.com/");
        assert_eq!(
            github.auth,
            RestAuth::Bearer {
                token_env: "GITHUB_TOKEN".into()
            }
        );
        let explained = github.explain("issues");
        for needle in [
            "preset = \"github.issue\"",
            "path = \"/repos/acme/widgets/issues/{value}\"",
            "token_env = \"GITHUB_TOKEN\"",
            "labels = \"$.labels[*].name\"",
            "probe_path = \"/repos/acme/widgets\"",
        ] {
            assert!(explained.contains(needle), "{needle} in {explained}");
        }
        let gitlab = spec("preset = \"gitlab.issue\"\nproject = \"group/sub/widgets\"\n");
        assert_eq!(gitlab.endpoint.as_str(), "https://gitlab.com/api/v4");
        assert_eq!(gitlab.auth, RestAuth::None);
        assert!(
            gitlab
                .explain("issues")
                .contains("path = \"/projects/group%2Fsub%2Fwidgets/issues/{value}\"")
        );
        let jira = spec(
            "preset = \"jira.search\"\nendpoint = \"https://acme.atlassian.net\"\nproject = \"SUP\"\ntoken_env = \"JIRA_TOKEN\"\nemail = \"ops@acme.example\"\n",
        );
        assert_eq!(
            jira.auth,
            RestAuth::Basic {
                username: "ops@acme.example".into(),
                password_env: "JIRA_TOKEN".into()
            }
        );
        assert!(matches!(
            &jira.params[0],
            (name, Template::QuotedValue { .. }) if name == "jql"
        ));
    }

    #[test]
    fn preset_mistakes_are_named_by_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "preset = \"github.pulls\"",
                "providers.issues.preset",
                "unknown preset",
            ),
            (
                "preset = \"github.issue\"",
                "providers.issues.repository",
                "required",
            ),
            (
                "preset = \"github.issue\"\nrepository = \"acme/../x\"",
                "providers.issues.repository",
                "owner/name",
            ),
            (
                "preset = \"github.issue\"\nrepository = \"a/b\"\npath = \"/x/{value}\"",
                "providers.issues.path",
                "set by preset",
            ),
            (
                "preset = \"github.issue\"\nrepository = \"a/b\"\nproject = \"p\"",
                "providers.issues.project",
                "not a setting",
            ),
            (
                "preset = \"gitlab.issue\"\nproject = \"a b\"",
                "providers.issues.project",
                "project id",
            ),
            (
                "preset = \"jira.issue\"\ntoken_env = \"T\"",
                "providers.issues.endpoint",
                "Jira site",
            ),
            (
                "preset = \"jira.issue\"\nendpoint = \"https://a.atlassian.net\"",
                "providers.issues.token_env",
                "required",
            ),
            (
                "preset = \"jira.search\"\nendpoint = \"https://a.atlassian.net\"\ntoken_env = \"T\"\nproject = \"SUP\\\" OR x\"",
                "providers.issues.project",
                "project key",
            ),
            (
                "preset = \"jira.search\"\nendpoint = \"https://a.atlassian.net\"\ntoken_env = \"T 1\"\nproject = \"SUP\"",
                "providers.issues.token_env",
                "environment variable",
            ),
        ];
        for (keys, path, needle) in cases {
            let errors = parse(keys).expect_err(keys);
            assert!(
                errors
                    .errors
                    .iter()
                    .any(|e| e.path == *path && e.message.contains(needle)),
                "{keys}: {errors}"
            );
        }
    }
}
