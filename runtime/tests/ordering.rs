//! Contract 3, incoming side: a request is handled only after the notifications that arrived
//! before it, so e.g. a client sees a tool call's update before the permission request about it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::{Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use common::*;
use serde_json::json;

/// Notifications are slow to handle; every event is recorded in order.
struct Recorder {
    events: Arc<Mutex<Vec<String>>>,
}

impl Handler for Recorder {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        self.events.lock().unwrap().push(format!("request {}", req.method));
        Ok(raw("{}"))
    }

    async fn handle_notification(&self, n: IncomingNotification) {
        tokio::time::sleep(Duration::from_millis(15)).await;
        self.events.lock().unwrap().push(format!("notification {}", n.method));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_3_request_handled_after_prior_notifications() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let (mut raw_peer, _peer, _task) = start(Connection::new(), Recorder { events: events.clone() });
    for i in 0..3 {
        raw_peer
            .send_json(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "n": i}}))
            .await;
    }
    raw_peer
        .send_json(
            json!({"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": {"sessionId": "s"}}),
        )
        .await;
    let (answer, _) =
        tokio::time::timeout(Duration::from_secs(5), raw_peer.recv_until_id(json!(1))).await.expect("answered");
    assert_eq!(answer["result"], json!({}));
    assert_eq!(
        *events.lock().unwrap(),
        [
            "notification session/update",
            "notification session/update",
            "notification session/update",
            "request session/request_permission"
        ]
    );
}
