//! A proxy's connection (`acp_rpc::proxy`) against a raw conductor: an intercepted
//! `session/prompt` that the proxy forwards is cancelled on the next hop the way it was
//! cancelled here; the earlier wires (`sacp` 11's `_proxy/initialize`, and `initialize` with
//! `_meta.proxy`) message by message.

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

/// After the proxy's `initialize`, on a wire whose envelopes for the successor are `request`
/// and `notification`: a request and a notification the proxy does not intercept, and the
/// prompt it does, go on wrapped; what the successor sends is unwrapped for the client; answers
/// are plain. Returns the wrapped prompt, not answered yet.
async fn a_turn_past_the_proxy(conductor: &mut RawPeer, request: &str, notification: &str) -> serde_json::Value {
    let new = json!({"cwd":"/","mcpServers":[]});
    conductor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":new})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], request);
    assert_eq!(wrapped["params"], json!({"method":"session/new","params":new}));
    conductor.send_json(json!({"jsonrpc":"2.0","id":wrapped["id"],"result":{"sessionId":"s"}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}));
    conductor.send_json(json!({"jsonrpc":"2.0","method":"_x/note","params":{"n":1}})).await;
    assert_eq!(
        conductor.recv().await,
        json!({"jsonrpc":"2.0","method":notification,"params":{"method":"_x/note","params":{"n":1}}})
    );

    // The intercepted prompt goes on in the request envelope too.
    let prompt = json!({"sessionId":"s","prompt":[]});
    conductor.send_json(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":prompt})).await;
    let turn = conductor.recv().await;
    assert_eq!(turn["method"], request);
    assert_eq!(turn["params"], json!({"method":"session/prompt","params":prompt}));

    // From the successor: a notification and a request, unwrapped for the client.
    let update =
        json!({"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}});
    conductor
        .send_json(json!({"jsonrpc":"2.0","method":notification,"params":{"method":"session/update","params":update}}))
        .await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","method":"session/update","params":update}));
    let read = json!({"sessionId":"s","path":"/a"});
    conductor
        .send_json(
            json!({"jsonrpc":"2.0","id":"r1","method":request,"params":{"method":"fs/read_text_file","params":read}}),
        )
        .await;
    let asked = conductor.recv().await;
    assert_eq!(asked["method"], "fs/read_text_file");
    assert_eq!(asked["params"], read);
    conductor.send_json(json!({"jsonrpc":"2.0","id":asked["id"],"result":{"content":"A"}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":"r1","result":{"content":"A"}}));
    turn
}

/// The older wire, as `@thinkwell/conductor` speaks it: told by the marked `initialize`, whose
/// answer gets the marker; requests and notifications for the successor in envelopes of their
/// own kind; the successor's unwrapped on their way to the client; answers plain.
#[tokio::test]
async fn the_older_wire_is_spoken_after_an_initialize_that_marks_a_proxy() {
    let mut conductor = proxy();
    let init = json!({"protocolVersion":1,"clientCapabilities":{},"_meta":{"proxy":true}});
    conductor.send_json(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":init})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], "_proxy/successor/request", "{wrapped}");
    assert_eq!(wrapped["params"], json!({"method":"initialize","params":init}), "passed on with its marker");
    let agents = r#"{"protocolVersion":1,"agentCapabilities":{"x":[1.50]},"_meta":{"a":1}}"#;
    conductor.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{agents}}}"#, wrapped["id"])).await;
    assert_eq!(
        conductor.recv_line().await,
        r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"x":[1.50]},"_meta":{"a":1,"proxy":true}}}"#,
        "the agent's answer as written, with the marker added"
    );

    // A request that is not intercepted, and a notification, each in its own envelope.
    let turn = a_turn_past_the_proxy(&mut conductor, "_proxy/successor/request", "_proxy/successor/notification").await;
    conductor.send_json(json!({"jsonrpc":"2.0","id":turn["id"],"result":{"stopReason":"end_turn"}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
}

/// Without the marker, a plain `initialize` is refused (a proxy is not an agent), and the
/// older wire's envelopes are no envelopes: an extension request like any other.
#[tokio::test]
async fn a_plain_initialize_is_refused_and_the_older_envelopes_mean_nothing_on_the_current_wire() {
    let mut conductor = proxy();
    conductor.send_json(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}})).await;
    let refused = conductor.recv().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let envelope = json!({"method":"session/new","params":{}});
    conductor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"_proxy/successor/request","params":envelope})).await;
    assert_eq!(
        conductor.recv().await["params"],
        json!({"method":"_proxy/successor/request","params":envelope}),
        "wrapped for the successor as the current wire wraps any request"
    );
}

