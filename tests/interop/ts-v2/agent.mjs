// The official TypeScript SDK's agents as peers of tests/tests/interop_v2.rs, where our v2
// client drives them. ACP on stdin/stdout, logs on stderr.
//
//   node agent.mjs             v1 and v2 behind the SDK's `agentProtocolRouter()`
//   node agent.mjs --v1-only   the SDK's v1 agent alone
//
// The v2 agent does the turns our own v2 agent does (runtime/examples/common/agent_v2.rs), so that one
// expectation holds for both: answer `{messageId}`, `user_message`, `running`, a streamed
// message, a `read` tool call (`pending`), `requires_action` and `session/request_permission`.
// Allowed: `running`, `in_progress`, the file's first lines as a content chunk, `completed`, a
// closing message quoting the first line, idle `end_turn`. On `session/cancel` the pending
// permission request is withdrawn (aborting its signal makes the SDK send `$/cancel_request`),
// the tool call is marked `cancelled`, then idle `cancelled`. It also serves session/list,
// session/resume (replaying the conversation when asked) and session/close. The v1 agent only
// initializes and opens sessions: enough for a client to see which version it got.
//
// The prompt `/slow` starts cancellable work, as our demo agent's does: a tool call that
// advertises `capabilities: {cancel: {}}` and reports progress until the client sends
// `tool_call/cancel` for it (handled with the SDK's `onRequest`; an unknown or settled id gets
// -32602). The agent answers `{}`, marks the call `cancelled` withdrawing the capability
// (`capabilities: null`), and the turn goes on to a closing message and `end_turn`.
// `session/cancel` or `session/close` stops it too, and ends the turn `cancelled`.
//
// The prompt `/ticker` does the same with a terminal, as our demo agent's does: a tool call
// (`execute`) shows a terminal (`terminal_update` with its command and cwd) that advertises
// `capabilities: {cancel: {}}` and prints `tick N\r\n` (`terminal_output_chunk`, base64) until
// the client sends `terminal/cancel` for it (-32602 for an id it does not know). The agent
// answers `{}`, reports the exit (`exitStatus: {signal: "SIGTERM"}`, `capabilities: null`),
// completes the tool call, and the turn goes on to a closing message and `end_turn`.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as v2 from "@agentclientprotocol/sdk/experimental/v2";
import * as v1 from "@agentclientprotocol/sdk";

const NAME = "ts-sdk-v2-interop-agent";
const ALLOW = "allow-once";
const MAX_LINES = 8;
/** How often the slow task reports progress. */
const TICK_MS = 100;
const log = (...args) => console.error("[ts-agent]", ...args);

/**
 * sessionId -> { cwd, history: [{kind, messageId, content}], turn?: AbortController,
 *                cancellable: Map<toolCallId, stop()>, terminals: Map<terminalId, stop()> }
 */
const sessions = new Map();
let counter = 0;
const freshId = (prefix) => `${prefix}-${++counter}`;

function sessionOf(sessionId) {
  const session = sessions.get(sessionId);
  if (!session) throw v2.RequestError.sessionNotFound(sessionId);
  return session;
}

/** One turn's way to report: updates of its session; messages are also kept for replay. */
function reporter(client, sessionId) {
  const send = (update) => client.notify(v2.methods.client.session.update, { sessionId, update });
  return {
    send,
    state: (state, stopReason) => send({ sessionUpdate: "state_update", state, ...(stopReason ? { stopReason } : {}) }),
    tool: (patch) => send({ sessionUpdate: "tool_call_update", ...patch }),
    /** Streams `text` as one agent message, word by word. */
    async say(text) {
      const messageId = freshId("agent-msg");
      for (const word of text.match(/\S+\s*/g) ?? []) {
        await send({ sessionUpdate: "agent_message_chunk", messageId, content: { type: "text", text: word } });
      }
      sessions.get(sessionId)?.history.push({ kind: "agent_message", messageId, content: [{ type: "text", text }] });
    },
  };
}

