//! A proxy's connection (`acp_rpc::proxy`) against a raw conductor: an intercepted
//! `session/prompt` that the proxy forwards is cancelled on the next hop the way it was
//! cancelled here.

mod common;

use std::time::Duration;

use acp_rpc::proxy::{Proxy, Side, serve_proxy};
use acp_rpc::transport::duplex;
use common::*;
use serde_json::json;

/// Intercepts prompts and forwards them with the default handler.
struct SeesPrompts;

impl Proxy for SeesPrompts {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Client && method == "session/prompt"
    }
}

/// A raw conductor talking to a `SeesPrompts` proxy.
fn proxy() -> RawPeer {
    let ((pr, pw), (cr, cw)) = duplex(1 << 20);
    tokio::spawn(serve_proxy(SeesPrompts, pr, pw));
    RawPeer::new(cr, cw)
}

/// Sends a prompt to the proxy; the `proxy/successor` request it forwards.
async fn prompt_through(conductor: &mut RawPeer) -> serde_json::Value {
    let params = json!({"sessionId":"s","prompt":[]});
    conductor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":params})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], "proxy/successor");
    assert_eq!(wrapped["params"], json!({"method":"session/prompt","params":params}));
    wrapped
}

#[tokio::test]
async fn a_cancel_request_for_an_intercepted_prompt_is_passed_on() {
    let mut conductor = proxy();
    let wrapped = prompt_through(&mut conductor).await;
    conductor.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    assert_eq!(
        conductor.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":wrapped["id"]}})
    );
    conductor.send_json(json!({"jsonrpc":"2.0","id":wrapped["id"],"result":{"stopReason":"cancelled","x":1}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled","x":1}}));
}

#[tokio::test]
async fn a_session_cancel_for_an_intercepted_prompt_is_forwarded_alone() {
    let mut conductor = proxy();
    let wrapped = prompt_through(&mut conductor).await;
    conductor.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}})).await;
    assert_eq!(
        conductor.recv().await,
        json!({"jsonrpc":"2.0","method":"proxy/successor","params":{"method":"session/cancel","params":{"sessionId":"s"}}})
    );
    assert_eq!(conductor.try_recv_line(Duration::from_millis(50)).await, None, "no `$/cancel_request` besides");
    conductor.send_json(json!({"jsonrpc":"2.0","id":wrapped["id"],"result":{"stopReason":"cancelled"}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}}));
}
