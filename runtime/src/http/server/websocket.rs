//! The WebSocket profile: one ACP connection on an upgraded socket, messages relayed both ways
//! within the write buffer, keep-alive pings, and the close codes.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
// tokio's clock, not std's: under a paused test clock, deadlines made from std's would be
// behind tokio's, so keep-alive timers fired again at once, without end.
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::core::framing::{Frame as LineFrame, LineReader};
use crate::core::owner::Owner;
use crate::core::transport::PipeWriter;
use crate::http::one_line;

use super::ServerShared;
use super::connection::WsSlot;

/// tungstenite zero-fills its read buffer up to this size before every read, so the whole
/// buffer is resident for every open socket (its default, 128 KiB, was most of an idle
/// connection's memory). A message larger than this still gets room for all of it.
pub(super) const WS_READ_BUFFER: usize = 4 * 1024;
/// Messages read from a WebSocket and not yet written to the agent.
pub(super) const WS_INPUT_QUEUE: usize = 16;

/// Frames fed past this many bytes are written out without waiting for a flush.
pub(super) const WS_WRITE_BUFFER: usize = 16 * 1024;

/// Most messages sent in one burst (one flush) by [`send_burst`].
pub(super) const WS_BURST: usize = 64;

/// Sends `first` and the agent's further messages that are already waiting (up to
/// [`WS_BURST`] in all), then flushes once: a busy stream costs one socket write per burst
/// instead of one per message, and nothing waits for a flush. `Ok(false)` when the agent's
/// output ended meanwhile; `Err` when the socket failed, or stayed full for `stall`.
pub(super) async fn send_burst<S, R>(
    socket: &mut S,
    lines: &mut LineReader<R>,
    first: Message,
    stall: Duration,
) -> Result<bool, ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
    R: tokio::io::AsyncRead + Unpin,
{
    feed(socket, first, stall).await?;
    let mut open = true;
    for _ in 1..WS_BURST {
        // `next_frame` is cancel safe: a line read only in part stays in the reader.
        match lines.next_frame().now_or_never() {
            Some(Ok(Some(LineFrame::Line(line)))) => {
                let text = String::from_utf8_lossy(line).into_owned();
                feed(socket, Message::text(text), stall).await?;
            }
            Some(Ok(Some(LineFrame::Oversized { .. }))) => {}
            Some(Ok(None) | Err(_)) => {
                open = false;
                break;
            }
            None => break,
        }
    }
    flush(socket, stall).await?;
    Ok(open)
}

// The replies to pings go into the socket's write buffer as they are read, without waiting
// for room: a client that pings faster than it reads fills the buffer (to its bound, then the
// waiting pong is replaced by the next), and a message of ours then finds no room
// (`WriteBufferFull`, with the message handed back). `feed` and `flush` then wait for the
// buffer to drain and send that message again: the agent's output is late, never lost. A
// client that reads nothing for `stall` has its connection closed, as an SSE reader's is.

/// Feeds `message` to the socket (see above).
pub(super) async fn feed<S>(socket: &mut S, message: Message, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| socket.poll_ready_unpin(cx)).await {
            Ok(()) => return socket.start_send_unpin(message).map_err(drop),
            // The sink sends the message fed before when asked for room: that one was refused.
            Err(WsError::WriteBufferFull(earlier)) => refeed(socket, *earlier, stall).await?,
            Err(_) => return Err(()),
        }
    }
}

/// Flushes the socket (see above).
pub(super) async fn flush<S>(socket: &mut S, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| socket.poll_flush_unpin(cx)).await {
            Ok(()) => return Ok(()),
            Err(WsError::WriteBufferFull(earlier)) => refeed(socket, *earlier, stall).await?,
            Err(_) => return Err(()),
        }
    }
}

/// Waits for the write buffer to drain (nothing else is queued: the refused message was the
/// only one), then queues `refused` again, to go before anything fed after it.
pub(super) async fn refeed<S>(socket: &mut S, refused: Message, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    let drain = std::future::poll_fn(|cx| socket.poll_flush_unpin(cx));
    match tokio::time::timeout(stall, drain).await {
        Ok(Ok(())) => socket.start_send_unpin(refused).map_err(drop),
        Ok(Err(_)) => Err(()),
        Err(_) => {
            tracing::warn!("closing a WebSocket whose client stopped reading");
            Err(())
        }
    }
}

