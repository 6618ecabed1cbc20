//! The `rest` provider binding: how one lookup becomes a request to a JSON API (method,
//! path, query parameters, body, fixed headers, one of six auth methods) and how the
//! answer's JSON maps to items (RFC 9535 JSONPath). Checked without I/O; presets
//! ([`super::rest_presets`]) expand to the same [`RestSpec`].
//!
//! The lookup value fills exactly one slot: a whole path segment (percent-encoded; `.`
//! and `..` refused at call time), a whole query parameter value or body string, or a
//! double-quoted string literal inside one (`"{value}"`, for query languages such as
//! JQL: the value grammar has no quote or backslash, so it cannot leave the literal).
//! Scheme, host and port come only from `endpoint`.

use crate::config::{key_path, kind_in_words, section};
use crate::validation::Problems;
use http::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value as Json, json};
use serde_json_path::JsonPath;
use std::collections::BTreeMap;
use url::Url;

/// The keys of a provider's table that only a `rest` provider has.
pub(super) const REST_KEYS: &[&str] = &[
    "method",
    "path",
    "params",
    "body",
    "headers",
    "auth",
    "mapping",
    "probe_path",
    "preset",
    "repository",
    "project",
    "token_env",
    "email",
];

/// The slot marker for the lookup value.
pub(crate) const VALUE_SLOT: &str = "{value}";
/// The slot marker for the layer's item limit.
pub(crate) const LIMIT_SLOT: &str = "{limit}";
const QUOTED_VALUE_SLOT: &str = "\"{value}\"";

/// Header names a binding cannot set: the HTTP stack or `auth` owns them.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "cookie",
    "proxy-authorization",
];

/// A validated `rest` binding: everything one lookup's request and mapping need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestSpec {
    /// Scheme, host, port and base path of every request.
    pub(crate) endpoint: Url,
    pub(crate) method: RestMethod,
    /// Segments appended to the endpoint's path.
    pub(crate) path: Vec<Segment>,
    /// Query parameters: a binding's in name order, a preset's in its own order.
    pub(crate) params: Vec<(String, Template)>,
    /// The JSON body template (`POST` only); strings are [`Template`]s.
    pub(crate) body: Option<Json>,
    /// Fixed extra headers, validated as HTTP header names and values.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) auth: RestAuth,
    pub(crate) mapping: Mapping,
    /// Segments of the readiness probe's `GET` below the endpoint; `None`: a `GET` of the
    /// endpoint itself.
    pub(crate) probe_path: Option<Vec<Segment>>,
    /// The preset this binding was expanded from, if any.
    pub(crate) preset: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestMethod {
    Get,
    Post,
}

impl RestMethod {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RestMethod::Get => "GET",
            RestMethod::Post => "POST",
        }
    }
}

/// One path segment: literal text (percent-encoded when sent) or the lookup value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Literal(String),
    Value,
}

/// A query parameter value or body string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Template {
    Literal(String),
    /// Exactly the lookup value.
    Value,
    /// The layer's item limit, in decimal.
    Limit,
    /// `before` + value + `after`, where `before` ends and `after` starts with `"`.
    QuotedValue {
        before: String,
        after: String,
    },
}

impl Template {
    /// Reads one string: `{value}`, `{limit}`, text holding `"{value}"` once, or literal.
    /// `Err` says why a string mentioning `{value}` or `{limit}` cannot be a slot.
    pub(crate) fn parse(text: &str) -> Result<Template, &'static str> {
        if text == VALUE_SLOT {
            return Ok(Template::Value);
        }
        if text == LIMIT_SLOT {
            return Ok(Template::Limit);
        }
        if text.contains(LIMIT_SLOT) {
            return Err("`{limit}` must be the whole value");
        }
        match text.matches(VALUE_SLOT).count() {
            0 => Ok(Template::Literal(text.to_owned())),
            1 => match text.find(QUOTED_VALUE_SLOT) {
                Some(at) => Ok(Template::QuotedValue {
                    before: text[..=at].to_owned(),
                    after: text[at + QUOTED_VALUE_SLOT.len() - 1..].to_owned(),
                }),
                None => Err(
                    "`{value}` must be the whole value, or sit inside a double-quoted string literal (\"{value}\")",
                ),
            },
            _ => Err("`{value}` may appear only once"),
        }
    }

    /// The text sent for this template.
    pub(crate) fn render(&self, value: &str, limit: u32) -> String {
        match self {
            Template::Literal(text) => text.clone(),
            Template::Value => value.to_owned(),
            Template::Limit => limit.to_string(),
            Template::QuotedValue { before, after } => format!("{before}{value}{after}"),
        }
    }

    fn holds_value(&self) -> bool {
        matches!(self, Template::Value | Template::QuotedValue { .. })
    }

    /// The template as written.
    fn written(&self) -> String {
        match self {
            Template::Literal(text) => text.clone(),
            Template::Value => VALUE_SLOT.to_owned(),
            Template::Limit => LIMIT_SLOT.to_owned(),
            Template::QuotedValue { before, after } => format!("{before}{VALUE_SLOT}{after}"),
        }
    }
}

