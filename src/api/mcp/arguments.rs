//! A `tools/call`'s `arguments` exactly as the client sent them. rmcp hands a tool its
//! arguments as a map, in which a key given twice keeps its last value; `/v1/turns`
//! refuses such a body (a proxy and ctxd could each read a different value). So the
//! tools read these bytes instead of rmcp's map: `get_context` parses them as the turn
//! body, the other tools as an object that refuses a repeated key.
//!
//! Over HTTP the bytes come from the request body (one JSON-RPC message); over stdio an
//! [`ArgumentTap`] under rmcp's line reader notes each `tools/call` line's arguments by
//! request id as the bytes go by, and the tool takes them by its request's id.

use rmcp::model::RequestId;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value as Json};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// The `arguments` JSON text of one `tools/call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawArguments(Arc<str>);

impl RawArguments {
    /// The JSON text; `{}` for arguments that are absent or `null` (as rmcp reads them).
    pub(super) fn text(&self) -> &str {
        match self.0.trim() {
            "null" => "{}",
            text => text,
        }
    }
}

/// The part of a JSON-RPC message that says whether it is a tool call and with what.
#[derive(Deserialize)]
struct Message {
    id: Option<RequestId>,
    method: Option<String>,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    arguments: Option<Box<RawValue>>,
}

/// A message's request id and arguments when it is a `tools/call`; `None` for any other
/// message, or one that does not parse (rmcp answers that one).
fn tool_call(message: &[u8]) -> Option<(Option<RequestId>, RawArguments)> {
    let message: Message = serde_json::from_slice(message).ok()?;
    if message.method.as_deref() != Some("tools/call") {
        return None;
    }
    let arguments = message
        .params
        .and_then(|params| params.arguments)
        .map_or_else(|| Arc::from("{}"), |raw| Arc::from(raw.get()));
    Some((message.id, RawArguments(arguments)))
}

/// The arguments of the `tools/call` an HTTP body carries.
pub(super) fn from_http_body(body: &[u8]) -> Option<RawArguments> {
    tool_call(body).map(|(_, arguments)| arguments)
}

/// Arguments as an object whose every key is given once; a repeated key is refused
/// with its name (never a value), as a turn body's is.
pub(super) fn strict_object(text: &str) -> Result<Map<String, Json>, String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let object = StrictObject::deserialize(&mut deserializer)
        .and_then(|object| deserializer.end().map(|()| object))
        .map_err(|error| match error.classify() {
            serde_json::error::Category::Data => {
                let message = error.to_string();
                match message.split(" at line ").next() {
                    Some(reason) if reason.starts_with("duplicate field") => reason.to_owned(),
                    _ => "the arguments must be a JSON object".to_owned(),
                }
            }
            _ => "the arguments are not valid JSON".to_owned(),
        })?;
    Ok(object.0)
}

struct StrictObject(Map<String, Json>);

impl<'de> Deserialize<'de> for StrictObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = StrictObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<StrictObject, A::Error> {
                let mut object = Map::new();
                while let Some(key) = access.next_key::<String>()? {
                    if object.contains_key(&key) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate field `{key}`"
                        )));
                    }
                    let value: Json = access.next_value()?;
                    object.insert(key, value);
                }
                Ok(StrictObject(object))
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// Tool calls seen on stdin whose arguments no tool has taken yet, by request id.
#[derive(Clone, Default)]
pub(super) struct SeenCalls(Arc<Mutex<Pending>>);

/// Most calls kept before the oldest is forgotten: rmcp reads at most a buffer (8 KiB)
/// ahead of the calls it has handed on, and every call takes its own entry, so only a
/// line rmcp refused (and never hands on) is left over; this bounds those.
const MAX_PENDING: usize = 256;

#[derive(Default)]
struct Pending {
    by_id: HashMap<RequestId, VecDeque<RawArguments>>,
    /// Ids in arrival order: which entry to forget first.
    order: VecDeque<RequestId>,
}

impl SeenCalls {
    fn note(&self, id: RequestId, arguments: RawArguments) {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .by_id
            .entry(id.clone())
            .or_default()
            .push_back(arguments);
        pending.order.push_back(id);
        while pending.order.len() > MAX_PENDING {
            let Some(oldest) = pending.order.pop_front() else {
                break;
            };
            pending.forget_one(&oldest);
        }
    }

    /// The arguments of the call with this id, taken (each call takes its own).
    pub(super) fn take(&self, id: &RequestId) -> Option<RawArguments> {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let arguments = pending.forget_one(id)?;
        if let Some(at) = pending.order.iter().position(|seen| seen == id) {
            pending.order.remove(at);
        }
        Some(arguments)
    }
}

impl Pending {
    fn forget_one(&mut self, id: &RequestId) -> Option<RawArguments> {
        let queue = self.by_id.get_mut(id)?;
        let arguments = queue.pop_front();
        if queue.is_empty() {
            self.by_id.remove(id);
        }
        arguments
    }
}

