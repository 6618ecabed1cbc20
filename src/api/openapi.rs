//! The OpenAPI 3.1 document of the HTTP API: generated from the request and answer types
//! (`utoipa::ToSchema`) and each route's `#[utoipa::path]`, served at `GET /openapi.json`,
//! written by `ctxd openapi` and kept in `docs/openapi.json`. The one list of every path
//! and its methods: a request with a method its path does not take is answered `405`
//! with the `Allow` header read from here.
//!
//! Bounds the server enforces whatever its config (`budget.maxBytes`, a handle id's
//! shape, a cursor's shape, the page limits) are in the schemas; bounds a config can move
//! (`limits.max_input_keys`, `limits.max_turn_ms`, the handle operation caps) carry their
//! defaults, as `config/ctxd.toml` serves them.

use super::ApiError;
use super::answers::{
    HandleCapabilities, HandleDeleted, HandleOpAnswer, HandleTracePage, Health, Readiness,
};
use crate::contract::{ErrorBody, TurnRequest, TurnResponse};
use crate::handles::request;
use crate::trace::query::SearchPage;
use crate::trace::record::StoredTurn;
use crate::turn::replay::ReplayResult;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use std::sync::OnceLock;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Components, OpenApi as Document, ResponseBuilder, content::ContentBuilder};
use utoipa::{Modify, OpenApi};

/// The security scheme's name: the tenant API key as `Authorization: Bearer <key>`.
pub(crate) const TENANT_KEY: &str = "tenantKey";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ctxd",
        description = "The ctxd HTTP API: turns, trace search, show and replay, handle operations, health, readiness, metrics, MCP and the trace explorer. Every error answer is the envelope `{\"error\": {\"code\", \"message\", \"field\"?}}` (docs/API.md)."
    ),
    paths(
        super::routes::turn,
        super::traces::replay,
        super::traces::search,
        super::traces::show,
        super::handles::capabilities,
        super::handles::operate,
        super::handles::trace,
        super::handles::delete,
        super::routes::healthz,
        super::routes::readyz,
        super::routes::metrics,
        super::mcp::endpoint,
        super::ui::redirect_to_index,
        super::ui::index,
        super::ui::file,
        super::admin::reload,
        openapi_json,
    ),
    components(schemas(
        TurnRequest,
        TurnResponse,
        ErrorBody,
        SearchPage,
        StoredTurn,
        ReplayResult,
        HandleOpAnswer,
        HandleDeleted,
        HandleTracePage,
        HandleCapabilities,
        Health,
        Readiness,
    )),
    modifiers(&TenantRoutes),
    tags(
        (name = "turns", description = "Answering and replaying turns"),
        (name = "traces", description = "The tenant's recorded turns"),
        (name = "handles", description = "Material a turn kept behind a handle"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
        (name = "mcp", description = "ctxd as an MCP server"),
        (name = "ui", description = "The trace explorer"),
    )
)]
struct ApiDoc;

/// The tenant key's security scheme, and the answers every tenant route shares: `401`
/// from the tenant extractor, `503` while shutting down. Every request body is marked
/// required, and a `HEAD` operation gets an id of its own.
struct TenantRoutes;

impl Modify for TenantRoutes {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Components::default);
        components.add_security_scheme(
            TENANT_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The tenant's API key: `Authorization: Bearer <key>` (scheme in any case, the key trimmed); tenants are configured by its SHA-256",
                    ))
                    .build(),
            ),
        );
        for item in openapi.paths.paths.values_mut() {
            // `GET` and `HEAD` of one route share its name: operation ids are unique.
            if let Some(head) = item.head.as_mut() {
                head.operation_id = head.operation_id.take().map(|id| format!("{id}_head"));
            }
            for operation in operations(item) {
                let secured = operation.security.as_ref().is_some_and(|requirements| {
                    let json = serde_json::to_value(requirements).unwrap_or_default();
                    json.to_string().contains(TENANT_KEY)
                });
                // Every body route reads its body whatever it holds: none is 415 or 400.
                if let Some(body) = operation.request_body.as_mut() {
                    body.required = Some(utoipa::openapi::Required::True);
                }
                let responses = &mut operation.responses.responses;
                if secured && !responses.contains_key("401") {
                    responses.insert("401".to_owned(), error_response(
                        "No `Authorization: Bearer` or a key no tenant has (`UNAUTHORIZED`, `WWW-Authenticate: Bearer`)",
                    ).into());
                }
                if secured && !responses.contains_key("503") {
                    responses.insert("503".to_owned(), error_response(
                        "ctxd is shutting down, or the trace store cannot be read or written right now (`RUNTIME_UNAVAILABLE`, `Retry-After: 1`)",
                    ).into());
                }
            }
        }
    }
}