/// Who the API is told the caller is. Every secret is named by an env var, never inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RestAuth {
    None,
    /// `Authorization: Bearer <secret>`.
    Bearer {
        token_env: String,
    },
    /// `Authorization: Basic base64(username:secret)`.
    Basic {
        username: String,
        password_env: String,
    },
    /// `<header>: <secret>` (default header `X-API-Key`).
    ApiKey {
        header: String,
        key_env: String,
    },
    /// `<name>: <secret>`.
    Header {
        name: String,
        value_env: String,
    },
    /// `?<param>=<secret>`: the URL then holds the secret and is never logged or shown.
    Query {
        param: String,
        value_env: String,
    },
}

impl RestAuth {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            RestAuth::None => "none",
            RestAuth::Bearer { .. } => "bearer",
            RestAuth::Basic { .. } => "basic",
            RestAuth::ApiKey { .. } => "api_key",
            RestAuth::Header { .. } => "header",
            RestAuth::Query { .. } => "query",
        }
    }

    /// The env var holding the secret, if the method has one.
    pub(crate) fn secret_env(&self) -> Option<&str> {
        match self {
            RestAuth::None => None,
            RestAuth::Bearer { token_env } => Some(token_env),
            RestAuth::Basic { password_env, .. } => Some(password_env),
            RestAuth::ApiKey { key_env, .. } => Some(key_env),
            RestAuth::Header { value_env, .. } | RestAuth::Query { value_env, .. } => {
                Some(value_env)
            }
        }
    }

    /// The user name of `basic` auth.
    pub(crate) fn basic_username(&self) -> Option<&str> {
        match self {
            RestAuth::Basic { username, .. } => Some(username),
            _ => None,
        }
    }

    fn to_json(&self) -> Json {
        let mut auth = json!({ "type": self.type_name() });
        let fields: Vec<(&str, &str)> = match self {
            RestAuth::None => vec![],
            RestAuth::Bearer { token_env } => vec![("token_env", token_env)],
            RestAuth::Basic {
                username,
                password_env,
            } => vec![("username", username), ("password_env", password_env)],
            RestAuth::ApiKey { header, key_env } => vec![("header", header), ("key_env", key_env)],
            RestAuth::Header { name, value_env } => vec![("name", name), ("value_env", value_env)],
            RestAuth::Query { param, value_env } => {
                vec![("param", param), ("value_env", value_env)]
            }
        };
        for (key, value) in fields {
            auth[key] = json!(value);
        }
        auth
    }
}

/// Where each item and each item field is in the answer's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// The item list (an array, whose elements are the items; or an object, the one
    /// item; or several nodes, each an item). `None`: the whole answer.
    pub(crate) items: Option<JsonPath>,
    /// Relative to each item (`$` is the item).
    pub(crate) id: JsonPath,
    pub(crate) title: Option<JsonPath>,
    pub(crate) content: Option<JsonPath>,
    pub(crate) updated_at: Option<JsonPath>,
    /// Metadata key → path; a path matching several nodes gives an array.
    pub(crate) metadata: Vec<(String, JsonPath)>,
}

impl Mapping {
    fn to_json(&self) -> Json {
        let mut mapping = serde_json::Map::new();
        let text = |path: &JsonPath| json!(path.to_string());
        if let Some(items) = &self.items {
            mapping.insert("items".into(), text(items));
        }
        mapping.insert("id".into(), text(&self.id));
        for (key, path) in [
            ("title", &self.title),
            ("content", &self.content),
            ("updated_at", &self.updated_at),
        ] {
            if let Some(path) = path {
                mapping.insert(key.into(), text(path));
            }
        }
        if !self.metadata.is_empty() {
            let metadata: serde_json::Map<String, Json> = self
                .metadata
                .iter()
                .map(|(key, path)| (key.clone(), text(path)))
                .collect();
            mapping.insert("metadata".into(), Json::Object(metadata));
        }
        Json::Object(mapping)
    }
}