/// One ACP connection on a WebSocket: text frames in, text frames out, pings for liveness.
pub(super) async fn serve_websocket<S>(shared: &ServerShared, io: S, owner: Owner, slot: &WsSlot)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let max = shared.options.max_ws_message_bytes;
    let config = WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(WS_WRITE_BUFFER)
        // Our messages wait for room (see `feed`), but the replies to pings are buffered as
        // they are read: bounded, a client that pings and never reads cannot grow the buffer
        // past this (the pending pong is kept once, replaced by the next).
        .max_write_buffer_size(WS_WRITE_BUFFER + max + WS_WRITE_BUFFER);
    let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    // Read and written side by side: a loop that awaited its sends while it read nothing
    // stopped for good against a client doing the same, once both directions' buffers filled.
    let (mut sink, mut stream) = socket.split();
    let (from_agent, to_agent) = shared.start_agent(owner);
    let mut lines = LineReader::new(from_agent, usize::MAX >> 1);
    // The agent's input is written by a task of its own: the agent's output must keep flowing
    // while the agent is slow to read (it may itself be waiting for room to write). A frame
    // read waits for a place in the queue; while it waits, the socket is not read
    // (backpressure), and the agent's output still flows.
    let (to_writer, writer_queue) = mpsc::channel::<Vec<u8>>(WS_INPUT_QUEUE);
    let mut writer = crate::core::tasks::AbortOnDrop::spawn(write_to_agent(to_agent, writer_queue));
    let (every, stall) = (shared.options.keep_alive, shared.options.output_stall);
    let last_heard = Mutex::new(Instant::now());
    // The client's frames, to the agent's input; ends with the close frame to send, if any.
    let incoming = async {
        let mut messages = 0u32;
        loop {
            match stream.next().await {
                Some(Ok(Message::Text(text))) => {
                    *last_heard.lock().expect("lock") = Instant::now();
                    messages = messages.saturating_add(1);
                    if messages == 2 {
                        slot.used.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    if to_writer.send(one_line(text.as_bytes().to_vec())).await.is_err() {
                        // The agent's input is closed.
                        return None;
                    }
                }
                // Binary frames carry nothing in ACP (the RFD: ignored); pings are answered by
                // the socket itself.
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                    *last_heard.lock().expect("lock") = Instant::now();
                }
                Some(Ok(Message::Close(_))) | None => return None,
                Some(Err(error)) => {
                    tracing::debug!(%error, "WebSocket read failed");
                    return close_frame_for(&error);
                }
            }
        }
    };
    // The agent's output, and the pings, to the client; ends with the close frame to send.
    let outgoing = async {
        let mut ping = tokio::time::interval_at(Instant::now() + every, every);
        loop {
            tokio::select! {
                frame = lines.next_frame() => match frame {
                    Ok(Some(LineFrame::Line(line))) => {
                        let first = Message::text(String::from_utf8_lossy(line).into_owned());
                        match send_burst(&mut sink, &mut lines, first, stall).await {
                            Ok(true) => {}
                            Ok(false) => return Some(close(CloseCode::Normal, "the agent ended the connection")),
                            Err(()) => return None,
                        }
                    }
                    Ok(Some(LineFrame::Oversized { .. })) => {}
                    Ok(None) | Err(_) => return Some(close(CloseCode::Normal, "the agent ended the connection")),
                },
                _ = ping.tick() => {
                    if last_heard.lock().expect("lock").elapsed() > every * 3 {
                        tracing::debug!("closing a WebSocket that stopped answering");
                        return Some(close(CloseCode::Away, "nothing heard from the client"));
                    }
                    let ping = async {
                        feed(&mut sink, Message::Ping(Bytes::new()), stall).await?;
                        flush(&mut sink, stall).await
                    };
                    if ping.await.is_err() {
                        return None;
                    }
                }
            }
        }
    };
    let frame = tokio::select! {
        frame = incoming => frame,
        frame = outgoing => frame,
        () = shared.shutdown.cancelled() => Some(close(CloseCode::Away, "the server is shutting down")),
        () = slot.evict.cancelled() => Some(close(CloseCode::Again, "the server needed the place of an unused connection")),
    };
    // RFC 6455: a close frame with the reason's code, then the socket, without waiting long on
    // a client that does not read.
    if let Some(frame) = frame {
        let closing = async {
            let _ = sink.send(Message::Close(Some(frame))).await;
            let _ = sink.close().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), closing).await;
    }
    // End of input for the agent once what was read is written: its pending calls fail, its
    // connection ends. An agent that no longer reads gets it when the writer is dropped.
    drop(to_writer);
    let _ = tokio::time::timeout(every.max(Duration::from_secs(1)), &mut writer).await;
}

pub(super) fn close(code: CloseCode, reason: &'static str) -> CloseFrame {
    CloseFrame { code, reason: reason.into() }
}

/// The close frame for a read that failed (RFC 6455, 7.4.1), or `None` when the socket is
/// gone and nothing can be sent.
pub(super) fn close_frame_for(error: &tokio_tungstenite::tungstenite::Error) -> Option<CloseFrame> {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Capacity(_) => Some(close(CloseCode::Size, "the message is too large")),
        Error::Protocol(_) => Some(close(CloseCode::Protocol, "a WebSocket protocol error")),
        Error::Utf8(_) => Some(close(CloseCode::Invalid, "a text frame that is not UTF-8")),
        Error::WriteBufferFull(_) => Some(close(CloseCode::Policy, "the client does not read its replies")),
        _ => None,
    }
}

/// Writes the WebSocket's messages to the agent, one line each, then ends the agent's input.
pub(super) async fn write_to_agent(mut to_agent: PipeWriter, mut queue: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = queue.recv().await {
        let write = async {
            to_agent.write_all(&line).await?;
            to_agent.write_all(b"\n").await
        };
        if write.await.is_err() {
            return;
        }
    }
    let _ = to_agent.shutdown().await;
}
