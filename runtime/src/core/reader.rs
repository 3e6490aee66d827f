//! The read loop: each decoded line goes to its pending call (a response), to a task of its
//! own (a request; held in the [backlog](crate::core::backlog) beyond the task bounds, or
//! refused once that is full; see the overload section of [`crate::connection`]) or to the
//! ordered notification queue; bad input is answered here.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::AsyncRead;
use tokio::sync::{Semaphore, mpsc};

use crate::core::backlog::{Backlog, Held};
use crate::core::batch::{BatchReply, ReplyTo};
use crate::core::error::Error;
use crate::core::framing::{Frame, LineReader};
use crate::core::handler::{DynHandler, IncomingRequest};
use crate::core::jsonrpc::{self, DecodeErrorKind, ErrorObject, Id, Message};
use crate::core::methods::{self, RequestKind, session_id_of};
use crate::core::notifications::Queued;
use crate::core::peer::Peer;
use crate::core::requests::{QueuedRequest, Run, Slot, finish, spawn_request};
use crate::core::state::{InFlight, Options, Reply, Shared, lock_backlog, lock_inflight};
use crate::core::tasks::RequestTasks;
use crate::core::watch::Watch;
use crate::core::writer::{TapIn, tap_in};

pub(crate) struct Reader {
    options: Options,
    shared: Arc<Shared>,
    handler: Arc<dyn DynHandler>,
    notifications: mpsc::Sender<Queued>,
    /// Notifications queued so far; a response is delivered once this many are handled.
    queued: u64,
    /// Requests with a task (running or waiting): `max_concurrent_requests + max_queued_requests`.
    admitted: Arc<Semaphore>,
    /// Handler slots: `max_concurrent_requests`.
    running: Arc<Semaphore>,
    tasks: RequestTasks,
}

impl Reader {
    pub(crate) fn new(
        options: Options,
        shared: Arc<Shared>,
        handler: Arc<dyn DynHandler>,
        notifications: mpsc::Sender<Queued>,
        tasks: RequestTasks,
    ) -> Self {
        Reader {
            options,
            admitted: shared.load.admitted.clone(),
            running: shared.load.running.clone(),
            shared,
            handler,
            notifications,
            queued: 0,
            tasks,
        }
    }

    /// Reads until end of input (`Ok`) or a read error.
    pub(crate) async fn run(&mut self, reader: Box<dyn AsyncRead + Send + Unpin>) -> std::io::Result<()> {
        let mut lines = LineReader::new(reader, self.options.max_line_bytes);
        while let Some(frame) = lines.next_frame().await? {
            match frame {
                Frame::Line(line) => self.dispatch(line).await,
                Frame::Oversized { len } => {
                    tracing::warn!(
                        len,
                        limit = self.options.max_line_bytes,
                        "acp connection: oversized message discarded"
                    );
                    tap_in(&self.shared.out, TapIn::Oversized(len)).await;
                    let error = ErrorObject::invalid_request(format_args!(
                        "message of {len} bytes exceeds the limit of {} bytes",
                        self.options.max_line_bytes
                    ));
                    self.answer(&Id::Null, Err(&error)).await;
                    self.bad_input_seen();
                }
            }
        }
        Ok(())
    }

