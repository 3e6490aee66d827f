// The official TypeScript SDK's remote server (`AcpServer` with its node adapter) as the peer of
// tests/tests/interop_http.rs, where our HTTP/WebSocket client drives it.
//
//   PORT=0 node server.mjs      prints `LISTENING <port>`, serves `/acp` on 127.0.0.1
//
// Each ACP connection gets the SDK's protocol router with a v1 and a v2 agent. Sessions live in
// one module-global map, so they outlive connections (re-attach with session/load).
//
// v1 turn: a message chunk, a `read` tool call behind a permission request (withdrawn by
// session/cancel, which ends the turn `cancelled`), the file named in the prompt read through
// the client's fs/read_text_file when it offers it, the tool call completed with the file's
// first lines, a closing message quoting the first line, `end_turn`. A rejection fails the
// tool call. session/load replays the session's messages.
// v2 turn: the same story in v2 updates (`state_update`s, tool call upserts, idle `end_turn`).
//
// For the test, stdout gets one line per event:
//   REQ {"method","conn","sess","cookie","upgrade"}   every HTTP request, as it arrives
//   RES {"method","conn","sess","status"}             its status, once the answer is done
//   AGENT {"method","sessionId"}                      what the agents were asked
// Cookies: every answer sets `affinity=node-1`; an answer to a request without a connection
// (initialize, the WebSocket upgrade) also sets `temp=1`, which a session stream's answer
// deletes (`Max-Age=0`); the WebSocket 101 also sets `ws=1`.
import http from "node:http";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { WebSocketServer } from "ws";
import * as v1 from "@agentclientprotocol/sdk";
import * as v2 from "@agentclientprotocol/sdk/experimental/v2";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";
import { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } from "@agentclientprotocol/sdk/experimental/node";

const NAME = "ts-http-interop-agent";
const MAX_LINES = 8;
const emit = (tag, value) => console.log(`${tag} ${JSON.stringify(value)}`);
const agentLog = (method, sessionId) => emit("AGENT", { method, sessionId: sessionId ?? null });

/** sessionId -> { cwd, history: [{ kind, text }], turn?: AbortController } */
const sessions = new Map();
let counter = 0;

function sessionOf(sessionId, RequestError) {
  const session = sessions.get(sessionId);
  if (!session) throw RequestError.resourceNotFound(sessionId);
  return session;
}

function fileNamedIn(prompt) {
  const words = prompt.filter((b) => b.type === "text").flatMap((b) => b.text.split(/\s+/));
  return words.map((w) => w.replace(/^[^\w]+|[^\w]+$/g, "")).find((w) => w.includes(".")) ?? "notes.txt";
}

async function headOf(path) {
  try {
    const lines = (await readFile(path, "utf8")).split("\n");
    if (lines.at(-1) === "") lines.pop();
    return lines.slice(0, MAX_LINES).join("\n");
  } catch (e) {
    return `cannot read ${path}: ${e.message}`;
  }
}

// ---- v1 ---------------------------------------------------------------------------------------

