//! The cancellation grace period in the typed layer: a handler that never asks its context for
//! the token is answered `cancelled` at once, whatever `cancel_grace` says; one that watches its
//! token gets the grace period to wind down (here: to send its last update).

mod typed_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use acp_rpc::Connection;
use acp_rpc::agent::AgentContext;
use acp_rpc::transport::duplex;
use acp_types::*;
use tokio::sync::mpsc;
use typed_common::*;

/// A long grace period: a test that gets its answer well before it ended shows it was skipped.
const LONG_GRACE: Duration = Duration::from_secs(30);

struct Agent {
    watches: bool,
    started: mpsc::UnboundedSender<()>,
}

impl acp_types::Agent<AgentContext> for Agent {
    async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(SESSION))
    }
    async fn session_prompt(&self, p: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let _ = self.started.send(());
        if !self.watches {
            // Busy with something that never looks at the token.
            std::future::pending::<()>().await;
        }
        cx.cancelled().await;
        // Winding down takes a while (e.g. stopping a tool), then the last update goes out.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let last = SessionUpdate::AgentMessageChunk(ContentChunk::new(text("stopped")));
        cx.client().session_update(SessionNotification::new(p.session_id, last)).await?;
        Ok(PromptResponse::new(StopReason::Cancelled))
    }
    async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

struct Turn {
    answer: PromptResponse,
    elapsed: Duration,
    updates: Vec<SessionUpdate>,
}

/// One prompt turn against `Agent { watches }` with [`LONG_GRACE`], cancelled once it runs.
async fn cancelled_turn(watches: bool) -> Turn {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (_client, agent_serve) = Connection::new().cancel_grace(LONG_GRACE).serve_agent(
        Agent { watches, started: started_tx },
        agent_end.0,
        agent_end.1,
    );
    let log = Arc::new(ClientLog::default());
    let (events, _) = mpsc::unbounded_channel();
    let (agent, client_serve) =
        Connection::new().serve_client(TestClient::new(log.clone(), events), client_end.0, client_end.1);
    let _tasks = [tokio::spawn(agent_serve), tokio::spawn(client_serve)];

    let session = start_session(&agent).await;
    let turn = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.prompt(prompt("go")).await })
    };
    next(&mut started).await;
    let t0 = Instant::now();
    agent.cancel(CancelNotification::new(session)).await.expect("session/cancel");
    let answer = tokio::time::timeout(LIMIT, turn).await.expect("answered").unwrap().expect("prompt");
    let elapsed = t0.elapsed();
    let updates = log.updates.lock().unwrap().clone();
    Turn { answer, elapsed, updates }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handler_that_ignores_its_token_is_answered_cancelled_without_the_grace_period() {
    let turn = cancelled_turn(false).await;
    assert_eq!(turn.answer.stop_reason, StopReason::Cancelled);
    assert!(turn.elapsed < LONG_GRACE / 2, "waited {:?}: the grace period was not skipped", turn.elapsed);
    assert!(turn.updates.is_empty(), "{:?}", turn.updates);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handler_that_watches_its_token_gets_the_grace_period_to_send_its_last_update() {
    let turn = cancelled_turn(true).await;
    assert_eq!(turn.answer.stop_reason, StopReason::Cancelled);
    // The last update arrived before the answer (responses follow notifications).
    assert_eq!(turn.updates.len(), 1, "{:?}", turn.updates);
    assert!(matches!(&turn.updates[0], SessionUpdate::AgentMessageChunk(_)), "{:?}", turn.updates);
}

/// A prompt cancelled while it waits for a handler slot never starts, so it has nothing to wind
/// down: it is answered `cancelled` at once, not after the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_request_cancelled_while_waiting_for_a_slot_is_answered_at_once() {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (_client, agent_serve) = Connection::new().max_concurrent_requests(1).cancel_grace(LONG_GRACE).serve_agent(
        Agent { watches: false, started: started_tx },
        agent_end.0,
        agent_end.1,
    );
    let log = Arc::new(ClientLog::default());
    let (events, _) = mpsc::unbounded_channel();
    let (agent, client_serve) =
        Connection::new().serve_client(TestClient::new(log, events), client_end.0, client_end.1);
    let _tasks = [tokio::spawn(agent_serve), tokio::spawn(client_serve)];

    let session = start_session(&agent).await;
    // The first turn takes the only slot and keeps it; the second one waits for it.
    let _first = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.prompt(PromptRequest::new(session, vec![text("busy")])).await })
    };
    next(&mut started).await;
    let waiting = agent.prompt(PromptRequest::new("sess_2", vec![text("queued")]));
    tokio::pin!(waiting);
    // One poll sends the request, so the cancel goes out after it (one FIFO writer).
    tokio::select! {
        biased;
        r = &mut waiting => panic!("answered before it was cancelled: {r:?}"),
        () = std::future::ready(()) => {}
    }
    let t0 = Instant::now();
    agent.cancel(CancelNotification::new("sess_2")).await.expect("session/cancel");
    let answer = tokio::time::timeout(LIMIT, waiting).await.expect("answered").expect("prompt");
    assert_eq!(answer.stop_reason, StopReason::Cancelled);
    assert!(t0.elapsed() < LONG_GRACE / 2, "waited {:?} for a handler that never started", t0.elapsed());
    assert!(started.try_recv().is_err(), "the second turn never started");
}
