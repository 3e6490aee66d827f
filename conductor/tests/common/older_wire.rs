//! The older proxy wire in the tests, shared by the test files and the test components: a
//! proxy that speaks only that wire, and a check of the lines a conductor sends it (our
//! proxies accept any wire's envelope, so what tells that a conductor spoke the older wire to
//! one is the lines it was sent).

use acp_rpc::proxy::{Proxy, ProxyContext, Side, Wire};
use acp_rpc::transport::{PipeReader, pipe};
use acp_rpc::{ErrorObject, IncomingNotification, IncomingRequest, RawValue};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// Passes the lines of `from` on, calling `off_wire` with each one wrapped in an envelope a
/// proxy of the older wire would not take: another wire's, or the older wire's for the other
/// kind (`_proxy/successor/request` is for requests, `_proxy/successor/notification` for
/// notifications).
pub fn older_wire_only(
    from: impl AsyncRead + Send + Unpin + 'static,
    off_wire: impl Fn(&str) + Send + 'static,
) -> PipeReader {
    let (mut to, reads) = pipe(1 << 20);
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let request = message.get("id").is_some();
            let off = match message["method"].as_str().unwrap_or_default() {
                "proxy/successor" | "_proxy/successor" => true,
                "_proxy/successor/request" => !request,
                "_proxy/successor/notification" => request,
                _ => false,
            };
            if off {
                off_wire(&line);
            }
            if to.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                break;
            }
        }
    });
    reads
}

/// The proxy `inner` taking the proxy role on the older wire only, as a proxy written for
/// `@thinkwell/conductor` does: the newer wires' initialize methods are not its methods. It
/// answers them -32601, or, when `forwarding`, passes them on to its successor in the older
/// wire's envelope, as a proxy passes on what it does not know.
pub struct OlderOnly<P> {
    pub inner: P,
    pub forwarding: bool,
}

impl<P: Proxy> Proxy for OlderOnly<P> {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        // Each wire's initialize reaches the handler as `initialize`, with the wire it came on.
        (from == Side::Client && method == "initialize") || self.inner.intercepts(from, method)
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        if from != Side::Client || req.method != "initialize" {
            return self.inner.handle_request(cx, from, req).await;
        }
        let wire = cx.wire();
        if wire == Wire::Older {
            if self.inner.intercepts(from, "initialize") {
                return self.inner.handle_request(cx, from, req).await;
            }
            return cx.forward_request(from, req).await;
        }
        // `proxy/initialize` or `_proxy/initialize`.
        let method = wire.initialize_method();
        if !self.forwarding {
            return Err(ErrorObject::method_not_found(method));
        }
        let params = req.params.as_deref().map_or("null", RawValue::get);
        let method = serde_json::to_string(method).map_err(ErrorObject::internal_error)?;
        let wrapped = RawValue::from_string(format!(r#"{{"method":{method},"params":{params}}}"#))
            .map_err(ErrorObject::internal_error)?;
        let envelope = Wire::Older.successor_envelope(false);
        cx.peer().request_raw(envelope, Some(&wrapped)).await.map_err(ErrorObject::from)
    }

    async fn handle_notification(&self, cx: ProxyContext, from: Side, notification: IncomingNotification) {
        self.inner.handle_notification(cx, from, notification).await
    }
}