/// Every operation of a path item.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// A JSON-RPC 2.0 request or notification of the MCP streamable HTTP transport, as
/// rmcp reads it (an unknown method is a JSON-RPC error in a `200`; what is no JSON-RPC
/// message at all is `415`). The protocol's own schema is the MCP specification's;
/// ctxd's tools are in docs/MCP.md.
fn mcp_message_schema() -> Value {
    json!({
        "type": "object",
        "description": "One JSON-RPC 2.0 message: a request (`id`, `method`, `params`) or a notification (no `id`)",
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "Absent for a notification"},
            "method": {"type": "string", "description": "`initialize`, `tools/list`, `tools/call`, `notifications/initialized`, …"},
            "params": {"type": ["object", "null"]},
        },
        "required": ["jsonrpc", "method"],
    })
}

/// The body of `POST /v1/handles/{id}/ops`, exactly as [`request::parse`] reads it: one
/// object per operation kind, each with only its own fields and the three limits.
fn handle_op_request_schema() -> Value {
    let limits = crate::handles::LimitSettings::default();
    let u64_max = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
    let limit = |cap: u64, description: &str| json!({"type": ["integer", "null"], "minimum": 1, "maximum": cap, "description": description});
    let operation = |kind: &str, own: Value, required: &[&str], description: &str| {
        let mut properties = json!({"kind": {"const": kind}});
        if let (Value::Object(own), Some(properties)) = (own, properties.as_object_mut()) {
            properties.extend(own);
        }
        properties["maxResults"] = limit(
            limits.max_results_cap as u64,
            "Most entries in the result (default 100; cap `handles.max_results_cap`, 10000)",
        );
        properties["maxBytes"] = limit(
            limits.max_bytes_cap as u64,
            "Most payload bytes across the result (default 16384; cap `handles.max_bytes_cap`, 1048576)",
        );
        properties["timeLimitMs"] = limit(
            limits.time_limit_cap.as_millis() as u64,
            "Wall time in milliseconds (default 100; cap `handles.time_limit_cap_ms`, 1000)",
        );
        let required: Vec<&str> = std::iter::once("kind")
            .chain(required.iter().copied())
            .collect();
        json!({
            "type": "object",
            "title": kind,
            "description": description,
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    };
    let peek = |which: &str, description: &str| {
        operation(
            "peek",
            json!({ which: u64_max.clone() }),
            &[which],
            description,
        )
    };
    json!({
        "type": "object",
        "description": "One bounded operation on the handle's material (docs/HANDLES.md). Unknown fields are refused (`invalid_argument`), limits outside 1..=cap are `invalid_limit` (never clamped), a function outside the allow-list is `capability_denied`.",
        "properties": {
            "version": {
                "type": "integer", "minimum": 0, "maximum": u64::MAX,
                "description": "The handle's version, as the turn returned it (a wrong one is `stale_handle`, 409)"
            },
            "op": {
                "oneOf": [
                    operation("metadata", json!({}), &[], "Kind, sizes and counts; never material"),
                    peek("head", "The first N characters (text) or items"),
                    peek("tail", "The last N characters (text) or items"),
                    peek("item", "Item i (item lists only)"),
                    operation(
                        "slice",
                        json!({"start": u64_max, "length": u64_max}),
                        &["start", "length"],
                        "Characters or items [start, start + length)",
                    ),
                    operation(
                        "search",
                        json!({"pattern": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": request::MAX_PATTERN_BYTES,
                            "pattern": "^[^\\n\\r]*$",
                            "description": format!("A literal, case-sensitive pattern matched per line: 1..={} bytes, no line break", request::MAX_PATTERN_BYTES),
                        }}),
                        &["pattern"],
                        "Lines that contain the pattern",
                    ),
                    operation(
                        "partition",
                        json!({
                            "by": {"enum": request::PARTITIONS},
                            "size": {"type": "integer", "minimum": 1, "maximum": u64::MAX},
                        }),
                        &["by", "size"],
                        "Chunks of `size` characters, items or lines",
                    ),
                    operation(
                        "map",
                        json!({"function": {"enum": request::MAP_FUNCTIONS}}),
                        &["function"],
                        "A function per line or item",
                    ),
                    operation(
                        "reduce",
                        json!({"function": {"enum": request::REDUCE_FUNCTIONS}}),
                        &["function"],
                        "One value",
                    ),
                ]
            }
        },
        "required": ["version", "op"],
        "additionalProperties": false,
    })
}

/// The document as served and as kept in `docs/openapi.json`: pretty JSON and a final
/// newline, built once.
pub(crate) fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        document["components"]["schemas"]["HandleOpRequest"] = handle_op_request_schema();
        document["components"]["schemas"]["McpMessage"] = mcp_message_schema();
        let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
        text.push('\n');
        text
    })
}

