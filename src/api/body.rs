//! Request bodies of the JSON routes (turns, replays, handle operations): the media type,
//! the size bound, the time bound and the drain, then strict JSON parsing whose errors
//! name the field and never repeat a value.

use super::{ApiError, ApiState};
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::{HttpRequest, web};
use futures_util::StreamExt;
use tokio::time::Instant;

/// Reads a JSON body: `415` unless `Content-Type` is `application/json`, `413` as soon as
/// it exceeds `max_body_bytes` (`Content-Length` first), `408` when it has not arrived
/// within `body_timeout_ms` of its head, `503` when shutdown starts while it is still
/// arriving (the request has not started yet, and a slow body must not hold the drain).
pub(super) async fn read_json_body(
    request: &HttpRequest,
    payload: web::Payload,
    state: &ApiState,
) -> Result<web::BytesMut, ApiError> {
    require_json(request)?;
    let limit = state.registry.max_body_bytes;
    let timeout = state.requests.body_timeout;
    let deadline = Instant::now() + timeout;
    tokio::select! {
        read = tokio::time::timeout_at(deadline, read_bounded(request, payload, limit)) => {
            read.unwrap_or_else(|_| Err(ApiError::RequestTimeout {
                message: format!(
                    "the request body did not arrive within {} ms (server.body_timeout_ms)",
                    timeout.as_millis()
                ),
            }))
        }
        () = state.drain.started() => Err(ApiError::shutting_down()),
    }
}

/// `application/json`, with parameters (`; charset=utf-8`) or not, in any case.
fn require_json(request: &HttpRequest) -> Result<(), ApiError> {
    let is_json = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if is_json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// Reads the body, refusing it as soon as it exceeds `limit` (Content-Length first).
async fn read_bounded(
    request: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest {
            field: None,
            message: format!("cannot read the request body: {e}"),
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses a JSON request body that refuses unknown fields; an error names the field
/// (`inputs.customerId`, `budget.maxBytes` …) and says what kind of value came, never the
/// value itself. `what` names the body in messages.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    // Most bodies are valid: parse them without tracking the path, and parse again with
    // it only to say where a bad body goes wrong.
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = shortened(&e.path().to_string());
        let field = (path != ".").then_some(path);
        let inner = shortened_names(&without_values(&e.into_inner().to_string()));
        ApiError::BadRequest {
            message: match &field {
                Some(field) => format!("{field}: {inner}"),
                None => format!("the body is not a valid {what}: {inner}"),
            },
            field,
        }
    })?;
    deserializer.end().map_err(|e| ApiError::BadRequest {
        field: None,
        message: format!("trailing data after the {what}: {e}"),
    })?;
    Ok(value)
}

/// A serde message with the offending value replaced by its kind: serde writes
/// `invalid type: integer `987654321012`, expected a string` (and `invalid value: …`,
/// `unknown variant …`), which would repeat what the client sent — possibly a secret.
/// Field names stay: they are the API's own vocabulary or the client's key.
fn without_values(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            // The expected part is ctxd's own text and comes last.
            let Some((found, expected)) = rest.rsplit_once(", expected ") else {
                return format!("{}(the value is not repeated)", prefix);
            };
            let expected = expected
                .split(" at line ")
                .next()
                .unwrap_or(expected)
                .trim();
            return format!(
                "{prefix}{}, expected {} (the value is not repeated)",
                kind_of(found),
                plain_expected(expected)
            );
        }
    }
    if message.starts_with("unknown variant ") {
        return "not one of the accepted values (the value is not repeated)".to_owned();
    }
    message.to_owned()
}

/// Longest caller-chosen name (a key, a path) an error repeats; longer ones are cut.
const MAX_NAME_CHARS: usize = 64;

