//! The JSON of the translation: v1's shapes into v2's and back (session params and answers,
//! config options, capabilities, auth methods), and the calls that carry them.

use std::sync::Mutex;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::core::handler::IncomingRequest;
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;

/// -32002 for a session closed on this connection, as the native v2 agent answers.
pub(super) fn closed_session(session: &str) -> ErrorObject {
    let mut error = ErrorObject::resource_not_found(None);
    error.data = Some(json!({"sessionId": session, "reason": "the session was closed on this connection"}));
    error
}

pub(super) fn state_update(session: &str, state: &str) -> Value {
    json!({"sessionId": session, "update": {"sessionUpdate": "state_update", "state": state}})
}

/// Calls the other side on behalf of `req` with `params` and hands back its answer, result or
/// error, as is.
pub(super) async fn call(
    to: &Peer,
    method: &str,
    params: &Value,
    req: &IncomingRequest,
) -> Result<Box<RawValue>, ErrorObject> {
    ask(to, method, Some(&*encode(params)?), req).await
}

/// Passes a request on as it is.
pub(super) async fn forward(to: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
    forward_as(to, &req.method, &req).await
}

/// Passes a request on as `method`, params untouched.
pub(super) async fn forward_as(to: &Peer, method: &str, req: &IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
    ask(to, method, req.params.as_deref(), req).await
}

/// Calls the other side for `req`, passing its cancellation on: a cancelled `req` withdraws
/// the call (`$/cancel_request`) and answers what the other side answers then. When `req` was
/// cancelled because its connection is ending, the call runs on: the runtime still writes
/// what comes within its grace period.
pub(super) async fn ask(
    to: &Peer,
    method: &str,
    params: Option<&RawValue>,
    req: &IncomingRequest,
) -> Result<Box<RawValue>, ErrorObject> {
    let mut pending = to.send_request_raw(method, params).await?;
    tokio::select! {
        biased;
        answer = &mut pending => return answer.map_err(ErrorObject::from),
        () = req.cancel.cancelled() => {}
    }
    if !req.peer.is_closed() {
        pending.cancel();
    }
    pending.await.map_err(ErrorObject::from)
}

pub(super) fn object_params(req: &IncomingRequest) -> Result<Map<String, Value>, ErrorObject> {
    match req.params.as_deref().map(|raw| serde_json::from_str(raw.get())) {
        Some(Ok(Value::Object(params))) => Ok(params),
        None => Ok(Map::new()),
        _ => Err(ErrorObject::invalid_params("params must be an object")),
    }
}

pub(super) fn object_answer(raw: &RawValue) -> Result<Map<String, Value>, ErrorObject> {
    match serde_json::from_str(raw.get()) {
        Ok(Value::Object(answer)) => Ok(answer),
        _ => Err(ErrorObject::internal_error("the v1 agent's answer is not an object")),
    }
}

pub(super) fn encode(value: &Value) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value).map_err(ErrorObject::internal_error)
}

pub(super) fn copy(from: &Map<String, Value>, key: &str, to: &mut Map<String, Value>, as_key: &str) {
    if let Some(value) = from.get(key).filter(|value| !value.is_null()) {
        to.insert(as_key.to_owned(), value.clone());
    }
}

pub(super) fn drop_nulls(value: &mut Value) {
    if let Some(object) = value.as_object_mut() {
        object.retain(|_, value| !value.is_null());
    }
}

/// A v1 session answer (new, load, resume, set_config_option) as v2's: without `modes`, which
/// v2 removed, and with v2's `configId` for each config option.
pub(super) fn v2_session_answer(answer: &RawValue) -> Result<Box<RawValue>, ErrorObject> {
    let mut answer = object_answer(answer)?;
    answer.remove("modes");
    v2_config_options(&mut answer);
    encode(&Value::Object(answer))
}

/// The config options under `configOptions`, each with v1's `id` renamed v2's `configId`.
pub(super) fn v2_config_options(holder: &mut Map<String, Value>) {
    let options = holder.get_mut("configOptions").and_then(Value::as_array_mut);
    for option in options.into_iter().flatten().filter_map(Value::as_object_mut) {
        if let Some(id) = option.remove("id") {
            option.entry("configId").or_insert(id);
        }
    }
}

/// v2 session setup params as v1's: `mcpServers` required, each in v1's shape (a stdio server
/// has no `type` and requires `args` and `env`; HTTP and SSE servers require `headers`).
pub(super) fn v1_session_params(mut params: Map<String, Value>) -> Value {
    let servers = params.entry("mcpServers").or_insert_with(|| json!([]));
    for server in servers.as_array_mut().into_iter().flatten().filter_map(Value::as_object_mut) {
        match server.get("type").and_then(Value::as_str) {
            Some("stdio") | None => {
                server.remove("type");
                server.entry("args").or_insert_with(|| json!([]));
                server.entry("env").or_insert_with(|| json!([]));
            }
            Some("http" | "sse") => {
                server.entry("headers").or_insert_with(|| json!([]));
            }
            Some(_) => {}
        }
    }
    Value::Object(params)
}

/// v1's `agentCapabilities` as v2's `capabilities` (support markers, under `session`).
pub(super) fn v2_capabilities(v1: &Value) -> Value {
    let flag = |pointer: &str| v1.pointer(pointer).and_then(Value::as_bool).unwrap_or(false);
    let marker = |pointer: &str| v1.pointer(pointer).is_some_and(Value::is_object);
    let mut prompt = Map::new();
    for (v1_name, v2_name) in [("image", "image"), ("audio", "audio"), ("embeddedContext", "embeddedContext")] {
        if flag(&format!("/promptCapabilities/{v1_name}")) {
            prompt.insert(v2_name.into(), json!({}));
        }
    }
    let mut mcp = Map::new();
    mcp.insert("stdio".into(), json!({}));
    if flag("/mcpCapabilities/http") {
        mcp.insert("http".into(), json!({}));
    }
    let mut session = Map::new();
    session.insert("prompt".into(), Value::Object(prompt));
    session.insert("mcp".into(), Value::Object(mcp));
    for extra in ["delete", "additionalDirectories"] {
        if marker(&format!("/sessionCapabilities/{extra}")) {
            session.insert(extra.into(), json!({}));
        }
    }
    let mut capabilities = Map::new();
    capabilities.insert("session".into(), Value::Object(session));
    if let Some(meta) = v1.get("_meta").filter(|meta| meta.is_object()) {
        capabilities.insert("_meta".into(), meta.clone());
    }
    Value::Object(capabilities)
}

/// A v1 auth method as v2's: `id` is `methodId`, and `type` is required (`agent` when absent).
pub(super) fn v2_auth_method(v1: &Value) -> Value {
    let mut method = v1.as_object().cloned().unwrap_or_default();
    if let Some(id) = method.remove("id") {
        method.entry("methodId").or_insert(id);
    }
    method.entry("type").or_insert_with(|| json!("agent"));
    Value::Object(method)
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