/// The methods a path takes (`GET, HEAD`), for the `Allow` header of a `405`; `None` for
/// a path the API does not have. A literal path wins over a template that matches it
/// too (`/v1/handles/capabilities` over `/v1/handles/{id}`), as in OpenAPI.
pub(crate) fn allowed_methods(path: &str) -> Option<String> {
    static PATHS: OnceLock<Vec<(Vec<String>, Vec<String>)>> = OnceLock::new();
    let paths = PATHS.get_or_init(|| {
        let document: Value = serde_json::from_str(document()).unwrap_or_default();
        let Some(paths) = document["paths"].as_object() else {
            return Vec::new();
        };
        paths
            .iter()
            .map(|(template, item)| {
                let segments = template.split('/').map(str::to_owned).collect();
                let methods = item
                    .as_object()
                    .map(|item| {
                        item.keys()
                            .filter(|key| METHODS.contains(&key.as_str()))
                            .map(|key| key.to_ascii_uppercase())
                            .collect()
                    })
                    .unwrap_or_default();
                (segments, methods)
            })
            .collect()
    });
    let segments: Vec<&str> = path.split('/').collect();
    let matches = |template: &[String], literal_only: bool| {
        template.len() == segments.len()
            && template.iter().zip(&segments).all(|(t, s)| {
                t == s || (!literal_only && t.starts_with('{') && t.ends_with('}') && !s.is_empty())
            })
    };
    let found = paths
        .iter()
        .find(|(template, _)| matches(template, true))
        .or_else(|| paths.iter().find(|(template, _)| matches(template, false)))?;
    Some(found.1.join(", "))
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    summary = "This OpenAPI 3.1 document",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json", body = Object))
)]
async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(document())
}

/// No route took the request: a path of the API asked with a method it does not take is
/// `405` (the envelope adds its `Allow`), any other path `404`.
pub(crate) async fn not_found(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    if allowed_methods(request.path()).is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    Err(ApiError::NotFound {
        message: "no such route".to_owned(),
    })
}

