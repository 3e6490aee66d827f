//! The HTTP server over TLS (feature `http-tls`): HTTPS with HTTP/2 negotiated by ALPN, and
//! WSS over HTTP/1.1, with a self-signed certificate for `localhost` / 127.0.0.1 from
//! `tests/fixtures` (valid until 2126).
#![cfg(all(feature = "http-tls", feature = "http-client"))]

use std::sync::Arc;

use acp_runtime::http::server::rustls::{self, pki_types::pem::PemObject};
use acp_runtime::http::server::{BoundServer, HttpServer};
use acp_runtime::{ErrorObject, Handler, IncomingRequest, RawValue};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const CERT: &[u8] = include_bytes!("fixtures/tls-localhost.crt");
const KEY: &[u8] = include_bytes!("fixtures/tls-localhost.key");

struct Agent;

impl Handler for Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "initialize" => {
                Ok(RawValue::from_string(json!({"protocolVersion": 1, "agentCapabilities": {}}).to_string())
                    .expect("json"))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

async fn tls_server() -> BoundServer {
    let certs = vec![CertificateDer::from_pem_slice(CERT).expect("certificate")];
    let key = PrivateKeyDer::from_pem_slice(KEY).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    HttpServer::new(|| Agent).bind("127.0.0.1:0").await.expect("bind").tls(config)
}

/// A TLS connection to `addr` trusting the fixture's certificate, offering `alpn`.
async fn connect(
    addr: std::net::SocketAddr,
    alpn: &[u8],
) -> (tokio_rustls::client::TlsStream<TcpStream>, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(CERT).expect("certificate")).expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let stream = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let negotiated = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    (stream, negotiated)
}

#[tokio::test]
async fn https_negotiates_http2_and_serves_initialize() {
    let server = tls_server().await;
    let (addr, url) = (server.local_addr(), server.url());
    assert!(url.starts_with("https://"), "{url}");
    tokio::spawn(server.run());

    let (stream, alpn) = connect(addr, b"h2").await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.expect("h2");
    tokio::spawn(connection);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).to_string();
    let request = Request::post(url.as_str())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = sender.send_request(request).await.expect("answer");
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("acp-connection-id"));
    let answer: Value =
        serde_json::from_slice(&response.into_body().collect().await.expect("body").to_bytes()).expect("json");
    assert_eq!(answer["result"]["protocolVersion"], 1);
}

#[tokio::test]
async fn wss_over_http1() {
    let server = tls_server().await;
    let addr = server.local_addr();
    let url = server.url().replacen("https://", "wss://", 1);
    tokio::spawn(server.run());

    let (stream, alpn) = connect(addr, b"http/1.1").await;
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (mut socket, response) =
        tokio_tungstenite::client_async(url.into_client_request().expect("request"), stream).await.expect("upgrade");
    assert!(response.headers().contains_key("acp-connection-id"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}});
    socket.send(Message::text(init.to_string())).await.expect("send");
    let answer = loop {
        match socket.next().await.expect("open").expect("frame") {
            Message::Text(text) => break serde_json::from_str::<Value>(&text).expect("json"),
            _ => continue,
        }
    };
    assert_eq!(answer["result"]["protocolVersion"], 1);
}

#[tokio::test]
async fn a_plain_http_client_gets_no_answer_from_a_tls_port() {
    let server = tls_server().await;
    let addr = server.local_addr();
    tokio::spawn(server.run());
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.expect("handshake");
    tokio::spawn(connection);
    let request = Request::get(format!("http://{addr}/acp"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert!(sender.send_request(request).await.is_err(), "plain HTTP must fail on the TLS port");
}
