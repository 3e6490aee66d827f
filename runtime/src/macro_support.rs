//! What `#[acp_agent]` / `#[acp_client]` expansions call. Not part of the public API: the
//! names here may change with the macros.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Map;
pub use serde_json::Value;

use crate::acp_types::{Error, ExtResponse};
use crate::agent::AgentContext;

pub use crate::advertise::{Advertise, Capabilities, advertise_request};

/// Agent side: asks the runtime to add `capabilities` to the result of the `initialize` request
/// `cx` belongs to (where unset). Applied to the encoded result, so the result type is never
/// decoded again: that keeps the decoding code of the whole initialize result out of agents.
pub fn earn(cx: &AgentContext, capabilities: &'static Capabilities) {
    if !capabilities.is_empty() {
        let _ = cx.inner.earned.set(capabilities);
    }
}

/// The conversion of a handler's error `E` (in `Result<R, E>`) into the protocol's `Self`
/// (`acp_types::Error`, or v2's), for every `E: Into<Self>`. `Self` is the protocol's error so
/// that a missing conversion is reported with this message: rustc reports the obligation the
/// expansion asked for, instead of the failing `Error: From<E>` inside it, when both have the
/// same self type.
#[diagnostic::on_unimplemented(
    message = "a handler's error type must convert into `{Self}` (`E: Into<{Self}>` in `Result<R, E>`); `{E}` does not",
    label = "return `Result<R, Error>` instead, and convert the errors in the handler",
    note = "e.g. `.map_err(|e| Error::internal_error().data(e.to_string().into()))?`; \
            for an error type of your own, `impl From<MyError> for {Self}` works too"
)]
pub trait HandlerError<E> {
    fn from_handler(error: E) -> Self;
}

/// The helpers whose types depend on the protocol version (its `Error` and `ExtResponse`):
/// expanded once for v1 here and once for v2 in [`v2`].
macro_rules! version_helpers {
    ($message:literal, $label:literal) => {
        /// Decodes the params of an extension request or notification (the `Value` inside
        /// `ExtRequest` / `ExtNotification`) into the handler's type (`-32602` when they do not
        /// fit). Absent or `null` params arrive as `{}`; when the type does not take an empty
        /// object, they are decoded as `null` instead, so that a handler taking `()` or
        /// `Option<T>` can be called without params.
        // The error is the handlers' own type (v2's holds typed data): returned as handlers
        // return it, not boxed.
        #[allow(clippy::result_large_err)]
        pub fn ext_params<T: DeserializeOwned>(params: Value) -> Result<T, Error> {
            let empty = params.as_object().is_some_and(Map::is_empty);
            match T::deserialize(&params) {
                Ok(decoded) => Ok(decoded),
                // Neither fits: the first error says more.
                Err(e) if empty => T::deserialize(Value::Null).map_err(|_| invalid::<T>(&params, e)),
                Err(e) => Err(invalid::<T>(&params, e)),
            }
        }

        /// The -32602 of params that do not fit, as typed methods answer it: the message,
        /// and the offending field's path in `data.path` (found by decoding the params'
        /// text again: only on this error path).
        fn invalid<T: DeserializeOwned>(params: &Value, e: serde_json::Error) -> Error {
            let located = serde_json::value::to_raw_value(params)
                .ok()
                .and_then(|raw| crate::core::jsonrpc::decode_params::<T>(Some(&raw)).err());
            match located {
                Some(located) => located.into(),
                None => Error::invalid_params().data(text_data(e.to_string())),
            }
        }

        /// Encodes an extension handler's result.
        #[allow(clippy::result_large_err)]
        pub fn ext_result<T: Serialize>(result: T) -> Result<ExtResponse, Error> {
            serde_json::to_value(result)
                .map(ExtResponse)
                .map_err(|e| Error::internal_error().data(text_data(e.to_string())))
        }

        /// What a notification handler may return: nothing, or `Result<(), E>` with
        /// `E: Into<Error>` (an error is logged; notifications are never answered). The error
        /// is converted apart, with [`HandlerError`], so that a missing conversion gets its
        /// message.
        #[diagnostic::on_unimplemented(message = $message, label = $label)]
        pub trait NotificationResult {
            type Error;
            fn into_result(self) -> Result<(), Self::Error>;
        }

        impl NotificationResult for () {
            type Error = Error;
            fn into_result(self) -> Result<(), Error> {
                Ok(())
            }
        }

        impl<E> NotificationResult for Result<(), E> {
            type Error = E;
            fn into_result(self) -> Result<(), E> {
                self
            }
        }

        /// A notification handler's result, with the handler's error type.
        pub fn notified<R: NotificationResult>(result: R) -> Result<(), R::Error> {
            result.into_result()
        }

        impl<E: Into<Error>> HandlerError<E> for Error {
            fn from_handler(error: E) -> Self {
                error.into()
            }
        }
    };
}

/// A value as an error's `data` (v1 keeps it as JSON).
pub fn error_data(value: impl Into<Value>) -> Value {
    value.into()
}

fn text_data(text: String) -> Value {
    error_data(text)
}

version_helpers!(
    "a notification handler returns `()` or `Result<(), E>` with `E: Into<acp_types::Error>`, not `{Self}`",
    "notifications are never answered: return nothing, or `Result<(), Error>` to have an error logged"
);

/// What `#[acp_agent(v2)]` / `#[acp_client(v2)]` expansions call: the helpers above with
/// protocol v2's types.
#[cfg(feature = "unstable_protocol_v2")]
pub mod v2 {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::Map;
    pub use serde_json::Value;

    pub use super::{Advertise, Capabilities, HandlerError};
    use crate::acp_types::v2::{Error, ErrorData, ExtResponse};

    /// A value as an error's `data` (v2 types it: an unknown shape is `ErrorData::Other`).
    pub fn error_data(value: impl Into<Value>) -> ErrorData {
        ErrorData::Other(value.into())
    }

    fn text_data(text: String) -> ErrorData {
        error_data(text)
    }

    version_helpers!(
        "a notification handler returns `()` or `Result<(), E>` with `E: Into<acp_types::v2::Error>`, not `{Self}`",
        "notifications are never answered: return nothing, or `Result<(), Error>` to have an error logged"
    );

    /// Agent side: asks the runtime to add `capabilities` to the result of the v2
    /// `initialize` request `cx` belongs to (where unset); see [`super::earn`].
    pub fn earn(cx: &crate::v2::AgentContext, capabilities: &'static Capabilities) {
        if !capabilities.is_empty() {
            let _ = cx.inner.earned.set(capabilities);
        }
    }
}
