//! Inputs the fuzz targets (../fuzz, see FUZZING.md) found, as tests. Each names the target and
//! the input file under fuzz/regressions/ it came from.
//!
//! Every defect found so far is fixed; these tests keep them fixed.

use std::time::Duration;

use acp_rpc::agent::AgentContext;
use acp_rpc::{Connection, Error as RuntimeError, RawValue};
use acp_types::*;
use serde_json::{Value, json};

/// typed_decode, fuzz/regressions/typed_decode/elicitation-unknown-scope-duplicate-mode: an
/// `elicitation/create` whose scope is neither a session nor a request decodes with
/// `ElicitationScope::Other`, which keeps every leftover member. It used to keep the `mode`
/// tag too, and the encoding wrote `"mode"` twice; a tagged union's payload is now decoded
/// without its tag.
#[test]
fn elicitation_with_an_unknown_scope_writes_mode_once() {
    let params = json!({
        "message": "How should I approach this refactoring?",
        "mode": "form",
        "requestedSchema": {"type": "object", "properties": {"strategy": {"type": "string"}}},
        "seCssionId": "sess_abc123",
    });
    let Some(request) = AgentRequest::decode("elicitation/create", &params).expect("decodes") else {
        panic!("elicitation/create is an agent request")
    };
    let text = serde_json::to_string(&request).unwrap();
    assert_eq!(text.matches("\"mode\"").count(), 1, "{text}");
    let again: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(again, params, "re-encoded differently");
}

/// An agent whose prompt turn lasts until it is cancelled.
struct WaitsForCancel;

impl Agent<AgentContext> for WaitsForCancel {
    async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_prompt(&self, _: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        cx.cancelled().await;
        Ok(PromptResponse::new(StopReason::Cancelled))
    }
    async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

/// router, fuzz/regressions/router/bound-reached-waiting-for-cancel: with
/// `max_concurrent_requests(1)` and a prompt turn running, a second request made the reader
/// wait for a permit, and while it waited it read nothing: not the `session/cancel` that would
/// end the turn, not a response to the turn's own calls, not even the end of input. Fixed: the
/// second request now waits in its own task and the reader goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reached_concurrency_bound_still_reads_cancellation() {
    let (agent_end, client_end) = acp_rpc::transport::duplex(64 * 1024);
    let (_client, agent_serve) =
        Connection::new().max_concurrent_requests(1).serve_agent(WaitsForCancel, agent_end.0, agent_end.1);
    let agent_serve = tokio::spawn(agent_serve);
    let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    let raw_serve = tokio::spawn(raw_serve);

    let prompt = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let params = raw(r#"{"sessionId":"s","prompt":[{"type":"text","text":"go"}]}"#);
            peer.request_raw("session/prompt", Some(&params)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await; // the turn is running
    let second = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("initialize", Some(&raw(r#"{"protocolVersion":1}"#))).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await; // the reader waits for a permit
    peer.notify_raw("session/cancel", Some(&raw(r#"{"sessionId":"s"}"#))).await.unwrap();

    let answer = tokio::time::timeout(Duration::from_secs(5), prompt)
        .await
        .expect("the turn was never cancelled: session/cancel was not read")
        .unwrap()
        .expect("an answer");
    assert_eq!(answer.get(), r#"{"stopReason":"cancelled"}"#);
    let second: Result<Box<RawValue>, RuntimeError> =
        tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap();
    assert!(second.is_ok(), "{second:?}");
    // The client side goes away: the agent reads the end of input and its connection ends.
    drop(peer);
    raw_serve.abort();
    let ended = tokio::time::timeout(Duration::from_secs(5), agent_serve).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}

/// typed_decode, fuzz/regressions/typed_decode/float-not-read-back-exactly: serde_json without
/// its `float_roundtrip` feature reads some floats 1 ULP off, including floats it wrote itself,
/// so a number in free-form JSON (`_meta`, extension params, `rawInput`) changed by its last bit
/// when a message was decoded and re-encoded. The workspace now enables `float_roundtrip`.
#[test]
fn a_float_survives_decode_and_encode() {
    let x = 1.111111111111111e47_f64;
    let text = serde_json::to_string(&json!({"x": x})).unwrap();
    let Some(request) = ClientRequest::decode("_vendor/ext", &mut serde_json::Deserializer::from_str(&text)).unwrap()
    else {
        panic!("extension methods decode")
    };
    assert_eq!(serde_json::to_string(&request).unwrap(), text);
}
