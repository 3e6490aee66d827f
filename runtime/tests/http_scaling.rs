//! Scaling out: two of our HTTP servers (two processes in a real deployment, two servers in
//! this test process) behind a cookie-affine load balancer written here (a plain HTTP/1.1
//! reverse proxy on hyper, WebSocket upgrades included). Our client connects through it over
//! Streamable HTTP and over WebSocket, and the test shows that every HTTP request of one ACP
//! connection reaches the backend its affinity cookie names (seen from the balancer and from
//! the backends), that new clients are spread over both backends, that `Remote::reconnect`
//! with the old cookie jar finds its session again, and what a request that lost its affinity
//! gets: the documented 404 for an unknown connection. The README's "Scaling out" section
//! describes the deployment this models.
#![cfg(all(feature = "http-server", feature = "http-client"))]

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::http::client::{CookieJar, Profile, Reattached, ReconnectError, Remote};
use acp_rpc::http::server::HttpServer;
use acp_rpc::{AgentContext, acp_agent, acp_client};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The balancer's affinity cookie.
const AFFINITY: &str = "acp-backend";
/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn text_block(text: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

// ---- the backends ---------------------------------------------------------------------------

/// The agent of one backend: it names its backend in `agentInfo` and in what it streams, and
/// keeps its sessions in the backend process (shared by the agent values of all its
/// connections), as a real agent keeps them in its own memory or disk.
#[derive(Clone)]
struct BackendAgent {
    backend: &'static str,
    sessions: Arc<Mutex<HashSet<String>>>,
    made: Arc<AtomicU64>,
}

impl BackendAgent {
    fn known(&self, session: &SessionId) -> Result<(), Error> {
        if lock(&self.sessions).contains(&session.0.to_string()) {
            Ok(())
        } else {
            Err(Error::resource_not_found()
                .data(serde_json::json!(format!("no session {} on {}", session.0, self.backend))))
        }
    }
}

#[acp_agent]
impl BackendAgent {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V1).agent_info(Implementation::new(self.backend, "1.0.0")))
    }

    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }

    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let id = format!("{}-{}", self.backend, self.made.fetch_add(1, Ordering::Relaxed));
        lock(&self.sessions).insert(id.clone());
        Ok(NewSessionResponse::new(id))
    }

    async fn session_load(&self, params: LoadSessionRequest, cx: AgentContext) -> Result<LoadSessionResponse, Error> {
        self.known(&params.session_id)?;
        let replay =
            SessionUpdate::UserMessageChunk(ContentChunk::new(text_block(&format!("replayed on {}", self.backend))));
        cx.client().session_update(SessionNotification::new(params.session_id, replay)).await?;
        Ok(LoadSessionResponse::new())
    }

    /// `hello`: two chunks around a permission request; `wait`: one chunk, then waits for
    /// `session/cancel`.
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        self.known(&params.session_id)?;
        let session = params.session_id.clone();
        let say = |text: String| {
            let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(text_block(&text)));
            cx.client().session_update(SessionNotification::new(session.clone(), chunk))
        };
        match params.prompt.first() {
            Some(ContentBlock::Text(t)) if t.text == "wait" => {
                say(format!("waiting on {}", self.backend)).await?;
                cx.cancelled().await;
                Ok(PromptResponse::new(StopReason::Cancelled))
            }
            _ => {
                say(format!("hello from {}", self.backend)).await?;
                let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
                let ask = RequestPermissionRequest::new(session.clone(), ToolCallUpdate::new("call_1"), options);
                let answer = cx.client().request_permission(ask).await?;
                let allowed =
                    matches!(&answer.outcome, RequestPermissionOutcome::Selected(s) if s.option_id.0 == "allow");
                say(format!("allowed={allowed} on {}", self.backend)).await?;
                Ok(PromptResponse::new(StopReason::EndTurn))
            }
        }
    }

    async fn session_cancel(&self, _: CancelNotification) {}
}