/** The work of one accepted prompt (see the header). */
async function runTurn(client, sessionId, messageId, prompt) {
  const session = sessionOf(sessionId);
  const abort = new AbortController();
  session.turn = abort;
  const report = reporter(client, sessionId);
  await report.send({ sessionUpdate: "user_message", messageId, content: prompt });
  session.history.push({ kind: "user_message", messageId, content: prompt });
  await report.state("running");
  const command = prompt[0]?.type === "text" ? prompt[0].text.trim() : "";
  if (command === "/slow") return slowTask(session, report, abort);
  if (command === "/ticker") return ticker(session, report, abort);

  const words = prompt.filter((b) => b.type === "text").flatMap((b) => b.text.split(/\s+/));
  const file = words.map((w) => w.replace(/^[^\w]+|[^\w]+$/g, "")).find((w) => w.includes(".")) ?? "notes.txt";
  await report.say(`Let me read ${file} for you.`);
  const toolCallId = freshId("call");
  const pending = { toolCallId, title: `Read ${file}`, kind: "read", status: "pending" };
  await report.tool(pending);

  await report.state("requires_action");
  let outcome;
  try {
    const answer = await client.request(
      v2.methods.client.session.requestPermission,
      {
        sessionId,
        title: `Allow reading ${file}?`,
        subject: { type: "tool_call", toolCall: pending },
        options: [
          { optionId: ALLOW, name: "Allow once", kind: "allow_once" },
          { optionId: "reject-once", name: "Reject", kind: "reject_once" },
        ],
      },
      // Aborted by session/cancel: the SDK sends `$/cancel_request` for this request.
      { cancellationSignal: abort.signal },
    );
    outcome = answer.outcome;
  } catch (e) {
    log("permission request failed:", e?.code, e?.message);
    outcome = { outcome: "cancelled" };
  }
  session.turn = undefined;
  // The `cancelled` outcome is the client's cancel too: a client may answer so right after its
  // session/cancel, and then the SDK can resume this turn before it runs the cancel's handler.
  if (abort.signal.aborted || outcome.outcome === "cancelled") {
    await report.tool({ toolCallId, status: "cancelled" });
    return report.state("idle", "cancelled");
  }
  if (outcome.outcome !== "selected" || outcome.optionId !== ALLOW) {
    await report.tool({ toolCallId, status: "failed" });
    await report.say(`Understood, I left ${file} alone.`);
    return report.state("idle", "end_turn");
  }

  await report.state("running");
  await report.tool({ toolCallId, status: "in_progress" });
  let head;
  try {
    const lines = (await readFile(join(session.cwd, file), "utf8")).split("\n");
    if (lines.at(-1) === "") lines.pop();
    head = lines.slice(0, MAX_LINES).join("\n");
  } catch (e) {
    head = `cannot read ${file}: ${e.message}`;
  }
  await report.send({ sessionUpdate: "tool_call_content_chunk", toolCallId, content: { type: "content", content: { type: "text", text: head } } });
  await report.tool({ toolCallId, status: "completed" });
  const first = head.split("\n").find((l) => l.trim() !== "")?.trim() ?? "";
  await report.say(`${file} starts with “${first}”.`);
  await report.state("idle", "end_turn");
}

/** `/slow` (see the header): runs until `tool_call/cancel` or the turn's cancel stops it. */
async function slowTask(session, report, abort) {
  await report.say("Starting a slow task; cancel it whenever you like.");
  const toolCallId = freshId("call");
  let stop;
  const stopped = new Promise((resolve) => (stop = resolve));
  abort.signal.addEventListener("abort", () => stop());
  session.cancellable.set(toolCallId, stop);
  await report.tool({ toolCallId, title: "Slow task (runs until cancelled)", kind: "other", status: "pending", capabilities: { cancel: {} } });
  await report.tool({ toolCallId, status: "in_progress" });
  let ticks = 0;
  const tick = () => new Promise((resolve) => setTimeout(() => resolve(true), TICK_MS));
  while (await Promise.race([stopped.then(() => false), tick()])) {
    ticks += 1;
    await report.send({ sessionUpdate: "tool_call_content_chunk", toolCallId, content: { type: "content", content: { type: "text", text: `still working (${ticks})` } } });
  }
  session.cancellable.delete(toolCallId);
  session.turn = undefined;
  log(`slow task ${toolCallId} stopped after ${ticks} ticks`);
  // `null`, not omitted: an omitted field leaves the client's stored capability as it was.
  await report.tool({ toolCallId, status: "cancelled", capabilities: null });
  if (abort.signal.aborted) return report.state("idle", "cancelled");
  // Only the call was cancelled: the turn goes on.
  await report.say(`Stopped the slow task after ${ticks} updates.`);
  await report.state("idle", "end_turn");
}

/** `/ticker` (see the header): runs until `terminal/cancel` or the turn's cancel stops it. */
async function ticker(session, report, abort) {
  const toolCallId = freshId("call");
  await report.tool({ toolCallId, title: "Run the demo ticker", kind: "execute", status: "pending" });
  const terminalId = freshId("term");
  const terminal = (patch) => report.send({ sessionUpdate: "terminal_update", terminalId, ...patch });
  await terminal({ command: "demo-ticker (a line per tick)", cwd: session.cwd });
  await report.send({ sessionUpdate: "tool_call_content_chunk", toolCallId, content: { type: "terminal", terminalId } });
  let stop;
  const stopped = new Promise((resolve) => (stop = resolve));
  abort.signal.addEventListener("abort", () => stop());
  session.terminals.set(terminalId, stop);
  await terminal({ capabilities: { cancel: {} } });
  await report.tool({ toolCallId, status: "in_progress" });
  let ticks = 0;
  const tick = () => new Promise((resolve) => setTimeout(() => resolve(true), TICK_MS));
  while (await Promise.race([stopped.then(() => false), tick()])) {
    ticks += 1;
    const data = Buffer.from(`tick ${ticks}\r\n`, "utf8").toString("base64");
    await report.send({ sessionUpdate: "terminal_output_chunk", terminalId, data });
  }
  session.terminals.delete(terminalId);
  session.turn = undefined;
  log(`ticker ${terminalId} stopped after ${ticks} ticks`);
  // `null`, not omitted: an omitted field leaves the client's stored capability as it was.
  await terminal({ exitStatus: { signal: "SIGTERM" }, capabilities: null });
  if (abort.signal.aborted) {
    await report.tool({ toolCallId, status: "cancelled" });
    return report.state("idle", "cancelled");
  }
  // The ticker ran until it was stopped, which is what it was asked to do.
  await report.tool({ toolCallId, status: "completed" });
  await report.say(`The ticker stopped after ${ticks} ticks.`);
  await report.state("idle", "end_turn");
}

