//! The capabilities a peer's handlers earn: what `#[acp_agent]` / `#[acp_client]` declare for
//! an impl block, and how the typed layers add them to `initialize` (the agent's result, the
//! client's params) where the author left them unset.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

/// Capability paths inside the initialize result (agent) or params (client), each set to `{}`
/// (`true` in the pair) or `true` (`false`).
pub type Capabilities = [(&'static [&'static str], bool)];

/// The capabilities a peer's handlers earn (implemented by `#[acp_agent]` / `#[acp_client]`).
/// For a client, see [`crate::client::with_capabilities`].
pub trait Advertise {
    /// The capabilities, as paths into `initialize`.
    const CAPABILITIES: &'static Capabilities;
}

/// A peer behind an `Arc` earns what the peer inside does.
impl<T: Advertise + ?Sized> Advertise for std::sync::Arc<T> {
    const CAPABILITIES: &'static Capabilities = T::CAPABILITIES;
}

/// Sets each capability the encoded `raw` object leaves unset; explicit settings are kept.
pub(crate) fn advertise_raw(raw: Box<RawValue>, capabilities: &Capabilities) -> Box<RawValue> {
    let Ok(mut json) = serde_json::from_str::<Value>(raw.get()) else { return raw };
    set_all_unset(&mut json, capabilities);
    serde_json::value::to_raw_value(&json).unwrap_or(raw)
}

/// Client side: sets each capability `request` (a v1 or v2 `initialize` request) leaves
/// unset; explicit settings are kept.
pub fn advertise_request<R: Serialize + DeserializeOwned>(request: R, capabilities: &Capabilities) -> R {
    if capabilities.is_empty() {
        return request;
    }
    let Ok(mut json) = serde_json::to_value(&request) else { return request };
    set_all_unset(&mut json, capabilities);
    serde_json::from_value(json).unwrap_or(request)
}

fn set_all_unset(json: &mut Value, capabilities: &Capabilities) {
    for (path, object) in capabilities {
        set_if_unset(json, path, if *object { Value::Object(Default::default()) } else { Value::Bool(true) });
    }
}

fn set_if_unset(json: &mut Value, path: &[&str], leaf: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut node = json;
    for key in parents {
        let Value::Object(map) = node else { return };
        let child = map.entry(key.to_string()).or_insert_with(|| Value::Object(Default::default()));
        if child.is_null() {
            *child = Value::Object(Default::default());
        }
        node = child;
    }
    if let Value::Object(map) = node {
        let slot = map.entry(last.to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = leaf;
        }
    }
}
