//! The demo agent hosted for several clients (`--listen`, as `runtime/examples/agent.rs` runs
//! it): every client reaches only the sessions of its owner. Two clients, each on its own
//! connection, over Streamable HTTP and over WebSocket, anonymous (each connection its own
//! owner) and with a bearer token each (one principal each): B cannot prompt, list, resume,
//! replay or close A's sessions, and every refusal is the answer an id nobody created gets.
//! A principal's second connection does see its own sessions (re-attaching works).
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::http::client::Remote;
use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue};
use serde_json::{Value, json};

const DEMO_AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");
const WAIT: Duration = Duration::from_secs(30);

/// The demo agent listening on a free port with `args`; killed when dropped.
struct Agent {
    child: Child,
    url: String,
}

impl Agent {
    fn listen(args: &[&str]) -> Agent {
        let mut child = Command::new(DEMO_AGENT)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("ACP_DEMO_DELAY_MS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the demo agent");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("LISTENING line");
        let url = line.trim().strip_prefix("LISTENING ").expect("LISTENING <url>").to_owned();
        Agent { child, url }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that rejects every permission request and keeps every notification.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Value>>>);

impl Recorder {
    fn seen(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    /// The updates about `session` seen so far.
    fn about(&self, session: &str) -> Vec<Value> {
        self.seen().into_iter().filter(|m| m["params"]["sessionId"] == session).collect()
    }

    async fn until_idle(&self, session: &str, idles: usize) {
        let idle = |m: &Value| {
            m["params"]["update"]["sessionUpdate"] == "state_update" && m["params"]["update"]["state"] == "idle"
        };
        let wait = async {
            while self.about(session).iter().filter(|m| idle(m)).count() < idles {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(WAIT, wait).await.expect("the turn ends");
    }
}

impl Handler for Recorder {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "session/request_permission" => {
                Ok(raw(json!({"outcome": {"outcome": "selected", "optionId": "reject-once"}})))
            }
            _ => Err(ErrorObject::method_not_found(&req.method)),
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let params: Value =
            notification.params.as_deref().map_or(Value::Null, |p| serde_json::from_str(p.get()).unwrap());
        self.0.lock().unwrap().push(json!({"method": &*notification.method, "params": params}));
    }
}

fn raw(value: Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).unwrap()
}

/// One client on a connection of its own.
struct Client {
    peer: Peer,
    seen: Recorder,
    _remote: acp_rpc::http::client::RemoteAgent,
}

impl Client {
    async fn connect(url: &str, token: Option<&str>, protocol: u64) -> Client {
        let mut remote = Remote::new(url);
        if let Some(token) = token {
            remote = remote.bearer_token(token);
        }
        let seen = Recorder::default();
        let (peer, remote) = remote.serve(seen.clone()).await.expect("connects");
        let client = Client { peer, seen, _remote: remote };
        let init = if protocol == 2 {
            json!({"protocolVersion": 2, "info": {"name": "hosting-test", "version": "1"}, "capabilities": {}})
        } else {
            json!({"protocolVersion": 1, "clientCapabilities": {}})
        };
        let answer = client.call("initialize", init).await.expect("initialized");
        assert_eq!(answer["protocolVersion"], protocol, "{answer}");
        client
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        let params = raw(params);
        let call = self.peer.request_raw(method, Some(&params));
        match tokio::time::timeout(WAIT, call).await.expect("an answer in time") {
            Ok(result) => Ok(serde_json::from_str(result.get()).unwrap()),
            Err(acp_rpc::Error::Rpc(error)) => Err(error),
            Err(other) => panic!("{method}: {other}"),
        }
    }

    async fn new_session(&self, cwd: &str) -> String {
        let answer = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await.expect("session/new");
        answer["sessionId"].as_str().expect("an id").to_owned()
    }

