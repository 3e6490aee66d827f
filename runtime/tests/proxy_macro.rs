//! `#[acp_proxy]` in a chain run by the conductor over in-memory pipes: the functions it
//! binds see their messages (in either direction, extensions included), change them or answer
//! them, and everything else passes through untouched.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use acp_rpc::proxy::conductor::{Component, Conductor};
use acp_rpc::proxy::{ProxiedNotification, ProxiedRequest, proxy_connection};
use acp_rpc::transport::duplex;
use acp_rpc::{Connection, ErrorObject, Handler, IncomingRequest, RawValue, acp_proxy};
use common::*;
use serde_json::{Value, json};

#[derive(Default)]
struct Tagger {
    prompts: AtomicU64,
}

#[acp_proxy]
impl Tagger {
    /// From the client: the prompt gets a tag in front.
    async fn session_prompt(&self, mut call: ProxiedRequest<Value>) -> Result<Box<RawValue>, ErrorObject> {
        self.prompts.fetch_add(1, Ordering::Relaxed);
        if let Some(prompt) = call.params.get_mut("prompt").and_then(Value::as_array_mut) {
            prompt.insert(0, json!({"type": "text", "text": "[tagged]"}));
        }
        call.forward().await
    }

    /// From the agent: message chunks get a prefix; other updates pass on unchanged.
    async fn session_update(&self, mut call: ProxiedNotification<Value>) {
        if let Some(text) = call.params.pointer_mut("/update/content/text") {
            *text = json!(format!("» {}", text.as_str().unwrap_or_default()));
        }
        let _ = call.forward().await;
    }

    /// An extension the proxy answers itself.
    #[ext("_tagger/count")]
    #[from(client)]
    async fn count(&self, _call: ProxiedRequest<Option<Box<RawValue>>>) -> Result<Value, ErrorObject> {
        Ok(json!({"prompts": self.prompts.load(Ordering::Relaxed)}))
    }

    fn unused_helper(&self) -> u64 {
        self.prompts.load(Ordering::Relaxed)
    }
}

/// A terminal agent: echoes a prompt's first text block as a chunk, then `end_turn`.
struct Echo;

impl Handler for Echo {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "session/prompt" => {
                let params: Value = req.parse_params()?;
                let first = params["prompt"][0]["text"].clone();
                let update = json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": first}}});
                req.peer.notify("session/update", &update).await.map_err(ErrorObject::internal_error)?;
                Ok(raw(r#"{"stopReason":"end_turn"}"#))
            }
            "_agent/ext" => Ok(raw(r#"{"from":"agent","x-kept":[1.50]}"#)),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

#[tokio::test]
async fn a_macro_proxy_handles_what_it_names_and_forwards_the_rest() {
    let ((editor_r, editor_w), (conductor_r, conductor_w)) = duplex(1 << 20);
    let ((p_r, p_w), (cp_r, cp_w)) = duplex(1 << 20);
    let ((a_r, a_w), (ca_r, ca_w)) = duplex(1 << 20);
    let (_proxy_peer, proxy_serve) = proxy_connection(Connection::new(), Tagger::default(), p_r, p_w);
    tokio::spawn(proxy_serve);
    let (_agent_peer, agent_serve) = Connection::new().serve(a_r, a_w, Echo);
    tokio::spawn(agent_serve);
    let components = vec![Component::new("tagger", cp_r, cp_w), Component::new("echo", ca_r, ca_w)];
    tokio::spawn(Conductor::new().run(conductor_r, conductor_w, components));
    let mut editor = RawPeer::new(editor_r, editor_w);

    editor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}]}})).await;
    let (answer, before) = editor.recv_until_id(json!(1)).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}));
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["params"]["update"]["content"]["text"], "» [tagged]", "changed both ways");

    editor.send_json(json!({"jsonrpc":"2.0","id":2,"method":"_tagger/count"})).await;
    assert_eq!(editor.recv_until_id(json!(2)).await.0["result"], json!({"prompts": 1}));

    // Not named by the proxy: through it, the answer verbatim.
    editor.send(r#"{"jsonrpc":"2.0","id":3,"method":"_agent/ext","params":{"a" : 1}}"#).await;
    let line = editor.recv_line().await;
    assert_eq!(line, r#"{"jsonrpc":"2.0","id":3,"result":{"from":"agent","x-kept":[1.50]}}"#);
    // Params that are not what the handler expects: it leaves them alone and forwards them.
    editor.send_json(json!({"jsonrpc":"2.0","id":4,"method":"session/prompt","params":[1,2]})).await;
    let (answer, _) = editor.recv_until_id(json!(4)).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}), "{answer}");
    editor.send_json(json!({"jsonrpc":"2.0","id":5,"method":"_tagger/count"})).await;
    assert_eq!(editor.recv_until_id(json!(5)).await.0["result"], json!({"prompts": 2}));
    assert_eq!(Tagger::default().unused_helper(), 0);
}