/// One HTTP request as a backend saw it (through the server's authentication hook, which
/// sees every request, the WebSocket upgrade included).
#[derive(Clone, Debug)]
struct Hit {
    method: String,
    connection: Option<String>,
}

struct Backend {
    name: &'static str,
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Backend {
    async fn start(name: &'static str) -> Backend {
        let agent = BackendAgent { backend: name, sessions: Arc::default(), made: Arc::default() };
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let seen = hits.clone();
        let server = HttpServer::agent(move || agent.clone()).authenticate(move |parts| {
            let connection = header_text(&parts.headers, "acp-connection-id");
            lock(&seen).push(Hit { method: parts.method.to_string(), connection });
            Ok(())
        });
        let bound = server.bind("127.0.0.1:0").await.expect("bind a backend");
        let addr = bound.local_addr();
        tokio::spawn(bound.run());
        Backend { name, addr, hits }
    }

    /// The requests this backend saw for connection `id`.
    fn hits_of(&self, id: &str) -> Vec<Hit> {
        lock(&self.hits).iter().filter(|h| h.connection.as_deref() == Some(id)).cloned().collect()
    }
}

// ---- the load balancer ----------------------------------------------------------------------

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// One request as the balancer routed it.
#[derive(Clone, Debug)]
struct Routed {
    method: String,
    upgrade: bool,
    /// The request's `Acp-Connection-Id`.
    connection_sent: Option<String>,
    /// The `Acp-Connection-Id` of the answer (`initialize`, the WebSocket's 101).
    connection_given: Option<String>,
    session: Option<String>,
    /// The affinity cookie the request carried.
    cookie: Option<String>,
    backend: &'static str,
    /// Whether the balancer set the affinity cookie on the answer.
    set_cookie: bool,
    status: u16,
}

impl Routed {
    fn connection(&self) -> Option<&str> {
        self.connection_sent.as_deref().or(self.connection_given.as_deref())
    }
}

/// A cookie-affine reverse proxy: a request without a valid affinity cookie goes to the next
/// backend in turn, and its answer sets the cookie; a request with the cookie goes to the
/// backend it names. What HAProxy's `cookie SERVERID insert` does.
struct Balancer {
    backends: Vec<(&'static str, SocketAddr)>,
    next: AtomicUsize,
    log: Mutex<Vec<Routed>>,
}

impl Balancer {
    async fn start(backends: &[Backend]) -> (SocketAddr, Arc<Balancer>) {
        let balancer = Arc::new(Balancer {
            backends: backends.iter().map(|b| (b.name, b.addr)).collect(),
            next: AtomicUsize::new(0),
            log: Mutex::default(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the balancer");
        let addr = listener.local_addr().expect("address");
        let serving = balancer.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let balancer = serving.clone();
                let service = hyper::service::service_fn(move |req| balancer.clone().route(req));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades(),
                );
            }
        });
        (addr, balancer)
    }

    fn log(&self) -> Vec<Routed> {
        lock(&self.log).clone()
    }

    async fn route(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
        let cookie = affinity_cookie(req.headers());
        let (backend, addr, set_cookie) = match self.backends.iter().find(|(name, _)| Some(*name) == cookie.as_deref())
        {
            Some((name, addr)) => (*name, *addr, false),
            None => {
                let (name, addr) = self.backends[self.next.fetch_add(1, Ordering::Relaxed) % self.backends.len()];
                (name, addr, true)
            }
        };
        let upgrade = req.headers().get(header::UPGRADE).is_some();
        let mut entry = Routed {
            method: req.method().to_string(),
            upgrade,
            connection_sent: header_text(req.headers(), "acp-connection-id"),
            connection_given: None,
            session: header_text(req.headers(), "acp-session-id"),
            cookie,
            backend,
            set_cookie,
            status: 0,
        };
        let mut response = match forward(req, addr, upgrade).await {
            Ok(response) => response,
            Err(reason) => {
                let mut response = Response::new(Full::new(Bytes::from(reason)).map_err(|n| match n {}).boxed());
                *response.status_mut() = StatusCode::BAD_GATEWAY;
                response
            }
        };
        entry.connection_given = header_text(response.headers(), "acp-connection-id");
        entry.status = response.status().as_u16();
        if set_cookie {
            let value = HeaderValue::from_str(&format!("{AFFINITY}={backend}; Path=/; HttpOnly")).expect("cookie");
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        lock(&self.log).push(entry);
        Ok(response)
    }
}

/// The affinity cookie's value, from any `Cookie` header of the request.
fn affinity_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == AFFINITY)
        .map(|(_, value)| value.to_owned())
}