    async fn dispatch(&mut self, line: &[u8]) {
        if self.shared.speaks_v2() && line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return self.dispatch_batch(line).await;
        }
        let decoded = jsonrpc::decode(line);
        if self.shared.out.tapped() {
            let item = match &decoded {
                Err(e) if e.kind == DecodeErrorKind::Parse => TapIn::Invalid(line),
                _ => TapIn::Json(line),
            };
            tap_in(&self.shared.out, item).await;
        }
        self.route(decoded, &ReplyTo::Line).await;
    }

    /// A JSON-RPC batch (protocol v2 only; see [`crate::batch`]): each entry is routed like a
    /// message of its own, and the answers go out together as one array.
    async fn dispatch_batch(&mut self, line: &[u8]) {
        let entries = std::str::from_utf8(line).ok().map(|text| (text, serde_json::from_str::<Vec<&RawValue>>(text)));
        if self.shared.out.tapped() {
            let item = match &entries {
                Some((_, Ok(_))) => TapIn::Json(line),
                _ => TapIn::Invalid(line),
            };
            tap_in(&self.shared.out, item).await;
        }
        let entries = match entries {
            Some((_, Ok(entries))) => entries,
            Some((text, Err(_))) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                // JSON, but not an array of values serde_json could hold (nested too deeply).
                let error = ErrorObject::invalid_request("batch entries nested too deeply");
                return self.answer(&Id::Null, Err(&error)).await;
            }
            _ => return self.answer(&Id::Null, Err(&ErrorObject::parse_error())).await,
        };
        if entries.is_empty() {
            tracing::warn!("acp connection: empty batch");
            return self.answer(&Id::Null, Err(&ErrorObject::invalid_request("empty batch"))).await;
        }
        let batch = Arc::new(BatchReply::new());
        let reply = ReplyTo::Batch(batch.clone());
        for entry in entries {
            self.route(jsonrpc::decode(entry.get().as_bytes()), &reply).await;
        }
        batch.routed(&self.shared.out).await;
    }

    /// Routes one decoded message (a line, or an entry of a batch).
    async fn route(&mut self, decoded: Result<Message<'_>, jsonrpc::DecodeError>, reply: &ReplyTo) {
        match decoded {
            Ok(Message::Request { id, method, params }) => self.on_request(id, method, params, reply).await,
            Ok(Message::Notification { method, params }) => self.on_notification(method, params).await,
            Ok(Message::Response { id, result }) => self.on_response(id, result.map(ToOwned::to_owned)),
            Err(e) => {
                tracing::warn!(kind = ?e.kind, reason = e.reason, id = %e.id, "acp connection: bad input");
                if e.kind == DecodeErrorKind::InvalidResponse {
                    if let Id::Number(n) = e.id {
                        self.shared.complete_call(n, Reply::Failed(Error::Protocol(e.reason)));
                    }
                }
                if let Some((id, error)) = e.answer() {
                    self.answer_to(reply, &id, Err(&error)).await;
                }
                self.bad_input_seen();
            }
        }
    }

    /// After bad input has been answered: a connection told to end on bad input ends.
    fn bad_input_seen(&self) {
        if self.options.end_on_bad_input {
            tracing::error!("acp connection: the peer sent something that is not JSON-RPC; closing the connection");
            self.shared.close();
        }
    }

    async fn answer(&self, id: &Id, result: Result<&RawValue, &ErrorObject>) {
        self.answer_to(&ReplyTo::Line, id, result).await;
    }

    /// Answers on the reader's behalf (bad input, a refused request).
    async fn answer_to(&self, reply: &ReplyTo, id: &Id, result: Result<&RawValue, &ErrorObject>) {
        match reply {
            ReplyTo::Line => {
                let mut line = Vec::with_capacity(128);
                jsonrpc::encode_response(&mut line, id, result);
                // A closed connection has nobody to answer.
                let _ = self.shared.send_line_direct(line).await;
            }
            ReplyTo::Batch(batch) => batch.answer_now(id, result),
        }
    }

    fn on_response(&mut self, id: Id, result: Result<Box<RawValue>, ErrorObject>) {
        let delivered = match &id {
            Id::Number(n) => self.shared.complete_call(*n, Reply::Response { result, barrier: self.queued }),
            Id::Null => {
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "acp connection: peer reported an error about a message of ours");
                }
                return;
            }
            // Our own calls carry integers only.
            Id::OtherNumber(_) | Id::String(_) => false,
        };
        if !delivered {
            tracing::warn!(%id, "acp connection: response to an unknown request id ignored");
        }
    }

    async fn on_notification(&mut self, method: Cow<'_, str>, params: Option<&RawValue>) {
        // A proxy's (or its conductor's) `$/cancel_request` in a successor envelope names a
        // request it sent on this connection, by its id here: it cancels that request as a
        // plain one does (which passes the cancellation on with the next hop's id). Passed on
        // as it is, it would name whatever has that id on the next hop.
        if let Some(inner) = self.options.wrapped_cancel.and_then(|find| find(&method, params)) {
            return self.on_cancel_request(inner);
        }
        match &*method {
            methods::CANCEL_REQUEST => {
                self.on_cancel_request(params);
                // Consumed by the runtime: handlers never see it.
                return;
            }
            methods::SESSION_CANCEL => {
                if let Some(session) = session_id_of(params) {
                    // Acted on here, not in the queue: cancellation must not wait behind a
                    // backlog of notifications.
                    self.shared.cancel_incoming(RequestKind::Prompt, &session);
                    self.shared.mark_turns_cancelled(&session);
                    self.shared.cancel_session_work(&session);
                    self.shared.resolve_outgoing_permissions(&session);
                }
            }
            _ => {}
        }
        self.queued += 1;
        let queued = Queued {
            method: methods::intern(&method),
            params: params.map(ToOwned::to_owned),
            seq: self.queued,
            request: None,
        };
        if self.notifications.send(queued).await.is_err() {
            // The notification task is gone (only at shutdown).
            tracing::debug!("acp connection: notification dropped, handler task has ended");
        }
    }

    fn on_cancel_request(&self, params: Option<&RawValue>) {
        // The id is read as the request's was (`parse_id`), so that a number names the request
        // written the same way (`1.50` is not `1.5`'s spelling).
        #[derive(Deserialize)]
        struct CancelParams<'a> {
            #[serde(rename = "requestId", borrow)]
            request_id: &'a RawValue,
        }
        let Some(params) = params.filter(|p| p.get().starts_with('{')) else {
            tracing::warn!("acp connection: $/cancel_request without params ignored");
            return;
        };
        let request_id = serde_json::from_str::<CancelParams<'_>>(params.get())
            .ok()
            .and_then(|p| crate::core::jsonrpc::parse_id(p.request_id));
        let Some(request_id) = request_id else {
            tracing::warn!("acp connection: $/cancel_request with invalid requestId ignored");
            return;
        };
        let mut inflight = lock_inflight(&self.shared);
        match inflight.get_mut(&request_id) {
            Some(entry) => {
                entry.by_cancel_request = true;
                entry.cancel_on_request(&request_id, &self.shared.held_cancels);
            }
            // Finished already, or never existed: nothing to do.
            None => tracing::debug!(id = %request_id, "acp connection: $/cancel_request for no in-flight request"),
        }
    }

    async fn on_request(&mut self, id: Id, method: Cow<'_, str>, params: Option<&RawValue>, reply: &ReplyTo) {
        if method == "session/close" && self.shared.speaks_v2() {
            // v2: closing a session cancels its work as `session/cancel` does. Acted on here, in
            // reading order, like `session/cancel`: a permission answer read after the close
            // must find the turn cancelled already, not race the close's handler task.
            if let Some(session) = session_id_of(params) {
                self.shared.cancel_incoming(RequestKind::Prompt, &session);
                self.shared.mark_turns_cancelled(&session);
                self.shared.cancel_session_work(&session);
                self.shared.resolve_outgoing_permissions(&session);
            }
        }
        // Never wait here: a reader waiting for a handler slot would not read the cancellation
        // or the response that handler is waiting for. A request gets a task if one is free and
        // nothing is held before it; else it joins the backlog if it fits; else it is refused.
        let admitted =
            if self.shared.load.backlog_is_empty() { self.admitted.clone().try_acquire_owned().ok() } else { None };
        let Some(admitted) = admitted else {
            return self.hold_or_refuse(id, method, params, reply).await;
        };
        let kind = RequestKind::of(&method, self.shared.speaks_v2());
        let session_id = session_id_of(params);
        let token = self.shared.closed.child_token();
        let entry = InFlight {
            token: token.clone(),
            kind,
            session: session_id.clone(),
            cancel_requested: false,
            by_cancel_request: false,
            held: false,
            turn_cancelled: false,
        };
        if !self.register(reply, &id, entry) {
            return self.refuse_duplicate(reply, &id).await;
        }
        let req = IncomingRequest {
            id,
            method: methods::intern(&method),
            params: params.map(ToOwned::to_owned),
            session_id,
            cancel: token,
            peer: Peer { shared: self.shared.clone() },
            watch: Watch::default(),
        };
        let slot = Slot::new(self.running.clone(), admitted);
        if self.options.forwarding {
            // Started (or forwarded) by the notification task, in arrival order.
            let request = QueuedRequest { req, kind, slot, reply: reply.clone(), counted: self.tasks.count() };
            let queued =
                Queued { method: Cow::Borrowed(""), params: None, seq: self.queued, request: Some(Box::new(request)) };
            if let Err(mpsc::error::SendError(queued)) = self.notifications.send(queued).await {
                // Only at shutdown: answer it as cancelled rather than not at all.
                let request = queued.request.expect("a queued request");
                let QueuedRequest { req, reply, .. } = *request;
                finish(&self.shared, req.id, Err(ErrorObject::request_cancelled()), &reply, &req.watch).await;
            }
            return;
        }
        let (grace, barrier) = (self.options.cancel_grace, self.queued);
        let run =
            Run { shared: self.shared.clone(), handler: self.handler.clone(), kind, grace, barrier, in_order: false };
        spawn_request(run, req, slot, reply.clone(), self.tasks.count());
    }

    /// Makes `id` an in-flight request; `false` if it already is one (a duplicate, to be
    /// answered with [`Router::refuse_duplicate`]). A request of a batch adds to the answers
    /// the batch waits for.
    fn register(&self, reply: &ReplyTo, id: &Id, entry: InFlight) -> bool {
        {
            let mut inflight = lock_inflight(&self.shared);
            if inflight.contains_key(id) {
                return false;
            }
            inflight.insert(id.clone(), entry);
        }
        if let ReplyTo::Batch(batch) = reply {
            batch.expect();
        }
        true
    }

    async fn refuse_duplicate(&self, reply: &ReplyTo, id: &Id) {
        tracing::warn!(%id, "acp connection: duplicate id of an in-flight request");
        let error = ErrorObject::invalid_request("duplicate id of an in-flight request");
        self.answer_to(reply, id, Err(&error)).await;
    }

    /// A request that found no free task, or requests held before it: it joins the backlog
    /// if it fits, else it is refused as overloaded.
    async fn hold_or_refuse(&mut self, id: Id, method: Cow<'_, str>, params: Option<&RawValue>, reply: &ReplyTo) {
        let cost = Backlog::cost(&id, &method, params);
        let kind = RequestKind::of(&method, self.shared.speaks_v2());
        let session_id = session_id_of(params);
        // Under the backlog's lock from its in-flight entry on, so that a cancellation that
        // finds the entry also finds it held.
        let held = {
            let mut backlog = lock_backlog(&self.shared);
            if !backlog.fits(cost, self.options.max_backlog_bytes) {
                None
            } else {
                let seq = backlog.next_seq();
                let token = self.shared.closed.child_token();
                let entry = InFlight {
                    token: token.clone(),
                    kind,
                    session: session_id.clone(),
                    cancel_requested: false,
                    by_cancel_request: false,
                    held: true,
                    turn_cancelled: false,
                };
                let registered = self.register(reply, &id, entry);
                if registered {
                    let held = Held {
                        id: id.clone(),
                        method: methods::intern(&method),
                        params: params.map(ToOwned::to_owned),
                        session_id,
                        kind,
                        token,
                        barrier: self.queued,
                        reply: reply.clone(),
                        since: Instant::now(),
                        cost,
                    };
                    backlog.hold(seq, held, &self.shared.load);
                }
                Some(registered)
            }
        };
        match held {
            Some(true) => self.shared.backlog_grew.notify_one(),
            Some(false) => self.refuse_duplicate(reply, &id).await,
            None => self.refuse_overloaded(id, &method, reply).await,
        }
    }

    /// Refuses a request that fits neither a task nor the backlog, with the overload error.
    async fn refuse_overloaded(&self, id: Id, method: &str, reply: &ReplyTo) {
        let in_flight = self.shared.load.refused();
        tracing::warn!(%id, %method, in_flight, "acp connection: overloaded; request refused");
        let (retry_after, backlog_bytes) = {
            let backlog = lock_backlog(&self.shared);
            (backlog.retry_after(), backlog.bytes())
        };
        let mut error = ErrorObject::overloaded(retry_after);
        if let Some(serde_json::Value::Object(data)) = &mut error.data {
            data.insert("inFlight".into(), in_flight.into());
            data.insert("backlogBytes".into(), backlog_bytes.into());
            data.insert("maxBacklogBytes".into(), self.options.max_backlog_bytes.into());
        }
        self.answer_to(reply, &id, Err(&error)).await;
    }
}