function makeV1Agent() {
  let clientReads = false; // per connection
  return v1
    .agent({ name: NAME })
    .onRequest(v1.methods.agent.initialize, ({ params }) => {
      agentLog("initialize");
      clientReads = params.clientCapabilities?.fs?.readTextFile === true;
      return {
        protocolVersion: 1,
        agentCapabilities: { loadSession: true },
        agentInfo: { name: NAME, version: "2.4.0" },
        authMethods: [],
      };
    })
    .onRequest(v1.methods.agent.session.new, ({ params }) => {
      const sessionId = `ts-sess-${++counter}`;
      sessions.set(sessionId, { cwd: params.cwd, history: [] });
      agentLog("session/new", sessionId);
      return { sessionId };
    })
    .onRequest(v1.methods.agent.session.load, async ({ params, client }) => {
      agentLog("session/load", params.sessionId);
      const session = sessionOf(params.sessionId, v1.RequestError);
      for (const entry of session.history) {
        await client.notify(v1.methods.client.session.update, {
          sessionId: params.sessionId,
          update: { sessionUpdate: entry.kind, content: { type: "text", text: entry.text } },
        });
      }
      return {};
    })
    .onRequest(v1.methods.agent.session.prompt, async ({ params, client }) => {
      agentLog("session/prompt", params.sessionId);
      const sessionId = params.sessionId;
      const session = sessionOf(sessionId, v1.RequestError);
      const say = async (text) => {
        await client.notify(v1.methods.client.session.update, {
          sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
        });
        session.history.push({ kind: "agent_message_chunk", text });
      };
      const tool = (patch) =>
        client.notify(v1.methods.client.session.update, { sessionId, update: { sessionUpdate: "tool_call_update", ...patch } });
      const file = fileNamedIn(params.prompt);
      session.history.push({ kind: "user_message_chunk", text: params.prompt.map((b) => b.text ?? "").join("") });
      await say(`Reading ${file}.`);
      const toolCallId = `call-${++counter}`;
      const call = { toolCallId, title: `Read ${file}`, kind: "read", status: "pending" };
      await client.notify(v1.methods.client.session.update, { sessionId, update: { sessionUpdate: "tool_call", ...call } });

      const abort = new AbortController();
      session.turn = abort;
      let outcome;
      try {
        const answer = await client.request(
          v1.methods.client.session.requestPermission,
          {
            sessionId,
            toolCall: call,
            options: [
              { optionId: "allow", name: "Allow once", kind: "allow_once" },
              { optionId: "reject", name: "Reject", kind: "reject_once" },
            ],
          },
          { cancellationSignal: abort.signal },
        );
        outcome = answer.outcome;
      } catch {
        outcome = { outcome: "cancelled" };
      }
      session.turn = undefined;
      if (abort.signal.aborted || outcome.outcome === "cancelled") {
        await tool({ toolCallId, status: "cancelled" });
        return { stopReason: "cancelled" };
      }
      if (outcome.optionId !== "allow") {
        await tool({ toolCallId, status: "failed" });
        await say(`Understood, I left ${file} alone.`);
        return { stopReason: "end_turn" };
      }
      await tool({ toolCallId, status: "in_progress" });
      const path = join(session.cwd, file);
      const head = clientReads
        ? (await client.request(v1.methods.client.fs.readTextFile, { sessionId, path, limit: MAX_LINES })).content
        : await headOf(path);
      await tool({ toolCallId, status: "completed", content: [{ type: "content", content: { type: "text", text: head } }] });
      const first = head.split("\n").find((l) => l.trim() !== "")?.trim() ?? "";
      await say(`It starts with "${first}".`);
      return { stopReason: "end_turn" };
    })
    .onNotification(v1.methods.agent.session.cancel, ({ params }) => {
      agentLog("session/cancel", params.sessionId);
      sessions.get(params.sessionId)?.turn?.abort();
    });
}

// ---- v2 ---------------------------------------------------------------------------------------

async function runV2Turn(client, sessionId, messageId, prompt) {
  const session = sessionOf(sessionId, v2.RequestError);
  const send = (update) => client.notify(v2.methods.client.session.update, { sessionId, update });
  const state = (s, stopReason) => send({ sessionUpdate: "state_update", state: s, ...(stopReason ? { stopReason } : {}) });
  const say = (text) => send({ sessionUpdate: "agent_message_chunk", messageId: `agent-msg-${++counter}`, content: { type: "text", text } });
  const tool = (patch) => send({ sessionUpdate: "tool_call_update", ...patch });
  await send({ sessionUpdate: "user_message", messageId, content: prompt });
  await state("running");
  const file = fileNamedIn(prompt);
  await say(`Reading ${file}.`);
  const toolCallId = `call-${++counter}`;
  const pending = { toolCallId, title: `Read ${file}`, kind: "read", status: "pending" };
  await tool(pending);
  await state("requires_action");
  const abort = new AbortController();
  session.turn = abort;
  let outcome;
  try {
    const answer = await client.request(
      v2.methods.client.session.requestPermission,
      {
        sessionId,
        title: `Allow reading ${file}?`,
        subject: { type: "tool_call", toolCall: pending },
        options: [
          { optionId: "allow", name: "Allow once", kind: "allow_once" },
          { optionId: "reject", name: "Reject", kind: "reject_once" },
        ],
      },
      { cancellationSignal: abort.signal },
    );
    outcome = answer.outcome;
  } catch {
    outcome = { outcome: "cancelled" };
  }
  session.turn = undefined;
  if (abort.signal.aborted || outcome.outcome === "cancelled") {
    await tool({ toolCallId, status: "cancelled" });
    return state("idle", "cancelled");
  }
  if (outcome.optionId !== "allow") {
    await tool({ toolCallId, status: "failed" });
    return state("idle", "end_turn");
  }
  await state("running");
  await tool({ toolCallId, status: "in_progress" });
  const head = await headOf(join(session.cwd, file));
  await send({ sessionUpdate: "tool_call_content_chunk", toolCallId, content: { type: "content", content: { type: "text", text: head } } });
  await tool({ toolCallId, status: "completed" });
  const first = head.split("\n").find((l) => l.trim() !== "")?.trim() ?? "";
  await say(`It starts with "${first}".`);
  await state("idle", "end_turn");
}