impl RestSpec {
    /// The binding as it will be used, as JSON: for the digest and `validate --explain`.
    /// Env var names only, never a secret.
    pub(crate) fn to_json(&self) -> Json {
        let mut spec = json!({
            "type": "rest",
            "endpoint": self.endpoint.as_str(),
            "method": self.method.as_str(),
            "path": written_path(&self.path),
        });
        if let Some(preset) = &self.preset {
            spec["preset"] = json!(preset);
        }
        if !self.params.is_empty() {
            let params: serde_json::Map<String, Json> = self
                .params
                .iter()
                .map(|(name, template)| (name.clone(), json!(template.written())))
                .collect();
            spec["params"] = Json::Object(params);
        }
        if let Some(body) = &self.body {
            spec["body"] = body.clone();
        }
        if !self.headers.is_empty() {
            let headers: serde_json::Map<String, Json> = self
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), json!(value)))
                .collect();
            spec["headers"] = Json::Object(headers);
        }
        if let Some(probe) = &self.probe_path {
            spec["probe_path"] = json!(written_path(probe));
        }
        spec["auth"] = self.auth.to_json();
        spec["mapping"] = self.mapping.to_json();
        spec
    }

    /// The expanded binding as TOML, for `ctxd validate --explain`.
    pub fn explain(&self, id: &str) -> String {
        let mut providers = toml::Table::new();
        let spec: toml::Value = serde_json::from_value(self.to_json())
            .unwrap_or_else(|_| toml::Value::String("<unrepresentable>".into()));
        providers.insert(id.to_owned(), spec);
        let mut root = toml::Table::new();
        root.insert("providers".into(), toml::Value::Table(providers));
        toml::to_string_pretty(&root).unwrap_or_default()
    }
}

/// A path as written: `/` + segments, literals percent-encoded as they are sent.
pub(crate) fn written_path(segments: &[Segment]) -> String {
    let mut text = String::new();
    for segment in segments {
        text.push('/');
        match segment {
            Segment::Value => text.push_str(VALUE_SLOT),
            Segment::Literal(literal) => {
                text.push_str(&percent_encoding::utf8_percent_encode(literal, SEGMENT).to_string())
            }
        }
    }
    if text.is_empty() {
        text.push('/');
    }
    text
}

/// What a path segment's literal text is encoded with: everything but unreserved
/// characters and a few sub-delimiters, so `/`, `?`, `#` and `%` never act as syntax.
pub(crate) const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'@')
    .remove(b'+')
    .remove(b'=')
    .remove(b',');

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRest {
    method: Option<String>,
    path: Option<String>,
    params: Option<toml::Table>,
    body: Option<toml::Table>,
    headers: Option<toml::Table>,
    auth: Option<RawAuth>,
    mapping: Option<RawMapping>,
    probe_path: Option<String>,
    pub(super) preset: Option<String>,
    pub(super) repository: Option<String>,
    pub(super) project: Option<String>,
    pub(super) token_env: Option<String>,
    pub(super) email: Option<String>,
}