/// `sacp` 11's wire: told by `_proxy/initialize`, whose answer is the successor's as it came;
/// requests and notifications for the successor in `_proxy/successor`; the successor's
/// unwrapped on their way to the client. A `proxy/successor` envelope is still understood.
#[tokio::test]
async fn the_sacp_wire_is_spoken_after_an_underscored_proxy_initialize() {
    let mut conductor = proxy();
    let init = json!({"protocolVersion":1,"clientCapabilities":{}});
    conductor.send_json(json!({"jsonrpc":"2.0","id":0,"method":"_proxy/initialize","params":init})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], "_proxy/successor", "{wrapped}");
    assert_eq!(wrapped["params"], json!({"method":"initialize","params":init}));
    let agents = r#"{"protocolVersion":1,"agentCapabilities":{"x":[1.50]}}"#;
    conductor.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{agents}}}"#, wrapped["id"])).await;
    assert_eq!(conductor.recv_line().await, format!(r#"{{"jsonrpc":"2.0","id":0,"result":{agents}}}"#));

    let turn = a_turn_past_the_proxy(&mut conductor, "_proxy/successor", "_proxy/successor").await;
    // From the successor, the current wire's envelope is understood too.
    let update = json!({"sessionId":"s","update":{"sessionUpdate":"plan","entries":[]}});
    conductor
        .send_json(
            json!({"jsonrpc":"2.0","method":"proxy/successor","params":{"method":"session/update","params":update}}),
        )
        .await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","method":"session/update","params":update}));

    // Chain methods are not wrapped in envelopes.
    let nested = json!({"method":"_proxy/initialize","params":init});
    conductor.send_json(json!({"jsonrpc":"2.0","id":"n","method":"_proxy/successor","params":nested})).await;
    let refused = conductor.recv().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");

    conductor.send_json(json!({"jsonrpc":"2.0","id":turn["id"],"result":{"stopReason":"end_turn"}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
}

/// Counts the session updates that decode into its typed view.
#[derive(Default)]
struct CountsUpdates(std::sync::atomic::AtomicU64);

#[acp_rpc::acp_proxy]
impl CountsUpdates {
    async fn session_update(
        &self,
        call: acp_rpc::proxy::ProxiedNotification<
            acp_rpc::acp_types::lossless::Lossless<acp_rpc::acp_types::SessionNotification>,
        >,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = call.forward().await;
    }
}

/// A notification its typed handler cannot read (another protocol version's shape, a broken
/// sender) is passed on as it came, as if not intercepted: a proxy loses nothing it did not
/// mean to drop.
#[tokio::test]
async fn a_notification_the_typed_handler_cannot_read_is_passed_on_as_it_came() {
    let counts = std::sync::Arc::new(CountsUpdates::default());
    let ((pr, pw), (cr, cw)) = duplex(1 << 20);
    let (_peer, serve) = acp_rpc::proxy::proxy_connection(acp_rpc::Connection::new(), counts.clone(), pr, pw);
    tokio::spawn(serve);
    let mut conductor = RawPeer::new(cr, cw);
    let from_successor = |update: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"proxy/successor","params":{{"method":"session/update","params":{update}}}}}"#
        )
    };
    let readable =
        r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}"#;
    let unreadable = r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":7},"x" : [1.50]}"#;
    for update in [readable, unreadable, readable] {
        conductor.send(&from_successor(update)).await;
        assert_eq!(
            conductor.recv_line().await,
            format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{update}}}"#)
        );
    }
    assert_eq!(counts.0.load(std::sync::atomic::Ordering::Relaxed), 2, "the handler saw the readable ones");
}

/// The messages the schema of the TypeScript SDK 2.4 added, both ways through a proxy that
/// intercepts nothing of them: wrapped for the successor and unwrapped for the client, with
/// their params byte for byte (spacing, key order and number spelling included).
#[tokio::test]
async fn the_new_schemas_messages_pass_a_proxy_byte_for_byte() {
    let mut conductor = proxy();
    let to_agent: &[(&str, &str)] = &[
        ("session/archive", r#"{"sessionId" : "s", "_meta":{"z":1.50,"a":null}}"#),
        ("session/unarchive", r#"{"sessionId":"s"}"#),
        ("session/set_title", r#"{"sessionId":"s","title":"Fix the  build"}"#),
        ("session/status", r#"{"sessionId":"s"}"#),
        ("auth/status", r#"{}"#),
        ("tool_call/cancel", r#"{"sessionId":"s","toolCallId":"call_1"}"#),
        ("terminal/cancel", r#"{"sessionId":"s","terminalId":"t1"}"#),
    ];
    for (n, (method, params)) in to_agent.iter().enumerate() {
        conductor.send(&format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"{method}","params":{params}}}"#)).await;
        let wrapped = conductor.recv_line().await;
        let expected = format!(r#""method":"proxy/successor","params":{{"method":"{method}","params":{params}}}}}"#);
        assert!(wrapped.ends_with(&expected), "{wrapped}\nwanted …{expected}");
        // The answer comes back unwrapped, as the successor wrote it.
        let id: serde_json::Value = serde_json::from_str::<serde_json::Value>(&wrapped).unwrap()["id"].clone();
        conductor.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"k" : 1e2}}}}"#)).await;
        assert_eq!(conductor.recv_line().await, format!(r#"{{"jsonrpc":"2.0","id":{n},"result":{{"k" : 1e2}}}}"#));
    }
    let to_client: &[&str] = &[
        r#"{"sessionId":"s","update":{"sessionUpdate":"notice","severity":"warning","title":"Low disk"}}"#,
        r#"{"sessionId":"s","update":{"sessionUpdate":"compaction_update","compactionId":"c1","status":"in_progress"}}"#,
        r#"{"sessionId":"s","update":{"sessionUpdate":"compaction_summary_chunk","compactionId":"c1","content":{"type":"text","text":"so far"}}}"#,
        r#"{"sessionId":"s","update":{"sessionUpdate":"state_update","state":"idle","stopReason":"error","error":{"code":-32603,"message":"x"},"background":[]}}"#,
    ];
    for update in to_client {
        conductor
            .send(&format!(
                r#"{{"jsonrpc":"2.0","method":"proxy/successor","params":{{"method":"session/update","params":{update}}}}}"#
            ))
            .await;
        assert_eq!(
            conductor.recv_line().await,
            format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{update}}}"#)
        );
    }
    let status = r#"{"state":"signed_in","_meta":{}}"#;
    conductor
        .send(&format!(
            r#"{{"jsonrpc":"2.0","method":"proxy/successor","params":{{"method":"auth/status_update","params":{status}}}}}"#
        ))
        .await;
    assert_eq!(
        conductor.recv_line().await,
        format!(r#"{{"jsonrpc":"2.0","method":"auth/status_update","params":{status}}}"#)
    );
}