function makeV2Agent() {
  return v2
    .agent({ name: NAME })
    .onRequest(v2.methods.agent.initialize, () => {
      agentLog("initialize (v2)");
      return { protocolVersion: v2.PROTOCOL_VERSION, info: { name: NAME, version: "2.4.0" }, capabilities: { session: {} } };
    })
    .onRequest(v2.methods.agent.session.new, ({ params }) => {
      const sessionId = `ts-sess-${++counter}`;
      sessions.set(sessionId, { cwd: params.cwd, history: [] });
      agentLog("session/new (v2)", sessionId);
      return { sessionId };
    })
    .onRequest(v2.methods.agent.session.prompt, ({ params, client }) => {
      agentLog("session/prompt (v2)", params.sessionId);
      sessionOf(params.sessionId, v2.RequestError);
      const messageId = `user-msg-${++counter}`;
      setTimeout(() => runV2Turn(client, params.sessionId, messageId, params.prompt).catch((e) => console.error("turn failed:", e)), 0);
      return { messageId };
    })
    .onNotification(v2.methods.agent.session.cancel, ({ params }) => {
      agentLog("session/cancel (v2)", params.sessionId);
      sessions.get(params.sessionId)?.turn?.abort();
    });
}

// ---- the server -------------------------------------------------------------------------------

const server = new AcpServer({ createAgent: () => v2.agentProtocolRouter().withV1(makeV1Agent()).withV2(makeV2Agent()) });
const handler = createNodeHttpHandler(server);
const wss = new WebSocketServer({ noServer: true });
wss.on("headers", (headers) => headers.push("Set-Cookie: ws=1; Path=/"));
const upgrade = createNodeWebSocketUpgradeHandler(server, wss);

const describe = (req) => ({
  method: req.method,
  conn: req.headers["acp-connection-id"] ?? null,
  sess: req.headers["acp-session-id"] ?? null,
  cookie: req.headers.cookie ?? null,
  upgrade: (req.headers.upgrade ?? "").toLowerCase() === "websocket",
});

const httpServer = http.createServer((req, res) => {
  const seen = describe(req);
  emit("REQ", seen);
  res.on("finish", () => emit("RES", { method: seen.method, conn: seen.conn, sess: seen.sess, status: res.statusCode }));
  if (new URL(req.url, "http://x").pathname !== "/acp") {
    res.statusCode = 404;
    return res.end();
  }
  const cookies = ["affinity=node-1; Path=/; HttpOnly"];
  if (!seen.conn) cookies.push("temp=1; Path=/");
  if (req.method === "GET" && seen.sess) cookies.push("temp=; Path=/; Max-Age=0");
  res.setHeader("Set-Cookie", cookies);
  handler(req, res);
});
httpServer.on("upgrade", (req, socket, head) => {
  emit("REQ", describe(req));
  upgrade(req, socket, head);
});
httpServer.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => console.log(`LISTENING ${httpServer.address().port}`));
