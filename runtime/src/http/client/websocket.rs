//! The WebSocket profile: the handshake (TLS too with `http-tls`) and one socket carrying both
//! directions, with keep-alive pings and the close handshake.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::header::{COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::http::{CONNECTION_ID_HEADER, one_line};

use super::delivery::{Delivery, read_received};
use super::live::{Endpoint, Limits};
use super::streamable::{describe_error, keep_alive};
#[cfg(feature = "http-tls")]
use super::tls;
use super::{ConnectError, CookieJar, ERROR_BODY_LIMIT};

#[cfg(not(feature = "http-tls"))]
pub(super) type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;
#[cfg(feature = "http-tls")]
pub(super) type Socket = tokio_tungstenite::WebSocketStream<tls::MaybeTls>;

/// How the WebSocket's connection is made.
pub(super) struct Connect {
    /// For the TCP connection (and the TLS handshake, each).
    pub(super) timeout: Duration,
    /// `wss://`: the TLS settings.
    #[cfg(feature = "http-tls")]
    pub(super) tls: Option<tls::Tls>,
}

/// Connects (TCP, then TLS for `wss://`) and upgrades; returns the socket and the server's
/// `Acp-Connection-Id`.
pub(super) async fn ws_handshake(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    jar: &CookieJar,
    connect: Connect,
    limits: &Limits,
) -> Result<(Socket, Option<String>), ConnectError> {
    let server = endpoint.server.clone();
    let connect_timeout = connect.timeout;
    let tcp =
        tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port)))
            .await
            .map_err(|_| ConnectError::Timeout { server: server.clone(), after: connect_timeout })?
            .map_err(|source| ConnectError::Io { server: server.clone(), source })?;
    let _ = tcp.set_nodelay(true);
    keep_alive(&tcp);
    #[cfg(feature = "http-tls")]
    let tcp = match &connect.tls {
        None => tls::MaybeTls::Plain(tcp),
        Some(tls) => match tls.handshake(&endpoint.host, tcp).await {
            Ok(stream) => tls::MaybeTls::Tls(Box::new(stream)),
            Err(e) => return Err(ConnectError::Tls { server, reason: e.to_string() }),
        },
    };
    let mut request =
        endpoint.uri.clone().into_client_request().map_err(|e| ConnectError::Handshake(describe_error(&e)))?;
    request.headers_mut().extend(headers.clone());
    if let Some(cookies) = jar.header_for(&server) {
        let value = HeaderValue::from_str(&cookies).map_err(|e| ConnectError::Handshake(e.to_string()))?;
        request.headers_mut().insert(COOKIE, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes));
    let handshake = tokio_tungstenite::client_async_with_config(request, tcp, Some(config));
    let (socket, response) = match tokio::time::timeout(limits.request_timeout, handshake).await {
        Err(_) => return Err(ConnectError::Timeout { server, after: limits.request_timeout }),
        Ok(Ok(done)) => done,
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            for value in response.headers().get_all(SET_COOKIE) {
                if let Ok(value) = value.to_str() {
                    jar.store(&server, value);
                }
            }
            let body = response.body().as_deref().unwrap_or_default();
            let end = body.len().min(ERROR_BODY_LIMIT);
            let body = String::from_utf8_lossy(&body[..end]).into_owned();
            return Err(ConnectError::Refused { status: response.status().as_u16(), body });
        }
        Ok(Err(e)) => return Err(ConnectError::Handshake(describe_error(&e))),
    };
    for value in response.headers().get_all(SET_COOKIE) {
        if let Ok(value) = value.to_str() {
            jar.store(&server, value);
        }
    }
    let connection_id = response.headers().get(CONNECTION_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    Ok((socket, connection_id))
}

/// Carries the WebSocket both ways: its frames to the connection, and the connection's output
/// as frames. The two directions run side by side and never wait on each other. A loop that
/// waited to send while it read nothing, or to hand a frame over while it took no output,
/// stopped for good once the server did the same, or once the connection had to answer what
/// it was handed (its answers drain only through here).
pub(super) async fn run_websocket(
    socket: Socket,
    mut lines: mpsc::Receiver<Vec<u8>>,
    delivery: Delivery,
    limits: Limits,
) {
    let (mut sink, mut stream) = socket.split();
    let outgoing = async {
        while let Some(line) = lines.recv().await {
            // What is waiting goes out in one flush.
            let mut next = Some(line);
            while let Some(line) = next {
                let text = String::from_utf8_lossy(&line).into_owned();
                if let Err(e) = sink.feed(Message::text(text)).await {
                    return Some(format!("cannot send on the WebSocket: {}", describe_error(&e)));
                }
                next = lines.try_recv().ok();
            }
            if let Err(e) = sink.flush().await {
                return Some(format!("cannot send on the WebSocket: {}", describe_error(&e)));
            }
        }
        // The connection ended: no reason to report.
        None
    };
    let incoming = async {
        // Far enough to never fire when there is no idle limit.
        let idle_limit = limits.idle_timeout.unwrap_or(Duration::from_secs(86_400 * 365));
        loop {
            let frame = tokio::select! {
                frame = stream.next() => frame,
                () = tokio::time::sleep(idle_limit) => return Some(format!("nothing received for {idle_limit:?}")),
            };
            match frame {
                None => return Some("the server closed the socket".to_owned()),
                Some(Err(e)) => return Some(format!("WebSocket error: {}", describe_error(&e))),
                Some(Ok(Message::Text(text))) => {
                    let data = text.as_bytes();
                    // A WebSocket carries JSON-RPC as stdio does, batches included (a v2
                    // agent answers a batch with an array): the connection judges arrays.
                    let batch = data.trim_ascii_start().starts_with(b"[");
                    if (batch || read_received(data, "a WebSocket frame").is_some())
                        && !delivery.line(one_line(data.to_vec())).await
                    {
                        return None;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let why = frame.map_or_else(String::new, |f| format!(" ({} {})", u16::from(f.code), f.reason));
                    return Some(format!("the server closed the WebSocket{why}"));
                }
                // Binary frames are ignored (the RFD says so); tungstenite answers pings.
                Some(Ok(_)) => {}
            }
        }
    };
    let ended = tokio::select! {
        ended = outgoing => ended,
        ended = incoming => ended,
    };
    if let Some(reason) = ended {
        delivery.end(reason).await;
    }
    // Our Close, and the server's in return, within the close timeout.
    let goodbye = async {
        let _ = sink.close().await;
        while let Some(Ok(_)) = stream.next().await {}
    };
    let _ = tokio::time::timeout(limits.close_timeout, goodbye).await;
    delivery.status.finished.cancel();
}