/// Headers that belong to one hop, not to the request (RFC 9110 §7.6.1), except on an upgrade,
/// where `Connection: upgrade` and `Upgrade` must reach the backend.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"] {
        headers.remove(name);
    }
}

/// Sends `req` to the backend on a connection of its own and streams the answer back (SSE
/// included); a 101 joins the two upgraded connections byte for byte.
async fn forward(
    mut req: Request<Incoming>,
    backend: SocketAddr,
    upgrade: bool,
) -> Result<Response<ProxyBody>, String> {
    let tcp = TcpStream::connect(backend).await.map_err(|e| format!("cannot reach the backend: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, ProxyBody>(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("backend handshake: {e}"))?;
    tokio::spawn(connection.with_upgrades());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    if !upgrade {
        strip_hop_by_hop(&mut parts.headers);
    }
    parts.headers.insert(header::HOST, HeaderValue::from_str(&backend.to_string()).expect("host"));
    let body = if upgrade { Empty::new().map_err(|n| match n {}).boxed() } else { body.boxed() };
    let mut response =
        sender.send_request(Request::from_parts(parts, body)).await.map_err(|e| format!("backend request: {e}"))?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let backend_side = hyper::upgrade::on(&mut response);
        if let Some(client_side) = client_side {
            tokio::spawn(async move {
                if let (Ok(client), Ok(backend)) = tokio::join!(client_side, backend_side) {
                    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut TokioIo::new(backend)).await;
                }
            });
        }
        let (parts, _) = response.into_parts();
        return Ok(Response::from_parts(parts, Empty::new().map_err(|n| match n {}).boxed()));
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, body.boxed()))
}

// ---- the client -----------------------------------------------------------------------------

/// A client that allows every permission request and reports the texts it is sent.
struct Probe {
    texts: mpsc::UnboundedSender<String>,
}

#[acp_client]
impl Probe {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        let _ = self.texts.send(format!("permission asked in {}", params.session_id.0));
        let allow = SelectedPermissionOutcome::new("allow");
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Selected(allow)))
    }

    async fn session_update(&self, params: SessionNotification) {
        let text = match &params.update {
            SessionUpdate::AgentMessageChunk(chunk) | SessionUpdate::UserMessageChunk(chunk) => match &chunk.content {
                ContentBlock::Text(t) => t.text.clone(),
                _ => return,
            },
            _ => return,
        };
        let _ = self.texts.send(text);
    }
}

fn probe() -> (Probe, mpsc::UnboundedReceiver<String>) {
    let (texts, rx) = mpsc::unbounded_channel();
    (Probe { texts }, rx)
}

/// What one ACP connection through the balancer found.
#[derive(Debug)]
struct Outcome {
    profile: Profile,
    /// The backend, as its agent named itself in `agentInfo`.
    backend: String,
    connection: String,
    session: SessionId,
    jar: CookieJar,
}