pub(crate) fn configure(config: &mut web::ServiceConfig) {
    config.route("/openapi.json", web::get().to(openapi_json));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document_json() -> Value {
        serde_json::from_str(document()).unwrap()
    }

    #[test]
    fn the_document_is_openapi_3_1_with_the_tenant_key() {
        let document = document_json();
        assert!(document["openapi"].as_str().unwrap().starts_with("3.1."));
        let scheme = &document["components"]["securitySchemes"][TENANT_KEY];
        assert_eq!(scheme["type"], "http");
        assert_eq!(scheme["scheme"], "bearer");
        assert_eq!(
            document["paths"]["/v1/turns"]["post"]["responses"]["401"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
    }

    #[test]
    fn the_bounds_are_the_servers() {
        let document = document_json();
        let schemas = &document["components"]["schemas"];
        let budget = &schemas["TurnBudget"]["properties"]["maxBytes"];
        assert_eq!(budget["minimum"], crate::project::MIN_BUDGET_BYTES);
        assert_eq!(budget["maximum"], crate::project::MAX_BUDGET_BYTES);
        let deadline = &schemas["TurnRequest"]["properties"]["deadlineMs"];
        assert_eq!(deadline["minimum"], crate::bounds::MIN_TIMEOUT_MS);
        assert_eq!(deadline["maximum"], crate::bounds::MAX_TIMEOUT_MS);
        assert_eq!(
            schemas["TurnRequest"]["properties"]["inputs"]["maxProperties"],
            crate::contract::turn::DEFAULT_MAX_INPUT_KEYS
        );
        let search = &document["paths"]["/v1/traces"]["get"]["parameters"];
        let limit = search
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(limit["schema"]["maximum"], crate::trace::query::MAX_LIMIT);
    }

    /// The pattern of a parameter of an operation.
    fn parameter_pattern(document: &Value, path: &str, method: &str, name: &str) -> regex::Regex {
        let parameter = document["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{method} {path} has no {name}"));
        regex::Regex::new(parameter["schema"]["pattern"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn the_patterns_accept_what_the_server_accepts() {
        let document = document_json();
        for (path, method) in [
            ("/v1/handles/{id}/ops", "post"),
            ("/v1/handles/{id}/trace", "get"),
            ("/v1/handles/{id}", "delete"),
        ] {
            let handle = parameter_pattern(&document, path, method, "id");
            for id in [
                "h_0123456789abcdef0123456789abcdef",
                "h_00000000000000000000000000000000",
            ] {
                assert!(
                    handle.is_match(id) && crate::handles::is_valid_id(id),
                    "{id}"
                );
            }
            for id in [
                "h_0123456789ABCDEF0123456789abcdef",
                "h_1",
                "x_0123456789abcdef0123456789abcdef",
            ] {
                assert!(
                    !handle.is_match(id) && !crate::handles::is_valid_id(id),
                    "{id}"
                );
            }
        }
        let file = parameter_pattern(&document, "/ui/{file}", "get", "file");
        for asset in &crate::api::ui::ASSETS {
            assert!(file.is_match(asset.name), "{}", asset.name);
        }
        assert!(!file.is_match("../Cargo.toml") && !file.is_match("appxjs"));
        let cursor = parameter_pattern(&document, "/v1/traces", "get", "cursor");
        for (text, shaped) in [
            ("0a".repeat(48), true),
            ("0a".repeat(47), false),
            ("0A".repeat(48), false),
        ] {
            assert_eq!(cursor.is_match(&text), shaped, "{text}");
            assert_eq!(
                crate::trace::cursor::is_cursor_shaped(&text),
                shaped,
                "{text}"
            );
        }
        for name in ["since", "until"] {
            let time = parameter_pattern(&document, "/v1/traces", "get", name);
            for accepted in [
                "0",
                "+1764500000000",
                "999999999999999999",
                "2026-11-28T10:00:00Z",
                "2026-11-28 10:00:00",
                "1970-01-01T00:00:00.123456789Z",
                "9999-12-28T23:59:59Z",
            ] {
                assert!(time.is_match(accepted), "{accepted}");
                assert!(
                    crate::trace::query::parse_time(accepted).is_ok(),
                    "{accepted}"
                );
            }
            for refused in [
                "",
                "-1",
                "1969-12-31T23:59:59Z",
                "2026-13-01T00:00:00Z",
                "yesterday",
            ] {
                assert!(!time.is_match(refused), "{refused}");
                assert!(
                    crate::trace::query::parse_time(refused).is_err(),
                    "{refused}"
                );
            }
        }
    }

    #[test]
    fn allow_lists_the_methods_of_the_path() {
        assert_eq!(allowed_methods("/v1/turns").as_deref(), Some("POST"));
        assert_eq!(allowed_methods("/v1/traces").as_deref(), Some("GET"));
        assert_eq!(
            allowed_methods("/v1/handles/capabilities").as_deref(),
            Some("GET")
        );
        assert_eq!(
            allowed_methods("/v1/handles/h_0123456789abcdef0123456789abcdef").as_deref(),
            Some("DELETE")
        );
        assert_eq!(
            allowed_methods("/v1/turns/019/replay").as_deref(),
            Some("POST")
        );
        assert_eq!(allowed_methods("/ui/").as_deref(), Some("GET, HEAD"));
        assert_eq!(allowed_methods("/nowhere"), None);
        assert_eq!(allowed_methods("/v1/traces/a/b"), None);
    }

    #[test]
    fn the_handle_operation_schema_names_every_operation() {
        let schema = handle_op_request_schema();
        let kinds: Vec<&str> = schema["properties"]["op"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["properties"]["kind"]["const"].as_str().unwrap())
            .collect();
        for operation in request::OPERATIONS {
            assert!(kinds.contains(operation), "{operation}");
        }
    }
}
