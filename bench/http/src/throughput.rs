//! `session/update` throughput to one client: initialize, session/new and a warm-up turn of
//! 1,000 updates (not timed), then one prompt turn of N updates. The time runs from sending
//! the prompt until its answer has arrived and all N updates have been handled (decoded into
//! the typed `SessionNotification` and counted). One result line:
//! `tput <server> <profile> <client> <n> <secs> <msgs_per_s> <client_hwm_kib>
//! <server_cpu_us_per_msg> <client_cpu_us_per_msg>` (CPU time over the timed turn, from the
//! threads' run time: [`common::cpu_time`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common;

const WARMUP: u64 = 1_000;

fn profile(url: &str) -> &'static str {
    if url.starts_with("ws") { "ws" } else { "sse" }
}

/// Where a run is measured: the server's process (for its CPU time) and the result line's labels.
pub struct Run<'a> {
    pub url: &'a str,
    pub n: u64,
    pub label: &'a str,
    pub server_pid: Option<&'a str>,
}

/// CPU time of the server and of this process at the start of the timed turn.
struct Meter {
    server: Option<Duration>,
    client: Option<Duration>,
}

impl Run<'_> {
    fn meter(&self) -> Meter {
        Meter { server: self.server_pid.and_then(common::cpu_time), client: common::cpu_time("self") }
    }

    fn print(&self, client: &str, elapsed: Duration, start: Meter) {
        let (label, n) = (self.label, self.n);
        let end = self.meter();
        let per_msg = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", b.saturating_sub(a).as_secs_f64() * 1e6 / n as f64),
            _ => "nan".into(),
        };
        let secs = elapsed.as_secs_f64();
        let hwm = common::status_kib("self", "VmHWM").unwrap_or(0);
        println!(
            "tput\t{label}\t{}\t{client}\t{n}\t{secs:.6}\t{:.0}\t{hwm}\t{}\t{}",
            profile(self.url),
            n as f64 / secs,
            per_msg(start.server, end.server),
            per_msg(start.client, end.client)
        );
    }
}

/// Our client: acp-rpc's `Remote` (HTTP/1.1 on `http://`, WebSocket on `ws://`) with a
/// typed `acp_types::Client`.
pub async fn ours(run: Run<'_>) {
    let (url, n) = (run.url, run.n);
    use acp_rpc::client::ClientContext;
    use acp_rpc::http::client::Remote;
    use acp_types::{
        Client, ContentBlock, Error, InitializeRequest, NewSessionRequest, PromptRequest, ProtocolVersion,
        RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionNotification, StopReason,
        TextContent,
    };

    struct Counter(Arc<AtomicU64>);
    impl Client<ClientContext> for Counter {
        async fn session_request_permission(
            &self,
            _: RequestPermissionRequest,
            _: ClientContext,
        ) -> Result<RequestPermissionResponse, Error> {
            Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
        }
        async fn session_update(&self, update: SessionNotification, _: ClientContext) -> Result<(), Error> {
            std::hint::black_box(&update);
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    let seen = Arc::new(AtomicU64::new(0));
    let (agent, remote) = Remote::new(url).connect(Counter(seen.clone())).await.expect("connect");
    agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await.expect("initialize");
    let session = agent.new_session(NewSessionRequest::new("/", Vec::new())).await.expect("session/new").session_id;
    let prompt =
        |n: u64| PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new(n.to_string()))]);
    agent.prompt(prompt(WARMUP)).await.expect("warm-up turn");
    let meter = run.meter();
    let t0 = Instant::now();
    let answer = agent.prompt(prompt(n)).await.expect("prompt");
    // acp-rpc's contract: every update of the turn was handled before the answer returns.
    let elapsed = t0.elapsed();
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    assert_eq!(seen.load(Ordering::Relaxed), WARMUP + n, "updates lost");
    run.print("ours", elapsed, meter);
    let _ = remote.close().await;
}

/// The official Rust client: `agent-client-protocol-http` 5.0's `HttpClient` (reqwest for
/// `http://`, async-tungstenite for `ws://`) under `Client.v1()`.
pub async fn official(run: Run<'_>) {
    let (url, n) = (run.url, run.n);
    use agent_client_protocol::Client;
    use agent_client_protocol::schema::ProtocolVersion;
    use agent_client_protocol::v1::schema::{
        ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification, StopReason, TextContent,
    };
    use agent_client_protocol_http::HttpClient;

    let transport = HttpClient::builder_with_endpoint(url).configure_http(|h| h.no_proxy()).build().expect("client");
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let (elapsed, meter) = Client
        .v1()
        .name("bench-client")
        .on_receive_notification(
            async move |update: SessionNotification, _cx| {
                std::hint::black_box(&update);
                seen2.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(transport, async |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            let session = cx.send_request(NewSessionRequest::new("/")).block_task().await?.session_id;
            let prompt =
                |n: u64| PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new(n.to_string()))]);
            cx.send_request(prompt(WARMUP)).block_task().await?;
            while seen.load(Ordering::Relaxed) < WARMUP {
                tokio::task::yield_now().await;
            }
            let meter = run.meter();
            let t0 = Instant::now();
            let answer = cx.send_request(prompt(n)).block_task().await?;
            // Over HTTP the answer and the updates may come on different streams: wait for all.
            while seen.load(Ordering::Relaxed) < WARMUP + n {
                tokio::task::yield_now().await;
            }
            let elapsed = t0.elapsed();
            assert_eq!(answer.stop_reason, StopReason::EndTurn);
            Ok((elapsed, meter))
        })
        .await
        .expect("client connection");
    run.print("official", elapsed, meter);
}

/// The raw client: the load generator's WebSocket frames (`load.rs`) on `ws://`, SSE read by
/// hand (`raw_sse.rs`) on `http://`. It counts each update by a substring instead of decoding
/// it, so that it takes as little of the machine as possible: how fast a server can send.
pub async fn raw(run: Run<'_>) {
    if profile(run.url) == "sse" {
        return raw_sse(run).await;
    }
    use crate::load;
    let addr = load::server_addr(run.url).expect("a ws:// url");
    let (mut ws, session) = load::open(run.url, addr, 1).await.expect("connect");
    let updates = AtomicU64::new(0);
    let warm_up = load::prompt(2, &session, &WARMUP.to_string());
    load::call(&mut ws, 2, &warm_up, Some(&updates)).await.expect("warm-up turn");
    let meter = run.meter();
    let t0 = Instant::now();
    load::call(&mut ws, 3, &load::prompt(3, &session, &run.n.to_string()), Some(&updates)).await.expect("prompt");
    let elapsed = t0.elapsed();
    assert_eq!(updates.load(Ordering::Relaxed), WARMUP + run.n, "updates lost");
    run.print("raw", elapsed, meter);
}

/// The raw client over Streamable HTTP (`raw_sse.rs`).
async fn raw_sse(run: Run<'_>) {
    let mut session = crate::raw_sse::Session::open(run.url).await.expect("connect");
    let updates = AtomicU64::new(0);
    session.prompt(2, &WARMUP.to_string(), &updates).await.expect("warm-up turn");
    let meter = run.meter();
    let t0 = Instant::now();
    session.prompt(3, &run.n.to_string(), &updates).await.expect("prompt");
    let elapsed = t0.elapsed();
    assert_eq!(updates.load(Ordering::Relaxed), WARMUP + run.n, "updates lost");
    run.print("raw", elapsed, meter);
    session.close().await;
}