/// One ACP connection through the balancer at `url`, its own cookie jar: initialize,
/// session/new, a prompt with updates and a permission request, a prompt cancelled midway,
/// then close (DELETE, or the WebSocket's Close).
async fn one_connection(url: String) -> Outcome {
    let jar = CookieJar::new();
    let (client, mut texts) = probe();
    let (agent, remote) = within("connect", Remote::new(url.as_str()).cookie_jar(jar.clone()).connect(client))
        .await
        .expect("connect through the balancer");
    let init = within("initialize", agent.initialize(InitializeRequest::new(ProtocolVersion::V1))).await.expect("init");
    let backend = init.agent_info.value().expect("agentInfo names the backend").name.clone();
    let session = within("session/new", agent.new_session(NewSessionRequest::new("/tmp", Vec::new())))
        .await
        .expect("session/new")
        .session_id;
    assert!(session.0.starts_with(&backend), "{session:?} from {backend}");

    let done = within("prompt", agent.prompt(PromptRequest::new(session.clone(), vec![text_block("hello")])))
        .await
        .expect("prompt");
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    let seen: Vec<String> = std::iter::from_fn(|| texts.try_recv().ok()).collect();
    let expected = [
        format!("hello from {backend}"),
        format!("permission asked in {}", session.0),
        format!("allowed=true on {backend}"),
    ];
    assert_eq!(seen, expected, "the prompt's updates and permission request, in order");

    let waiting = tokio::spawn({
        let agent = agent.clone();
        let prompt = PromptRequest::new(session.clone(), vec![text_block("wait")]);
        async move { agent.prompt(prompt).await }
    });
    let first = within("the waiting prompt's update", texts.recv()).await;
    assert_eq!(first.as_deref(), Some(format!("waiting on {backend}").as_str()));
    agent.cancel(CancelNotification::new(session.clone())).await.expect("session/cancel");
    let cancelled = within("the cancelled prompt", waiting).await.expect("task").expect("prompt");
    assert_eq!(cancelled.stop_reason, StopReason::Cancelled);

    let profile = remote.profile();
    let connection = remote.connection_id().expect("a connection id");
    within("close", remote.close()).await.expect("close");
    Outcome { profile, backend, connection, session, jar }
}

/// Checks that every request of `outcome`'s connection went to its backend, seen from both
/// sides, and that the cookie the balancer set is the one the client kept and sent back.
fn check_affinity(outcome: &Outcome, lb: &Balancer, lb_addr: SocketAddr, backends: &[Backend]) {
    let id = outcome.connection.as_str();
    let routed: Vec<Routed> = lb.log().into_iter().filter(|r| r.connection() == Some(id)).collect();
    let described = format!("{outcome:?}\n{routed:#?}");
    assert!(!routed.is_empty(), "{described}");
    assert!(routed.iter().all(|r| r.backend == outcome.backend), "every request on one backend: {described}");
    // The jar keeps the cookie per origin (the balancer's host:port).
    assert_eq!(outcome.jar.get(&lb_addr.to_string(), AFFINITY).as_deref(), Some(outcome.backend.as_str()));
    // Only the request that created the connection came without the cookie, and its answer
    // set it; every later one carried it.
    let (first, rest) = routed.split_first().expect("requests");
    assert!(first.cookie.is_none() && first.set_cookie && first.connection_sent.is_none(), "{described}");
    assert!(rest.iter().all(|r| r.cookie.as_deref() == Some(outcome.backend.as_str()) && !r.set_cookie), "{described}");
    let lines: Vec<String> = routed
        .iter()
        .map(|r| {
            let scope = if r.session.is_some() { " session" } else { "" };
            format!("{}{}{scope} {}", r.method, if r.upgrade { " upgrade" } else { "" }, r.status)
        })
        .collect();
    match outcome.profile {
        Profile::WebSocket => assert_eq!(lines, ["GET upgrade 101"], "{described}"),
        _ => {
            // initialize first and DELETE last; between them (in an order the network may
            // shuffle a little) the connection stream, session/new, the session stream, the
            // first prompt and our answer to its permission request, the second prompt and
            // its cancel.
            let (first, middle) = lines.split_first().expect("requests");
            let (last, middle) = middle.split_last().expect("requests");
            assert_eq!((first.as_str(), last.as_str()), ("POST 200", "DELETE 202"), "{described}");
            let mut middle = middle.to_vec();
            middle.sort();
            let expected = [
                "GET 200",
                "GET session 200",
                "POST 202",
                "POST session 202",
                "POST session 202",
                "POST session 202",
                "POST session 202",
            ];
            assert_eq!(middle, expected, "{described}");
            let sessions: HashSet<_> = routed.iter().filter_map(|r| r.session.as_deref()).collect();
            assert_eq!(sessions, HashSet::from([outcome.session.0.as_ref()]), "{described}");
        }
    }
    // The backends agree: the chosen one saw every request that carried the connection id
    // (the WebSocket's upgrade carries none: its 101 gives it), the other saw none.
    for backend in backends {
        let hits = backend.hits_of(id);
        if backend.name == outcome.backend {
            let mut sent: Vec<&str> =
                routed.iter().filter(|r| r.connection_sent.is_some()).map(|r| r.method.as_str()).collect();
            let mut seen: Vec<&str> = hits.iter().map(|h| h.method.as_str()).collect();
            sent.sort_unstable();
            seen.sort_unstable();
            assert_eq!(seen, sent, "{} saw {hits:?}\n{described}", backend.name);
        } else {
            assert!(hits.is_empty(), "{} saw {hits:?}\n{described}", backend.name);
        }
    }
}

