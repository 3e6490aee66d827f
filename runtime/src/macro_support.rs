//! What `#[acp_agent]` / `#[acp_client]` expansions call. Not part of the public API: the
//! names here may change with the macros.

use serde::Serialize;
use serde::de::DeserializeOwned;
pub use serde_json::Value;

use crate::acp_types::{Error, ExtRequest, ExtResponse};

/// The capabilities a peer's handlers earn (implemented by `#[acp_agent]` / `#[acp_client]`):
/// JSON paths inside the initialize result (agent) or params (client), each set to `{}`
/// (object) or `true`. For a client, see [`crate::client::with_capabilities`].
pub trait Advertise {
    const CAPABILITIES: &'static [(&'static [&'static str], bool)];
}

/// Sets each earned capability that `value` leaves unset; explicit settings are kept.
pub fn advertise<T: Serialize + DeserializeOwned>(value: T, capabilities: &[(&[&str], bool)]) -> T {
    if capabilities.is_empty() {
        return value;
    }
    let Ok(mut json) = serde_json::to_value(&value) else { return value };
    for (path, object) in capabilities {
        set_if_unset(&mut json, path, if *object { Value::Object(Default::default()) } else { Value::Bool(true) });
    }
    serde_json::from_value(json).unwrap_or(value)
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

/// Decodes an extension method's params into the handler's type (`-32602` when they do not fit).
pub fn ext_params<T: DeserializeOwned>(params: ExtRequest) -> Result<T, Error> {
    serde_json::from_value(params.0).map_err(|e| Error::invalid_params().data(Value::from(e.to_string())))
}

/// Encodes an extension handler's result.
pub fn ext_result<T: Serialize>(result: T) -> Result<ExtResponse, Error> {
    serde_json::to_value(result).map(ExtResponse).map_err(|e| Error::internal_error().data(Value::from(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp_types::{InitializeResponse, ProtocolVersion};

    #[test]
    fn earned_capabilities_fill_only_what_is_unset() {
        let response = InitializeResponse::new(ProtocolVersion(1));
        let caps: &[(&[&str], bool)] =
            &[(&["agentCapabilities", "loadSession"], false), (&["agentCapabilities", "sessionCapabilities", "list"], true)];
        let json = serde_json::to_value(advertise(response, caps)).unwrap();
        assert_eq!(json["agentCapabilities"]["loadSession"], true);
        assert_eq!(json["agentCapabilities"]["sessionCapabilities"]["list"], serde_json::json!({}));

        let mut explicit = serde_json::to_value(InitializeResponse::new(ProtocolVersion(1))).unwrap();
        explicit["agentCapabilities"] = serde_json::json!({"loadSession": false});
        let explicit: InitializeResponse = serde_json::from_value(explicit).unwrap();
        let json = serde_json::to_value(advertise(explicit, caps)).unwrap();
        assert_eq!(json["agentCapabilities"]["loadSession"], false, "an explicit setting wins");
    }
}