impl RawRest {
    /// The request and mapping keys that were written: a preset sets them all itself.
    pub(super) fn request_keys_written(&self) -> Vec<&'static str> {
        [
            ("method", self.method.is_some()),
            ("path", self.path.is_some()),
            ("params", self.params.is_some()),
            ("body", self.body.is_some()),
            ("headers", self.headers.is_some()),
            ("auth", self.auth.is_some()),
            ("mapping", self.mapping.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, written)| written.then_some(key))
        .collect()
    }

    /// The written `probe_path`, checked.
    pub(super) fn probe_path(
        &self,
        problems: &mut Problems,
        path: &str,
    ) -> Option<Option<Vec<Segment>>> {
        match self.probe_path.as_deref() {
            None => Some(None),
            Some(text) => {
                check_path(problems, &key_path(path, "probe_path"), text, false).map(Some)
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(rename = "type")]
    kind: String,
    token_env: Option<String>,
    username: Option<String>,
    password_env: Option<String>,
    header: Option<String>,
    key_env: Option<String>,
    name: Option<String>,
    value_env: Option<String>,
    param: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    items: Option<String>,
    id: Option<String>,
    title: Option<String>,
    content: Option<String>,
    updated_at: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

/// Reads a `rest` provider's own keys (`table` holds only [`REST_KEYS`]) as written,
/// recording a key of the wrong shape under `path`.
pub(super) fn read_rest(
    problems: &mut Problems,
    path: &str,
    table: toml::Table,
) -> Option<RawRest> {
    section(problems, path, toml::Value::Table(table))
}

/// Checks a `rest` provider written without a preset (a preset expands in
/// [`super::rest_presets`]) with its validated `endpoint`, recording every problem under
/// `path`.
pub(super) fn check_rest(
    problems: &mut Problems,
    path: &str,
    endpoint: Option<Url>,
    endpoint_written: bool,
    raw: RawRest,
) -> Option<RestSpec> {
    let before = problems.len();
    for (key, present) in [
        ("repository", raw.repository.is_some()),
        ("project", raw.project.is_some()),
        ("token_env", raw.token_env.is_some()),
        ("email", raw.email.is_some()),
    ] {
        if present {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is a setting of presets only: set `preset`, or use `auth`"),
            );
        }
    }
    if !endpoint_written {
        problems.add(
            &key_path(path, "endpoint"),
            "is required for a rest provider: the API's base URL, https://host/base",
        );
    }
    let method = match raw.method.as_deref() {
        None | Some("GET") => Some(RestMethod::Get),
        Some("POST") => Some(RestMethod::Post),
        Some(other) => {
            problems.add(
                &key_path(path, "method"),
                format!("{other:?} is not supported: use \"GET\" or \"POST\""),
            );
            None
        }
    };
    let segments = match &raw.path {
        None => Some(Vec::new()),
        Some(text) => check_path(problems, &key_path(path, "path"), text, true),
    };
    let params = check_params(problems, &key_path(path, "params"), raw.params);
    let body = raw
        .body
        .map(|body| check_body(problems, &key_path(path, "body"), body));
    if body.is_some() && method == Some(RestMethod::Get) {
        problems.add(
            &key_path(path, "body"),
            "is only sent with method = \"POST\"",
        );
    }
    let headers = check_headers(problems, &key_path(path, "headers"), raw.headers);
    let auth = match raw.auth {
        None => Some(RestAuth::None),
        Some(auth) => check_auth(problems, &key_path(path, "auth"), auth),
    };
    let mapping = match raw.mapping {
        None => {
            problems.add(
                &key_path(path, "mapping"),
                "is required for a rest provider: at least mapping.id, a JSONPath such as \"$.id\"",
            );
            None
        }
        Some(mapping) => check_mapping(problems, &key_path(path, "mapping"), mapping),
    };
    let probe_path = raw
        .probe_path
        .as_deref()
        .map(|text| check_path(problems, &key_path(path, "probe_path"), text, false));
    let spec = RestSpec {
        endpoint: endpoint?,
        method: method?,
        path: segments?,
        params: params?,
        body: body.flatten(),
        headers: headers?,
        auth: auth?,
        mapping: mapping?,
        probe_path: probe_path.flatten(),
        preset: None,
    };
    check_spec(problems, path, &spec);
    (problems.len() == before).then_some(spec)
}

/// The rules over the whole request: exactly one value slot, no parameter the auth
/// uses, env var names.
pub(super) fn check_spec(problems: &mut Problems, path: &str, spec: &RestSpec) {
    let in_path = spec.path.iter().filter(|s| **s == Segment::Value).count();
    let in_params = spec.params.iter().filter(|(_, t)| t.holds_value()).count();
    let in_body = spec.body.as_ref().map_or(0, body_value_slots);
    match in_path + in_params + in_body {
        1 => {}
        0 => problems.add(
            path,
            "the lookup value has no slot: put \"{value}\" as a whole path segment, a params value or a body string",
        ),
        n => problems.add(
            path,
            format!(
                "the lookup value must go into exactly one slot, found {n} (path {in_path}, params {in_params}, body {in_body})"
            ),
        ),
    }
    if let RestAuth::Query { param, .. } = &spec.auth
        && spec.params.iter().any(|(name, _)| name == param)
    {
        problems.add(
            &key_path(&key_path(path, "auth"), "param"),
            format!("{param:?} is also set in params"),
        );
    }
    if let Some(name) = spec.auth.secret_env() {
        let env_key = match &spec.auth {
            RestAuth::Bearer { .. } => "token_env",
            RestAuth::Basic { .. } => "password_env",
            RestAuth::ApiKey { .. } => "key_env",
            _ => "value_env",
        };
        let env_path = if spec.preset.is_some() {
            key_path(path, "token_env")
        } else {
            key_path(&key_path(path, "auth"), env_key)
        };
        problems.env_name(&env_path, name);
    }
}

fn body_value_slots(body: &Json) -> usize {
    match body {
        Json::String(text) => usize::from(Template::parse(text).is_ok_and(|t| t.holds_value())),
        Json::Array(items) => items.iter().map(body_value_slots).sum(),
        Json::Object(map) => map.values().map(body_value_slots).sum(),
        _ => 0,
    }
}

/// `/a/b/{value}`: segments; literal segments are percent-decoded as written and
/// encoded again when sent. `{value}` only as a whole segment, and only when
/// `value_allowed`.
pub(super) fn check_path(
    problems: &mut Problems,
    path: &str,
    text: &str,
    value_allowed: bool,
) -> Option<Vec<Segment>> {
    let before = problems.len();
    if text.contains('?') || text.contains('#') {
        problems.add(
            path,
            "must not hold a query or fragment: put query parameters in `params`",
        );
    }
    if text.contains("://") {
        problems.add(
            path,
            "must be a path below the endpoint, not a URL: scheme, host and port come only from `endpoint`",
        );
    }
    let mut segments = Vec::new();
    for raw in text.split('/').filter(|s| !s.is_empty()) {
        if raw == VALUE_SLOT && value_allowed {
            segments.push(Segment::Value);
            continue;
        }
        if raw.contains('{') || raw.contains('}') {
            problems.add(
                path,
                if value_allowed {
                    format!(
                        "segment {raw:?}: the only placeholder is \"{{value}}\", as a whole segment"
                    )
                } else {
                    format!("segment {raw:?}: placeholders are not allowed here")
                },
            );
            continue;
        }
        let decoded = match percent_encoding::percent_decode_str(raw).decode_utf8() {
            Ok(decoded) => decoded.into_owned(),
            Err(_) => {
                problems.add(
                    path,
                    format!("segment {raw:?} is not valid UTF-8 once decoded"),
                );
                continue;
            }
        };
        if decoded == "." || decoded == ".." {
            problems.add(path, format!("segment {raw:?} is refused: no dot segments"));
            continue;
        }
        segments.push(Segment::Literal(decoded));
    }
    (problems.len() == before).then_some(segments)
}

fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(text) => Some(text.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn check_params(
    problems: &mut Problems,
    path: &str,
    params: Option<toml::Table>,
) -> Option<Vec<(String, Template)>> {
    let before = problems.len();
    let mut checked = Vec::new();
    for (name, value) in params.unwrap_or_default() {
        let param_path = key_path(path, &name);
        if name.is_empty() {
            problems.add(&param_path, "a parameter needs a name");
            continue;
        }
        let Some(text) = scalar_text(&value) else {
            problems.add(
                &param_path,
                format!(
                    "must be a string, an integer or a boolean (found {})",
                    kind_in_words(&value)
                ),
            );
            continue;
        };
        match Template::parse(&text) {
            Ok(template) => checked.push((name, template)),
            Err(why) => problems.add(&param_path, why),
        }
    }
    (problems.len() == before).then_some(checked)
}

/// The body template as JSON; every string is checked as a [`Template`].
fn check_body(problems: &mut Problems, path: &str, body: toml::Table) -> Option<Json> {
    let before = problems.len();
    let json = toml_to_json(problems, path, toml::Value::Table(body));
    (problems.len() == before).then_some(json)
}

fn toml_to_json(problems: &mut Problems, path: &str, value: toml::Value) -> Json {
    match value {
        toml::Value::String(text) => {
            if let Err(why) = Template::parse(&text) {
                problems.add(path, why);
            }
            Json::String(text)
        }
        toml::Value::Integer(n) => json!(n),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => json!(d.to_string()),
        toml::Value::Array(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| toml_to_json(problems, &crate::config::index_path(path, i), item))
                .collect(),
        ),
        toml::Value::Table(table) => Json::Object(
            table
                .into_iter()
                .map(|(key, item)| {
                    let child = key_path(path, &key);
                    (key, toml_to_json(problems, &child, item))
                })
                .collect(),
        ),
    }
}

fn check_headers(
    problems: &mut Problems,
    path: &str,
    headers: Option<toml::Table>,
) -> Option<Vec<(String, String)>> {
    let before = problems.len();
    let mut checked = Vec::new();
    for (name, value) in headers.unwrap_or_default() {
        let header_path = key_path(path, &name);
        let toml::Value::String(value) = value else {
            problems.add(
                &header_path,
                format!("must be a string (found {})", kind_in_words(&value)),
            );
            continue;
        };
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.add(&header_path, "is not a valid HTTP header name");
            continue;
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            problems.add(
                &header_path,
                format!("{name:?} cannot be set here: the HTTP client or `auth` sets it"),
            );
            continue;
        }
        if value.contains(VALUE_SLOT) || value.contains(LIMIT_SLOT) {
            problems.add(
                &header_path,
                "headers are fixed: the lookup value never goes into a header",
            );
            continue;
        }
        if HeaderValue::from_str(&value).is_err() {
            problems.add(
                &header_path,
                "is not a valid HTTP header value (control characters or non-ASCII)",
            );
            continue;
        }
        checked.push((name, value));
    }
    (problems.len() == before).then_some(checked)
}

