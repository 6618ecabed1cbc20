//! Building one REST request from a binding and a lookup (pure): the URL from the
//! endpoint, the path segments (the value percent-encoded as one whole segment, `.` and
//! `..` refused), the query parameters and the JSON body. Nothing here can change the
//! scheme, host or port: they come from the endpoint only.

use crate::config::{RestSpec, Segment, Template};
use crate::outcome::Failure;
use serde_json::Value as Json;
use url::Url;

/// The URL (with its query) and the body of one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BuiltRequest {
    pub(crate) url: Url,
    pub(crate) body: Option<Json>,
}

/// The request for `value` with item limit `limit`; `query_secret` is the `query`
/// auth parameter (name, secret), appended last.
pub(crate) fn build(
    spec: &RestSpec,
    value: &str,
    limit: u32,
    query_secret: Option<(&str, &str)>,
) -> Result<BuiltRequest, Failure> {
    if holds_quoted_slot(spec)
        && value
            .chars()
            .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        // The value grammar already excludes these; a quoted literal must never be left.
        return Err(Failure::RequestNotBuilt);
    }
    let mut url = with_segments(&spec.endpoint, &spec.path, Some(value))?;
    {
        let mut query = url.query_pairs_mut();
        for (name, template) in &spec.params {
            query.append_pair(name, &template.render(value, limit));
        }
        if let Some((name, secret)) = query_secret {
            query.append_pair(name, secret);
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    let body = spec
        .body
        .as_ref()
        .map(|body| render_body(body, value, limit));
    Ok(BuiltRequest { url, body })
}

/// Whether the value goes into a double-quoted literal (a params value or body string).
fn holds_quoted_slot(spec: &RestSpec) -> bool {
    fn in_body(body: &Json) -> bool {
        match body {
            Json::String(text) => matches!(Template::parse(text), Ok(Template::QuotedValue { .. })),
            Json::Array(items) => items.iter().any(in_body),
            Json::Object(map) => map.values().any(in_body),
            _ => false,
        }
    }
    spec.params
        .iter()
        .any(|(_, template)| matches!(template, Template::QuotedValue { .. }))
        || spec.body.as_ref().is_some_and(in_body)
}

/// The endpoint with `segments` appended below its path; `value` fills
/// [`Segment::Value`] (refused as `.`, `..` or empty: they would move up the path).
pub(crate) fn with_segments(
    endpoint: &Url,
    segments: &[Segment],
    value: Option<&str>,
) -> Result<Url, Failure> {
    let mut url = endpoint.clone();
    if segments.is_empty() {
        return Ok(url);
    }
    {
        let Ok(mut path) = url.path_segments_mut() else {
            return Err(Failure::RequestNotBuilt);
        };
        path.pop_if_empty();
        for segment in segments {
            let text = match segment {
                Segment::Literal(text) => text.as_str(),
                Segment::Value => match value {
                    Some(value) if !matches!(value, "" | "." | "..") => value,
                    _ => return Err(Failure::ValueNotAPathSegment),
                },
            };
            path.push(text);
        }
    }
    Ok(url)
}

/// The body template with its slots filled: `"{value}"` strings carry the value (or
/// hold it inside their quoted literal), `"{limit}"` becomes a number.
fn render_body(template: &Json, value: &str, limit: u32) -> Json {
    match template {
        Json::String(text) => match Template::parse(text) {
            Ok(Template::Limit) => Json::from(limit),
            Ok(template) => Json::String(template.render(value, limit)),
            Err(_) => Json::String(text.clone()),
        },
        Json::Array(items) => Json::Array(
            items
                .iter()
                .map(|item| render_body(item, value, limit))
                .collect(),
        ),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), render_body(item, value, limit)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Mapping, RestAuth, RestMethod};
    use serde_json::json;
    use serde_json_path::JsonPath;

    fn spec(endpoint: &str, path: Vec<Segment>, params: Vec<(&str, Template)>) -> RestSpec {
        RestSpec {
            endpoint: Url::parse(endpoint).unwrap(),
            method: RestMethod::Get,
            path,
            params: params.into_iter().map(|(n, t)| (n.to_owned(), t)).collect(),
            body: None,
            headers: Vec::new(),
            auth: RestAuth::None,
            mapping: Mapping {
                items: None,
                id: JsonPath::parse("$.id").unwrap(),
                title: None,
                content: None,
                updated_at: None,
                metadata: Vec::new(),
            },
            probe_path: None,
            preset: None,
        }
    }

    fn lit(text: &str) -> Segment {
        Segment::Literal(text.to_owned())
    }

    #[test]
    fn the_value_is_one_encoded_segment_and_never_moves_up() {
        let spec = spec(
            "http://127.0.0.1:9/api/v4/",
            vec![
                lit("projects"),
                lit("group/widgets"),
                lit("issues"),
                Segment::Value,
            ],
            vec![],
        );
        let url = |value: &str| build(&spec, value, 5, None).map(|r| r.url.to_string());
        assert_eq!(
            url("42").unwrap(),
            "http://127.0.0.1:9/api/v4/projects/group%2Fwidgets/issues/42"
        );
        assert_eq!(
            url("a%2Fb").unwrap(),
            "http://127.0.0.1:9/api/v4/projects/group%2Fwidgets/issues/a%252Fb"
        );
        assert_eq!(
            url("a/b?x=1#f").unwrap(),
            "http://127.0.0.1:9/api/v4/projects/group%2Fwidgets/issues/a%2Fb%3Fx=1%23f"
        );
        assert_eq!(
            url("..."),
            Ok("http://127.0.0.1:9/api/v4/projects/group%2Fwidgets/issues/...".to_owned())
        );
        for refused in ["..", ".", ""] {
            assert_eq!(
                url(refused),
                Err(Failure::ValueNotAPathSegment),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn params_carry_value_limit_and_the_query_secret_last() {
        let spec = spec(
            "https://api.example/search",
            vec![],
            vec![
                ("jql", Template::parse("key = \"{value}\"").unwrap()),
                ("maxResults", Template::Limit),
                ("fields", Template::Literal("summary,labels".into())),
            ],
        );
        let built = build(&spec, "SUP-17&x=1", 7, Some(("api_key", "k&1"))).unwrap();
        assert_eq!(
            built.url.as_str(),
            "https://api.example/search?jql=key+%3D+%22SUP-17%26x%3D1%22&maxResults=7&fields=summary%2Clabels&api_key=k%261"
        );
        assert_eq!(built.url.host_str(), Some("api.example"));
        for escaping in ["a\"b", "a\\b", "a\nb"] {
            assert_eq!(
                build(&spec, escaping, 7, None),
                Err(Failure::RequestNotBuilt),
                "{escaping:?}"
            );
        }
        let bare = build(&spec_no_params(), "1", 1, None).unwrap();
        assert_eq!(bare.url.query(), None);
    }

    fn spec_no_params() -> RestSpec {
        spec("https://api.example/x", vec![Segment::Value], vec![])
    }

    #[test]
    fn bodies_fill_strings_and_make_the_limit_a_number() {
        let mut spec = spec_no_params();
        spec.path = vec![];
        spec.body = Some(json!({
            "filter": {"customer": "{value}", "tags": ["a", "{limit}"]},
            "jql": "text ~ \"{value}\"",
            "size": "{limit}",
            "fixed": true
        }));
        let built = build(&spec, "CUST-1", 3, None).unwrap();
        assert_eq!(
            built.body,
            Some(json!({
                "filter": {"customer": "CUST-1", "tags": ["a", 3]},
                "jql": "text ~ \"CUST-1\"",
                "size": 3,
                "fixed": true
            }))
        );
    }
}