    fn prompt(session: &str, text: &str) -> Value {
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    }
}

/// The error code and message a refusal has: another owner's session must get exactly what an
/// id nobody created gets (the data names the id asked about, so it differs).
fn shape(error: &ErrorObject) -> (i64, String) {
    (error.code.into(), error.message.to_string())
}

async fn owners_are_kept_apart(url: &str, tokens: Option<(&str, &str)>) {
    let cwd = std::env::temp_dir().to_string_lossy().into_owned();
    let (token_a, token_b) = tokens.map_or((None, None), |(a, b)| (Some(a), Some(b)));

    // ---- v2: A's session, with a turn in its history -------------------------------------------
    let a = Client::connect(url, token_a, 2).await;
    let session = a.new_session(&cwd).await;
    assert!(session.len() >= 32, "session ids carry 128 random bits: {session}");
    a.call("session/prompt", Client::prompt(&session, "Please read secret-notes.txt")).await.expect("accepted");
    a.seen.until_idle(&session, 1).await;

    let b = Client::connect(url, token_b, 2).await;
    let nobody = "sess_00000000000000000000000000000000";
    let listed = b.call("session/list", json!({})).await.expect("session/list");
    assert_eq!(listed["sessions"], json!([]), "B lists none of A's sessions: {listed}");
    let listed = b.call("session/list", json!({"cwd": cwd})).await.expect("session/list by cwd");
    assert_eq!(listed["sessions"], json!([]), "{listed}");

    type Params = fn(&str, &str) -> Value;
    let cases: [(&str, Params); 4] = [
        ("session/resume", |s, cwd| json!({"sessionId": s, "cwd": cwd, "replayFrom": {"type": "start"}})),
        ("session/resume", |s, cwd| json!({"sessionId": s, "cwd": cwd})),
        ("session/prompt", |s, _| Client::prompt(s, "what did A say?")),
        ("session/close", |s, _| json!({"sessionId": s})),
    ];
    for (method, params) in cases {
        let theirs = b.call(method, params(&session, &cwd)).await.expect_err("refused");
        let unknown = b.call(method, params(nobody, &cwd)).await.expect_err("refused");
        assert_eq!(shape(&theirs), shape(&unknown), "{method}: A's session is answered as an unknown one");
    }
    assert!(b.seen.about(&session).is_empty(), "nothing of A's session reached B: {:?}", b.seen.about(&session));

    // A's session is untouched: still listed, and it takes another prompt.
    let listed = a.call("session/list", json!({})).await.expect("session/list");
    assert_eq!(listed["sessions"][0]["sessionId"], session, "{listed}");
    a.call("session/prompt", Client::prompt(&session, "again")).await.expect("accepted");
    a.seen.until_idle(&session, 2).await;

    // ---- v1: B cannot prompt in A's session either ---------------------------------------------
    let a1 = Client::connect(url, token_a, 1).await;
    let b1 = Client::connect(url, token_b, 1).await;
    let v1_session = a1.new_session(&cwd).await;
    let theirs = b1.call("session/prompt", Client::prompt(&v1_session, "hi")).await.expect_err("refused");
    let unknown = b1.call("session/prompt", Client::prompt(nobody, "hi")).await.expect_err("refused");
    assert_eq!(theirs.code, unknown.code, "v1: A's session is answered as an unknown one");
    assert!(b1.seen.about(&v1_session).is_empty(), "{:?}", b1.seen.seen());

    // ---- the same owner on a new connection: only with a principal -----------------------------
    let again = Client::connect(url, token_a, 2).await;
    let listed = again.call("session/list", json!({})).await.expect("session/list");
    let ids: Vec<&Value> = listed["sessions"].as_array().unwrap().iter().map(|s| &s["sessionId"]).collect();
    if tokens.is_some() {
        assert!(ids.contains(&&json!(session)), "a principal re-attaches to its sessions: {listed}");
        let resumed = again
            .call("session/resume", json!({"sessionId": session, "cwd": cwd, "replayFrom": {"type": "start"}}))
            .await;
        assert!(resumed.is_ok(), "{resumed:?}");
        assert!(!again.seen.about(&session).is_empty(), "its history replayed");
    } else {
        assert!(ids.is_empty(), "an anonymous connection owns its sessions alone: {listed}");
    }
}

fn ws(url: &str) -> String {
    url.replacen("http://", "ws://", 1)
}

#[tokio::test]
async fn anonymous_clients_over_http_reach_only_their_own_sessions() {
    let agent = Agent::listen(&[]);
    owners_are_kept_apart(&agent.url, None).await;
}

#[tokio::test]
async fn anonymous_clients_over_websocket_reach_only_their_own_sessions() {
    let agent = Agent::listen(&[]);
    owners_are_kept_apart(&ws(&agent.url), None).await;
}

#[tokio::test]
async fn two_principals_over_http_reach_only_their_own_sessions() {
    let agent = Agent::listen(&["--token", "alice=token-a", "--token", "bob=token-b"]);
    owners_are_kept_apart(&agent.url, Some(("token-a", "token-b"))).await;
}

#[tokio::test]
async fn two_principals_over_websocket_reach_only_their_own_sessions() {
    let agent = Agent::listen(&["--token", "alice=token-a", "--token", "bob=token-b"]);
    owners_are_kept_apart(&ws(&agent.url), Some(("token-a", "token-b"))).await;
}