fn check_auth(problems: &mut Problems, path: &str, raw: RawAuth) -> Option<RestAuth> {
    let before = problems.len();
    let used: &[&str] = match raw.kind.as_str() {
        "bearer" => &["token_env"],
        "basic" => &["username", "password_env"],
        "api_key" => &["header", "key_env"],
        "header" => &["name", "value_env"],
        "query" => &["param", "value_env"],
        _ => &[],
    };
    let take = |problems: &mut Problems, key: &'static str, value: &Option<String>| match value {
        Some(value) if !value.trim().is_empty() => Some(value.clone()),
        Some(_) => {
            problems.add(&key_path(path, key), "must not be empty");
            None
        }
        None => {
            problems.add(
                &key_path(path, key),
                format!("is required for auth type {:?}", raw.kind),
            );
            None
        }
    };
    let auth = match raw.kind.as_str() {
        "none" => Some(RestAuth::None),
        "bearer" => take(problems, "token_env", &raw.token_env)
            .map(|token_env| RestAuth::Bearer { token_env }),
        "basic" => {
            let username = take(problems, "username", &raw.username);
            let password_env = take(problems, "password_env", &raw.password_env);
            username
                .zip(password_env)
                .map(|(username, password_env)| RestAuth::Basic {
                    username,
                    password_env,
                })
        }
        "api_key" => {
            let header = raw.header.clone().unwrap_or_else(|| "X-API-Key".to_owned());
            take(problems, "key_env", &raw.key_env)
                .map(|key_env| RestAuth::ApiKey { header, key_env })
        }
        "header" => {
            let name = take(problems, "name", &raw.name);
            let value_env = take(problems, "value_env", &raw.value_env);
            name.zip(value_env)
                .map(|(name, value_env)| RestAuth::Header { name, value_env })
        }
        "query" => {
            let param = take(problems, "param", &raw.param);
            let value_env = take(problems, "value_env", &raw.value_env);
            param
                .zip(value_env)
                .map(|(param, value_env)| RestAuth::Query { param, value_env })
        }
        other => {
            problems.add(
                &key_path(path, "type"),
                format!(
                    "{other:?} is not an auth type: use none, bearer, basic, api_key, header or query"
                ),
            );
            return None;
        }
    };
    for (key, present) in [
        ("token_env", raw.token_env.is_some()),
        ("username", raw.username.is_some()),
        ("password_env", raw.password_env.is_some()),
        ("header", raw.header.is_some()),
        ("key_env", raw.key_env.is_some()),
        ("name", raw.name.is_some()),
        ("value_env", raw.value_env.is_some()),
        ("param", raw.param.is_some()),
    ] {
        if present && !used.contains(&key) {
            problems.add(
                &key_path(path, key),
                format!("`{key}` is not a setting of auth type {:?}", raw.kind),
            );
        }
    }
    if let Some(RestAuth::ApiKey { header: name, .. } | RestAuth::Header { name, .. }) = &auth {
        let key = if matches!(auth, Some(RestAuth::ApiKey { .. })) {
            "header"
        } else {
            "name"
        };
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.add(&key_path(path, key), "is not a valid HTTP header name");
        } else if RESERVED_HEADERS[1..].contains(&name.to_ascii_lowercase().as_str()) {
            problems.add(
                &key_path(path, key),
                format!("{name:?} is set by the HTTP client"),
            );
        }
    }
    (problems.len() == before).then_some(auth).flatten()
}