/// Standard input under rmcp's line reader: passes every byte on unchanged and notes
/// each whole line that is a `tools/call` in [`SeenCalls`]. A line longer than
/// `max_line` is not kept (rmcp drops it too, at the same bound).
pub(super) struct ArgumentTap<R> {
    inner: R,
    line: Vec<u8>,
    max_line: usize,
    /// The current line passed `max_line`: skip to its end.
    discarding: bool,
    seen: SeenCalls,
}

impl<R> ArgumentTap<R> {
    pub(super) fn new(inner: R, max_line: usize, seen: SeenCalls) -> ArgumentTap<R> {
        ArgumentTap {
            inner,
            line: Vec::new(),
            max_line,
            discarding: false,
            seen,
        }
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (part, ended) = match bytes.iter().position(|&b| b == b'\n') {
                Some(at) => (&bytes[..at], true),
                None => (bytes, false),
            };
            if !self.discarding {
                if self.line.len() + part.len() > self.max_line {
                    self.discarding = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if ended {
                if !self.discarding
                    && let Some((Some(id), arguments)) = tool_call(&self.line)
                {
                    self.seen.note(id, arguments);
                }
                self.line.clear();
                self.discarding = false;
                bytes = &bytes[part.len() + 1..];
            } else {
                bytes = &[];
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ArgumentTap<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let filled = buf.filled()[before..].to_vec();
            this.observe(&filled);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_body_gives_the_arguments_as_sent() {
        let body = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_context","arguments":{"project":"a","project":"b"}}}"#;
        assert_eq!(
            from_http_body(body).unwrap().text(),
            r#"{"project":"a","project":"b"}"#
        );
        let none = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(from_http_body(none).unwrap().text(), "{}");
        let null = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":null}}"#;
        assert_eq!(from_http_body(null).unwrap().text(), "{}");
        assert!(from_http_body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        assert!(from_http_body(b"not json").is_none());
    }

    #[test]
    fn a_repeated_key_is_refused_by_name() {
        let object = strict_object(r#"{"handle": "h_1", "pattern": "ERROR"}"#).unwrap();
        assert_eq!(object["pattern"], "ERROR");
        assert_eq!(
            strict_object(r#"{"pattern": "a", "pattern": "secret-b"}"#).unwrap_err(),
            "duplicate field `pattern`"
        );
        assert_eq!(
            strict_object("[1]").unwrap_err(),
            "the arguments must be a JSON object"
        );
        assert_eq!(
            strict_object("{").unwrap_err(),
            "the arguments are not valid JSON"
        );
        assert_eq!(
            strict_object("{} {}").unwrap_err(),
            "the arguments are not valid JSON"
        );
    }

    #[test]
    fn the_tap_notes_tool_calls_by_id_across_reads() {
        let seen = SeenCalls::default();
        let mut tap = ArgumentTap::new(tokio::io::empty(), 1024, seen.clone());
        let call = |id: &str, args: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"get_context","arguments":{args}}}}}"#
            )
        };
        let stream = format!(
            "{}\n{}\n{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}}\n{}\n",
            call("1", r#"{"a":1,"a":2}"#),
            call("\"s\"", "{}"),
            call("1", r#"{"b":3}"#),
        );
        // In pieces, as reads deliver them.
        for piece in stream.as_bytes().chunks(7) {
            tap.observe(piece);
        }
        assert_eq!(
            seen.take(&RequestId::Number(1)).unwrap().text(),
            r#"{"a":1,"a":2}"#
        );
        assert_eq!(
            seen.take(&RequestId::Number(1)).unwrap().text(),
            r#"{"b":3}"#
        );
        assert_eq!(
            seen.take(&RequestId::String("s".into())).unwrap().text(),
            "{}"
        );
        assert!(seen.take(&RequestId::Number(1)).is_none());
        assert!(
            seen.take(&RequestId::Number(9)).is_none(),
            "not a tool call"
        );
    }

    #[test]
    fn the_tap_keeps_no_line_over_its_bound_and_forgets_the_oldest_calls() {
        let seen = SeenCalls::default();
        let mut tap = ArgumentTap::new(tokio::io::empty(), 64, seen.clone());
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"k":"{}"}}}}}}"#,
            "v".repeat(100)
        );
        tap.observe(format!("{long}\n").as_bytes());
        assert!(seen.take(&RequestId::Number(1)).is_none());
        assert!(tap.line.capacity() <= 64 + 8, "the long line was not kept");
        let mut tap = ArgumentTap::new(tokio::io::empty(), 1024, seen.clone());
        for id in 0..(MAX_PENDING as i64 + 10) {
            tap.observe(
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"x"}}}}"#
                )
                .as_bytes(),
            );
            tap.observe(b"\n");
        }
        assert!(seen.take(&RequestId::Number(0)).is_none(), "forgotten");
        assert!(
            seen.take(&RequestId::Number(MAX_PENDING as i64 + 9))
                .is_some()
        );
    }
}
