//! The streamable HTTP client of the MCP provider: rmcp's reqwest client with what the
//! server's answers mean read the way ctxd needs.
//!
//! - **A session the server no longer knows is expired.** rmcp starts a new session
//!   and sends the request again (once) on a `404` to a request that carried an
//!   `Mcp-Session-Id`, as the transport specification says. Servers built on the
//!   TypeScript SDK's examples answer an unknown session id with `400` and a JSON-RPC
//!   error without an id (`"Bad Request: No valid session ID provided"`), which rmcp
//!   cannot match to the request, so the request would wait for its deadline, and so
//!   would every one after it. Here a `400`, or a JSON-RPC error that answers no request,
//!   to a request sent in a session is the session expired, and rmcp recovers as for
//!   a `404`.
//! - **A JSON-RPC error that answers no request fails the request** (outside a
//!   session, e.g. to `initialize`) instead of leaving it to its deadline.
//! - **A `401`/`403` is its status alone.** Without a `WWW-Authenticate` challenge rmcp
//!   keeps the start of the body in the error's text; a server may echo the token
//!   there. The status is all ctxd needs (`UNAUTHORIZED`).

use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    HttpStatusError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

type HeaderMap = HashMap<http::HeaderName, http::HeaderValue>;
type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// rmcp's reqwest client, its POST answers read as the module says.
#[derive(Clone)]
pub(crate) struct SessionAwareClient(pub(crate) reqwest::Client);

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
    ) -> PostResult {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
        max_sse_event_size: usize,
    ) -> PostResult {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        let in_session = session_id.is_some();
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let answer = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        read_answer(answer, request.as_ref(), in_session)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HeaderMap,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// What the answer to a POST means. `request` is the id of the request it carried, if
/// it carried one; `in_session` whether it carried an `Mcp-Session-Id`. Pure.
pub(crate) fn read_answer(
    answer: PostResult,
    request: Option<&RequestId>,
    in_session: bool,
) -> PostResult {
    match answer {
        Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _))
            if request.is_some() && error.id.as_ref() != request =>
        {
            if in_session {
                Err(StreamableHttpError::SessionExpired)
            } else {
                // The message is the server's: it is only ever shown as untrusted text.
                Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                    format!(
                        "a JSON-RPC error that answers no request: {}",
                        error.error.message
                    ),
                )))
            }
        }
        Err(StreamableHttpError::UnexpectedServerResponse(text)) => match status_of(&text) {
            Some(400) if in_session => Err(StreamableHttpError::SessionExpired),
            Some(status @ (401 | 403)) => Err(StreamableHttpError::HttpStatus(
                HttpStatusError::new(status, None),
            )),
            _ => Err(StreamableHttpError::UnexpectedServerResponse(text)),
        },
        other => other,
    }
}

/// The status of rmcp's text for an HTTP error answer (`HTTP 400 Bad Request: …`).
fn status_of(text: &str) -> Option<u16> {
    let rest = text.strip_prefix("HTTP ")?;
    let code = rest.get(..3)?;
    if rest.as_bytes().get(3) != Some(&b' ') {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, NumberOrString};

    fn error_answer(id: Option<RequestId>) -> PostResult {
        Ok(StreamableHttpPostResponse::Json(
            ServerJsonRpcMessage::Error(JsonRpcError::new(
                id,
                ErrorData::new(
                    ErrorCode(-32000),
                    "Bad Request: No valid session ID provided",
                    None,
                ),
            )),
            None,
        ))
    }

    fn unexpected(text: &'static str) -> PostResult {
        Err(StreamableHttpError::UnexpectedServerResponse(
            Cow::Borrowed(text),
        ))
    }

    #[test]
    fn an_error_that_answers_no_request_in_a_session_is_the_session_expired() {
        let id = NumberOrString::Number(7);
        let answer = read_answer(error_answer(None), Some(&id), true);
        assert!(matches!(answer, Err(StreamableHttpError::SessionExpired)));
        // Outside a session it fails the request, quoting the server.
        let answer = read_answer(error_answer(None), Some(&id), false);
        let Err(StreamableHttpError::UnexpectedServerResponse(text)) = answer else {
            panic!("an error")
        };
        assert!(text.contains("No valid session ID provided"), "{text}");
        // The request's own error is its answer.
        let answer = read_answer(error_answer(Some(id.clone())), Some(&id), true);
        assert!(matches!(
            answer,
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(_),
                _
            ))
        ));
        // A notification awaits no answer: nothing is read into one.
        assert!(read_answer(error_answer(None), None, true).is_ok());
    }

    #[test]
    fn a_400_in_a_session_is_the_session_expired_and_a_401_its_status_alone() {
        let id = NumberOrString::Number(1);
        let answer = read_answer(unexpected("HTTP 400 Bad Request: no"), Some(&id), true);
        assert!(matches!(answer, Err(StreamableHttpError::SessionExpired)));
        let answer = read_answer(unexpected("HTTP 400 Bad Request: no"), Some(&id), false);
        assert!(matches!(
            answer,
            Err(StreamableHttpError::UnexpectedServerResponse(_))
        ));
        for (text, code) in [
            ("HTTP 401 Unauthorized: you sent tok-1", 401),
            ("HTTP 403 Forbidden: tok-1", 403),
        ] {
            let answer = read_answer(unexpected(text), Some(&id), false);
            let Err(StreamableHttpError::HttpStatus(status)) = answer else {
                panic!("a status")
            };
            assert_eq!(status.status, code);
            assert!(!format!("{status} {status:?}").contains("tok-1"));
        }
        assert_eq!(status_of("HTTP 502 Bad Gateway: x"), Some(502));
        assert_eq!(status_of("HTTP 4000"), None);
        assert_eq!(status_of("could not parse"), None);
    }
}