async fn start_backends() -> Vec<Backend> {
    vec![Backend::start("alpha").await, Backend::start("beta").await]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_a_connection_reaches_the_backend_its_cookie_names() {
    let backends = start_backends().await;
    let (lb_addr, lb) = Balancer::start(&backends).await;
    // Four clients at once, two per profile: the balancer spreads the new connections.
    let urls = [
        format!("http://{lb_addr}/acp"),
        format!("ws://{lb_addr}/acp"),
        format!("http://{lb_addr}/acp"),
        format!("ws://{lb_addr}/acp"),
    ];
    let tasks: Vec<_> = urls.into_iter().map(|url| tokio::spawn(one_connection(url))).collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(within("a client", task).await.expect("client task"));
    }
    for outcome in &outcomes {
        check_affinity(outcome, &lb, lb_addr, &backends);
    }
    let used: HashSet<&str> = outcomes.iter().map(|o| o.backend.as_str()).collect();
    assert_eq!(used, HashSet::from(["alpha", "beta"]), "{outcomes:#?}");
    let profiles: HashSet<_> = outcomes.iter().map(|o| format!("{:?}", o.profile)).collect();
    assert_eq!(profiles.len(), 2, "{outcomes:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_reattached_on_the_backend_the_old_cookie_names_and_only_there() {
    let backends = start_backends().await;
    let (lb_addr, lb) = Balancer::start(&backends).await;
    for scheme in ["http", "ws"] {
        let url = format!("{scheme}://{lb_addr}/acp");
        let first = one_connection(url.clone()).await;

        // The old jar: the balancer sends the new connection to the same backend, whose
        // agent still holds the session.
        let (client, mut texts) = probe();
        let load = LoadSessionRequest::new(first.session.clone(), Vec::new(), "/tmp");
        let reconnect = Remote::new(url.as_str()).cookie_jar(first.jar.clone()).reconnect(
            client,
            InitializeRequest::new(ProtocolVersion::V1),
            load.clone(),
        );
        let again = within("reconnect", reconnect).await.expect("reconnect with the old cookie");
        assert!(matches!(again.session, Reattached::Loaded(_)), "{:?}", again.session);
        assert_eq!(again.init.agent_info.value().map(|i| i.name.as_str()), Some(first.backend.as_str()));
        assert_eq!(texts.try_recv().ok(), Some(format!("replayed on {}", first.backend)));
        let done =
            within("prompt", again.agent.prompt(PromptRequest::new(first.session.clone(), vec![text_block("hello")])))
                .await
                .expect("the session goes on");
        assert_eq!(done.stop_reason, StopReason::EndTurn);
        let second = again.remote.connection_id().expect("id");
        within("close", again.remote.close()).await.expect("close");
        let routed: Vec<Routed> = lb.log().into_iter().filter(|r| r.connection() == Some(second.as_str())).collect();
        assert!(!routed.is_empty() && routed.iter().all(|r| r.backend == first.backend), "{routed:#?}");
        assert!(routed.iter().all(|r| r.cookie.as_deref() == Some(first.backend.as_str())), "{routed:#?}");

        // A cookie naming the other backend (affinity lost): the connection is made there,
        // and that process has no such session, which the agent says.
        let other = if first.backend == "alpha" { "beta" } else { "alpha" };
        let jar = CookieJar::new();
        jar.store(&lb_addr.to_string(), &format!("{AFFINITY}={other}"));
        let (client, _texts) = probe();
        let reconnect = Remote::new(url.as_str()).cookie_jar(jar).reconnect(
            client,
            InitializeRequest::new(ProtocolVersion::V1),
            load,
        );
        match within("reconnect elsewhere", reconnect).await {
            Err(ReconnectError::Call { step: "session/load", source: acp_rpc::Error::Rpc(error) }) => {
                assert_eq!(error.code, acp_rpc::codes::RESOURCE_NOT_FOUND, "{error:?}");
                let why = format!("no session {} on {other}", first.session.0);
                assert_eq!(error.data, Some(serde_json::json!(why)), "{error:?}");
            }
            other => panic!("expected session/load to fail on {other:?}"),
        }
    }
}

/// A raw request: `method` to `addr` with the connection id and no cookie.
async fn raw(addr: SocketAddr, method: &str, connection: &str, body: &'static str) -> (StatusCode, String) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp)).await.expect("handshake");
    tokio::spawn(conn);
    let mut request = Request::builder()
        .method(method)
        .uri("/acp")
        .header(header::HOST, addr.to_string())
        .header("acp-connection-id", connection);
    request = match method {
        "POST" => request.header(header::CONTENT_TYPE, "application/json"),
        _ => request.header(header::ACCEPT, "text/event-stream"),
    };
    let response =
        sender.send_request(request.body(Full::new(Bytes::from(body))).expect("request")).await.expect("send");
    let status = response.status();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_reaches_the_other_backend_gets_the_unknown_connection_answer() {
    let backends = start_backends().await;
    let (lb_addr, _lb) = Balancer::start(&backends).await;
    let jar = CookieJar::new();
    let (client, _texts) = probe();
    let (agent, remote) =
        Remote::new(format!("http://{lb_addr}/acp")).cookie_jar(jar.clone()).connect(client).await.expect("connect");
    let init = within("initialize", agent.initialize(InitializeRequest::new(ProtocolVersion::V1))).await.expect("init");
    let home = init.agent_info.value().expect("agentInfo").name.clone();
    let session = within("session/new", agent.new_session(NewSessionRequest::new("/tmp", Vec::new())))
        .await
        .expect("session/new")
        .session_id;
    let id = remote.connection_id().expect("id");
    let home_addr = backends.iter().find(|b| b.name == home).expect("home").addr;
    let other = backends.iter().find(|b| b.name != home).expect("the other backend");

    // The same connection id, no cookie, at the other process: it has never heard of it. The
    // answer is the routing table's 404 (which ends our client's connection, as any 404 does).
    let note = r#"{"jsonrpc":"2.0","method":"_probe/note","params":{}}"#;
    let list = r#"{"jsonrpc":"2.0","id":7,"method":"session/list","params":{}}"#;
    for (method, body) in [("POST", list), ("GET", ""), ("DELETE", "")] {
        let (status, text) = within("raw request", raw(other.addr, method, &id, body)).await;
        assert_eq!((status, text.trim()), (StatusCode::NOT_FOUND, "unknown Acp-Connection-Id"), "{method}");
    }
    // At the process that holds it, the same request is served: affinity is what is needed.
    let (status, _) = within("raw request", raw(home_addr, "POST", &id, note)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The connection is unharmed by the stray requests.
    let done =
        within("prompt", agent.prompt(PromptRequest::new(session, vec![text_block("hello")]))).await.expect("prompt");
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    within("close", remote.close()).await.expect("close");
}