/// `text` cut to [`MAX_NAME_CHARS`] characters, with `…` when it was longer: a key the
/// caller chose may be named, never repeated at any length.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(MAX_NAME_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A serde message with the caller's key shortened: `unknown field `…`, expected …`
/// and `duplicate field `…`` quote it, and it may itself hold backquotes, so the name
/// is everything between the prefix and serde's own tail. Any other message is ctxd's
/// own words and the names of its fields, cut only as a last resort.
fn shortened_names(message: &str) -> String {
    for prefix in ["unknown field `", "duplicate field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let (name, tail) = match rest.rfind("`, expected") {
                Some(end) => (&rest[..end], &rest[end..]),
                None => (rest.strip_suffix('`').unwrap_or(rest), "`"),
            };
            return format!("{prefix}{}{tail}", shortened(name));
        }
    }
    match message.char_indices().nth(4 * MAX_NAME_CHARS) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message.to_owned(),
    }
}

/// The kind of a value as serde's `Unexpected` prints it, without the value.
fn kind_of(found: &str) -> &'static str {
    match found.split([' ', '`', '"']).next().unwrap_or_default() {
        "boolean" => "a boolean",
        "integer" | "floating" => "a number",
        "string" | "character" => "a string",
        "unit" => "null",
        "sequence" => "an array",
        "map" => "an object",
        _ => "another kind of value",
    }
}

/// Rust's names for the expected type in the API's words.
fn plain_expected(expected: &str) -> &str {
    match expected {
        "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number",
        "i64" | "i32" => "a whole number",
        "f64" | "f32" => "a number",
        "a borrowed string" => "a string",
        other if other.starts_with("struct ") => "an object",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_chosen_names_are_named_briefly() {
        let key = format!("maxByte{}", "{".repeat(900));
        let body = format!(r#"{{"project": "p", "budget": {{"{key}": 1}}}}"#);
        let Err(ApiError::BadRequest { field, message }) =
            parse_body::<crate::contract::TurnRequest>(body.as_bytes(), "turn request")
        else {
            panic!("a long unknown key is refused");
        };
        assert!(
            field.as_deref().is_some_and(|f| f.chars().count() <= 72),
            "{field:?}"
        );
        assert!(message.len() < 400, "{} bytes: {message}", message.len());
        assert!(message.contains("unknown field `maxByte{"), "{message}");
        assert!(message.contains("expected `maxBytes`"), "{message}");
        // A key holding backquotes is still one name, shortened whole.
        let key = format!("a`b{}", "`[".repeat(500));
        let body = format!(r#"{{"project": "p", "{key}": 1}}"#);
        let Err(ApiError::BadRequest { message, .. }) =
            parse_body::<crate::contract::TurnRequest>(body.as_bytes(), "turn request")
        else {
            panic!("an unknown key is refused");
        };
        assert!(message.len() < 400, "{} bytes: {message}", message.len());
    }

    #[test]
    fn serde_messages_lose_their_values() {
        for (message, expected) in [
            (
                "invalid type: integer `987654321012`, expected a string at line 1 column 40",
                "invalid type: a number, expected a string (the value is not repeated)",
            ),
            (
                "invalid type: string \"hunter2, expected x\", expected usize",
                "invalid type: a string, expected a whole number (the value is not repeated)",
            ),
            (
                "invalid value: integer `-1`, expected usize",
                "invalid value: a number, expected a whole number (the value is not repeated)",
            ),
            (
                "invalid type: floating point `1.5`, expected u64",
                "invalid type: a number, expected a whole number (the value is not repeated)",
            ),
            (
                "invalid type: boolean `true`, expected struct TurnBudget",
                "invalid type: a boolean, expected an object (the value is not repeated)",
            ),
            (
                "invalid type: sequence, expected a string",
                "invalid type: an array, expected a string (the value is not repeated)",
            ),
            (
                "invalid type: unit value, expected a string",
                "invalid type: null, expected a string (the value is not repeated)",
            ),
            (
                "unknown variant `secret-value`, expected one of `A`, `B`",
                "not one of the accepted values (the value is not repeated)",
            ),
            (
                "unknown field `colour`, expected one of `project`",
                "unknown field `colour`, expected one of `project`",
            ),
            ("missing field `project`", "missing field `project`"),
        ] {
            assert_eq!(without_values(message), expected, "{message}");
        }
    }
}