const v2App = v2
  .agent({ name: NAME })
  .onRequest(v2.methods.agent.initialize, ({ params }) => {
    log("initialize (v2) from", params.info?.name);
    return { protocolVersion: v2.PROTOCOL_VERSION, info: { name: NAME, version: "1.0.0" }, capabilities: { session: {} } };
  })
  .onRequest(v2.methods.agent.session.new, ({ params }) => {
    const sessionId = freshId("ts-sess");
    sessions.set(sessionId, { cwd: params.cwd, history: [], cancellable: new Map(), terminals: new Map() });
    return { sessionId };
  })
  .onRequest(v2.methods.agent.session.list, () => ({
    sessions: [...sessions].map(([sessionId, s]) => ({ sessionId, cwd: s.cwd })),
  }))
  .onRequest(v2.methods.agent.session.resume, async ({ params, client }) => {
    const session = sessionOf(params.sessionId);
    const replayFrom = params.replayFrom ?? null;
    if (replayFrom !== null && replayFrom.type !== "start") throw v2.RequestError.invalidParams("unknown replay cursor");
    // The replay goes out before the answer.
    for (const entry of replayFrom ? session.history : []) {
      await client.notify(v2.methods.client.session.update, {
        sessionId: params.sessionId,
        update: { sessionUpdate: entry.kind, messageId: entry.messageId, content: entry.content },
      });
    }
    return {};
  })
  .onRequest(v2.methods.agent.session.close, ({ params }) => {
    sessionOf(params.sessionId).turn?.abort();
    sessions.delete(params.sessionId);
    return {};
  })
  .onRequest(v2.methods.agent.session.prompt, ({ params, client }) => {
    sessionOf(params.sessionId);
    const messageId = freshId("user-msg");
    // Acceptance first (the SDK's schema requires the user message's id), then the turn.
    setTimeout(() => runTurn(client, params.sessionId, messageId, params.prompt).catch((e) => log("turn failed:", e)), 0);
    return { messageId };
  })
  .onRequest(v2.methods.agent.toolCall.cancel, ({ params }) => {
    const stop = sessions.get(params.sessionId)?.cancellable.get(params.toolCallId);
    if (!stop) {
      throw v2.RequestError.invalidParams({ toolCallId: params.toolCallId }, "the tool call is unknown or not cancellable");
    }
    log("tool_call/cancel", params.toolCallId);
    // After this answer has gone out: the final `cancelled` patch confirms an accepted cancel.
    setTimeout(stop, 0);
    return {};
  })
  .onRequest(v2.methods.agent.terminal.cancel, ({ params }) => {
    const stop = sessions.get(params.sessionId)?.terminals.get(params.terminalId);
    if (!stop) {
      throw v2.RequestError.invalidParams({ terminalId: params.terminalId }, "the terminal is unknown or not cancellable");
    }
    log("terminal/cancel", params.terminalId);
    // After this answer has gone out: the exit confirms an accepted cancel.
    setTimeout(stop, 0);
    return {};
  })
  .onNotification(v2.methods.agent.session.cancel, ({ params }) => {
    log("session/cancel", params.sessionId);
    sessions.get(params.sessionId)?.turn?.abort();
  });

const v1App = v1
  .agent({ name: NAME })
  .onRequest(v1.methods.agent.initialize, ({ params }) => {
    log("initialize (v1) at protocol", params.protocolVersion);
    return { protocolVersion: 1, agentCapabilities: {}, agentInfo: { name: NAME, version: "1.0.0" }, authMethods: [] };
  })
  .onRequest(v1.methods.agent.session.new, () => ({ sessionId: `v1-sess-${process.pid}` }));

const stream = v2.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = process.argv.includes("--v1-only")
  ? v1App.connect(stream)
  : v2.agentProtocolRouter().withV1(v1App).withV2(v2App).connect(stream);
await connection.closed;
log("connection closed");