fn json_path(problems: &mut Problems, path: &str, text: &str) -> Option<JsonPath> {
    match JsonPath::parse(text) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            problems.add(
                path,
                format!("{text:?} is not an RFC 9535 JSONPath: {error}"),
            );
            None
        }
    }
}

fn check_mapping(problems: &mut Problems, path: &str, raw: RawMapping) -> Option<Mapping> {
    let before = problems.len();
    let optional = |problems: &mut Problems, key: &str, text: &Option<String>| {
        text.as_deref()
            .and_then(|text| json_path(problems, &key_path(path, key), text))
    };
    let items = optional(problems, "items", &raw.items);
    let title = optional(problems, "title", &raw.title);
    let content = optional(problems, "content", &raw.content);
    let updated_at = optional(problems, "updated_at", &raw.updated_at);
    let id = match &raw.id {
        Some(text) => json_path(problems, &key_path(path, "id"), text),
        None => {
            problems.add(
                &key_path(path, "id"),
                "is required: the JSONPath of each item's id, relative to the item, e.g. \"$.id\"",
            );
            None
        }
    };
    let mut metadata = Vec::new();
    for (key, text) in &raw.metadata {
        if let Some(parsed) = json_path(problems, &key_path(&key_path(path, "metadata"), key), text)
        {
            metadata.push((key.clone(), parsed));
        }
    }
    let mapping = Mapping {
        items,
        id: id?,
        title,
        content,
        updated_at,
        metadata,
    };
    (problems.len() == before).then_some(mapping)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_one_whole_slot_or_a_quoted_literal() {
        assert_eq!(Template::parse("{value}"), Ok(Template::Value));
        assert_eq!(Template::parse("{limit}"), Ok(Template::Limit));
        assert_eq!(
            Template::parse("open"),
            Ok(Template::Literal("open".into()))
        );
        let quoted = Template::parse("key = \"{value}\" ORDER BY updated").unwrap();
        assert_eq!(
            quoted,
            Template::QuotedValue {
                before: "key = \"".into(),
                after: "\" ORDER BY updated".into()
            }
        );
        assert_eq!(
            quoted.render("SUP-17", 5),
            "key = \"SUP-17\" ORDER BY updated"
        );
        assert_eq!(quoted.written(), "key = \"{value}\" ORDER BY updated");
        assert_eq!(Template::Limit.render("x", 7), "7");
        assert!(Template::parse("id-{value}").is_err());
        assert!(Template::parse("'{value}'").is_err());
        assert!(Template::parse("\"{value}\" or \"{value}\"").is_err());
        assert!(Template::parse("n{limit}").is_err());
    }

    fn parse(extra: &str) -> Result<super::super::Binding, crate::config::ConfigErrors> {
        let text = format!(
            "revision = \"r1\"\n[providers.crm]\ntype = \"rest\"\nversion = \"v1\"\n{extra}"
        );
        super::super::Binding::parse(&text, std::path::Path::new("/srv"))
    }

    fn spec_of(extra: &str) -> RestSpec {
        let binding = parse(extra).unwrap_or_else(|e| panic!("{e}"));
        match &binding.providers["crm"].kind {
            super::super::ProviderKind::Rest(spec) => (**spec).clone(),
            other => panic!("{other:?}"),
        }
    }

    const MINIMAL: &str = "endpoint = \"https://crm.example/api\"\npath = \"/customers/{value}\"\nmapping = { id = \"$.id\" }\n";

    #[test]
    fn a_full_binding_parses() {
        let spec = spec_of(
            r#"endpoint = "https://crm.example/api"
method = "POST"
path = "/search"
params = { page_size = "{limit}", fields = "all", verbose = true }
body = { query = { customer = "{value}" }, size = "{limit}" }
headers = { "X-Tenant" = "acme" }
probe_path = "/health"
auth = { type = "basic", username = "ctxd", password_env = "CRM_PASSWORD" }
[providers.crm.mapping]
items = "$.results"
id = "$.id"
title = "$.name"
content = "$.notes"
updated_at = "$.modified"
metadata = { plan = "$.plan.name", tags = "$.tags[*]" }
"#,
        );
        assert_eq!(spec.method, RestMethod::Post);
        assert_eq!(spec.path, [Segment::Literal("search".into())]);
        assert_eq!(
            spec.params,
            [
                ("fields".to_owned(), Template::Literal("all".into())),
                ("page_size".to_owned(), Template::Limit),
                ("verbose".to_owned(), Template::Literal("true".into())),
            ]
        );
        assert_eq!(spec.auth.secret_env(), Some("CRM_PASSWORD"));
        assert_eq!(spec.mapping.metadata.len(), 2);
        assert_eq!(
            spec.probe_path,
            Some(vec![Segment::Literal("health".into())])
        );
        let explained = spec.explain("crm");
        assert!(explained.contains("[providers.crm.auth]"), "{explained}");
        assert!(
            explained.contains("password_env = \"CRM_PASSWORD\""),
            "{explained}"
        );
    }

    #[test]
    fn every_auth_method_names_its_env_var() {
        let cases = [
            ("{ type = \"none\" }", None),
            ("{ type = \"bearer\", token_env = \"T\" }", Some("T")),
            ("{ type = \"api_key\", key_env = \"K\" }", Some("K")),
            (
                "{ type = \"header\", name = \"X-Auth\", value_env = \"H\" }",
                Some("H"),
            ),
            (
                "{ type = \"query\", param = \"key\", value_env = \"Q\" }",
                Some("Q"),
            ),
        ];
        for (auth, env) in cases {
            let spec = spec_of(&format!("{MINIMAL}auth = {auth}\n"));
            assert_eq!(spec.auth.secret_env(), env, "{auth}");
        }
    }

    #[test]
    fn mistakes_are_named_by_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "endpoint = \"http://crm.example\"\npath = \"/{value}\"\nmapping = { id = \"$.id\" }",
                "providers.crm.endpoint",
                "loopback",
            ),
            (
                "endpoint = \"https://crm.example?x=1\"\npath = \"/{value}\"\nmapping = { id = \"$.id\" }",
                "providers.crm.endpoint",
                "query string",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/c\"\nmapping = { id = \"$.id\" }",
                "providers.crm",
                "no slot",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nparams = { q = \"{value}\" }\nmapping = { id = \"$.id\" }",
                "providers.crm",
                "exactly one slot",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nmapping = { id = \"$.[\" }",
                "providers.crm.mapping.id",
                "RFC 9535",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"",
                "providers.crm.mapping",
                "required",
            ),
            (
                "endpoint = \"https://crm.example\"\nmethod = \"PUT\"\npath = \"/{value}\"\nmapping = { id = \"$.id\" }",
                "providers.crm.method",
                "GET",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nbody = { a = 1 }\nmapping = { id = \"$.id\" }",
                "providers.crm.body",
                "POST",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nheaders = { Host = \"x\" }\nmapping = { id = \"$.id\" }",
                "providers.crm.headers.Host",
                "cannot be set",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/x\"\nheaders = { X-Id = \"{value}\" }\nmapping = { id = \"$.id\" }",
                "providers.crm.headers.X-Id",
                "never goes into a header",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nauth = { type = \"bearer\" }\nmapping = { id = \"$.id\" }",
                "providers.crm.auth.token_env",
                "required",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nauth = { type = \"bearer\", token_env = \"T\", key_env = \"K\" }\nmapping = { id = \"$.id\" }",
                "providers.crm.auth.key_env",
                "not a setting",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nauth = { type = \"oauth\" }\nmapping = { id = \"$.id\" }",
                "providers.crm.auth.type",
                "not an auth type",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nsecret_env = \"T\"\nmapping = { id = \"$.id\" }",
                "providers.crm.secret_env",
                "auth",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/{value}\"\nrepository = \"a/b\"\nmapping = { id = \"$.id\" }",
                "providers.crm.repository",
                "presets only",
            ),
            (
                "endpoint = \"https://crm.example\"\npath = \"/a/../{value}\"\nmapping = { id = \"$.id\" }",
                "providers.crm.path",
                "dot segments",
            ),
        ];
        for (extra, path, needle) in cases {
            let errors = parse(extra).expect_err(extra);
            assert!(
                errors
                    .errors
                    .iter()
                    .any(|e| e.path == *path && e.to_string().contains(needle)),
                "{extra}: {errors}"
            );
        }
        let errors = parse("endpoint = \"https://crm.example\"\nmapping = { id = \"$.id\" }\npath = \"/{value}\"\nversion2 = 1").unwrap_err();
        assert!(errors.has_path("providers.crm.version2"), "{errors}");
        let errors = super::super::Binding::parse(
            "revision = \"r\"\n[providers.x]\ntype = \"http\"\nendpoint = \"https://a.example\"\npath = \"/x\"\n",
            std::path::Path::new("/srv"),
        )
        .unwrap_err();
        assert!(
            errors.to_string().contains("rest providers only"),
            "{errors}"
        );
    }

    #[test]
    fn the_shipped_rest_example_validates() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/bindings/example-rest.toml");
        let binding = super::super::Binding::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let envs: Vec<(&str, &str)> = binding.secret_envs().collect();
        assert_eq!(
            envs,
            [
                ("customer-data", "CRM_API_TOKEN"),
                ("issue", "GITHUB_TOKEN"),
                ("jira-tickets", "JIRA_API_TOKEN"),
                ("merge-requests", "GITLAB_TOKEN"),
                ("tickets", "HELPDESK_API_KEY"),
            ]
        );
        assert!(
            binding
                .providers
                .values()
                .all(|p| p.kind.type_name() == "rest")
        );
    }

    #[test]
    fn paths_split_decode_and_refuse_dot_segments() {
        let mut problems = Problems::default();
        assert_eq!(
            check_path(
                &mut problems,
                "p",
                "/projects/group%2Fwidgets/issues/{value}",
                true
            ),
            Some(vec![
                Segment::Literal("projects".into()),
                Segment::Literal("group/widgets".into()),
                Segment::Literal("issues".into()),
                Segment::Value,
            ])
        );
        assert!(problems.is_empty());
        assert_eq!(
            written_path(&[
                Segment::Literal("projects".into()),
                Segment::Literal("group/widgets".into()),
                Segment::Value
            ]),
            "/projects/group%2Fwidgets/{value}"
        );
        for bad in [
            "/a/../b",
            "/a/%2e%2e/b",
            "/a/./{value}",
            "/issues?state=open",
            "/x/id-{value}",
            "https://evil.example/x",
        ] {
            let mut problems = Problems::default();
            assert_eq!(check_path(&mut problems, "p", bad, true), None, "{bad}");
        }
        let mut problems = Problems::default();
        assert_eq!(
            check_path(&mut problems, "p", "/health/{value}", false),
            None
        );
    }
}
