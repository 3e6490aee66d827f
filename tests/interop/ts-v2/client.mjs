// The official TypeScript SDK's v2 client (`@agentclientprotocol/sdk/experimental/v2`) as a
// peer of tests/tests/interop_v2.rs. It speaks ACP on its own stdin/stdout: the test connects
// it to an agent and records the wire in between. It reports on stderr, one
// `RESULT {"step": ..., "ok": true|false, ...}` line per step, then `END`.
//
//   node client.mjs <session cwd>        the v2 scenario (below)
//   node client.mjs --v1 <session cwd>   the SDK's v1 client: initialize, session/new, a prompt
//                                        (permission requests allowed)
//   node client.mjs --cancel-work <cwd>  the v2 scenario, then the cancellable work of our demo
//                                        agent, on a second session (the last two steps below)
//
// The v2 scenario stops at the first step that fails (its RESULT says why):
//   initialize     protocolVersion 2 (the SDK rejects an answer naming another version)
//   session-new    via the SDK's session builder
//   session-list
//   prompt-allow   the agent asks permission; we allow it; we wait for the idle update
//   prompt-cancel  the agent asks permission; we send session/cancel, wait for the agent's
//                  `$/cancel_request` of that permission request, answer `cancelled`, and
//                  wait for the idle update
//   session-resume with `replayFrom: start`
//   session-close
//   prompt-closed  a prompt to the closed session (the agent must refuse it)
//   tool-call-cancel      (--cancel-work) `/slow`: once the SDK's session says the tool call
//                  can be cancelled and its first progress arrived, `tool_call/cancel` for an
//                  unknown call (sent raw: the SDK refuses it unsent), then the SDK's
//                  `cancelToolCall`; read to the idle update
//   terminal-cancel       (--cancel-work) `/ticker`: likewise with the terminal (after its first
//                  output), `terminal/cancel` and the SDK's `cancelTerminal`; the output decoded
//                  as the SDK's types carry it
import { Readable, Writable } from "node:stream";
import * as v2 from "@agentclientprotocol/sdk/experimental/v2";
import * as v1 from "@agentclientprotocol/sdk";

/** How long any one wait may take; the test has its own, longer, deadline. */
const WAIT_MS = 20_000;
/** How long the permission handler waits for the agent's `$/cancel_request`. */
const CANCEL_REQUEST_WAIT_MS = 5_000;

const args = process.argv.slice(2);
const useV1 = args[0] === "--v1";
const cancelWork = args[0] === "--cancel-work";
const cwd = useV1 || cancelWork ? args[1] : args[0];
if (!cwd) {
  console.error("usage: node client.mjs [--v1 | --cancel-work] <session cwd>");
  process.exit(2);
}
const report = (step, value) => console.error(`RESULT ${JSON.stringify({ step, ...value })}`);
const errorOf = (e) => ({ code: e?.code ?? null, message: String(e?.message ?? e), data: e?.data ?? null });
const within = (promise, what) =>
  Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), WAIT_MS).unref()),
  ]);

/** Runs one step; a failure is reported and ends the scenario. */
async function step(name, run) {
  try {
    const value = await within(run(), name);
    report(name, { ok: true, ...value });
  } catch (e) {
    report(name, { ok: false, error: errorOf(e) });
    stopped = true;
    throw e;
  }
}
/** A step failed (and said so): whatever the connection does next is a consequence. */
let stopped = false;

const stream = () => v2.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));

// ---- the v2 client --------------------------------------------------------------------------

/** What the permission handler does with the next request: "allow" or "cancel". */
let policy = "allow";
/** Permission requests seen in the current turn. */
let permissions = [];

const app = v2
  .client({ name: "ts-sdk-v2-interop" })
  .onRequest(v2.methods.client.session.requestPermission, async ({ params, agent, signal }) => {
    const seen = { toolCallId: params.subject?.toolCall?.toolCallId ?? null, cancelRequestSeen: false };
    permissions.push(seen);
    if (policy === "allow") {
      const option = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
      return { outcome: { outcome: "selected", optionId: option.optionId } };
    }
    // The user pressed stop while the agent waited for this answer.
    await agent.notify(v2.methods.agent.session.cancel, { sessionId: params.sessionId });
    // The agent cancels the requests of the cancelled work with `$/cancel_request`, which
    // aborts `signal`; the answer is the `cancelled` outcome either way.
    await new Promise((resolve) => {
      if (signal.aborted) return resolve();
      signal.addEventListener("abort", resolve, { once: true });
      setTimeout(resolve, CANCEL_REQUEST_WAIT_MS).unref();
    });
    seen.cancelRequestSeen = signal.aborted;
    return { outcome: { outcome: "cancelled" } };
  });

/**
 * Reads the session's updates until the idle update that ends the turn: an idle that follows
 * a non-idle state of this turn (an idle snapshot from before the prompt is not its end).
 */
async function readTurn(session) {
  const kinds = [];
  const tools = new Map();
  let text = "";
  let userMessageId = null;
  let active = false;
  for (;;) {
    const message = await session.nextUpdate();
    const update = message.update;
    if (message.kind === "stop" && !active) continue;
    kinds.push(update.state ? `${update.sessionUpdate} ${update.state}` : update.sessionUpdate);
    if (message.kind === "stop") return { kinds, stopReason: message.stopReason ?? null, text, userMessageId, tools: [...tools.values()] };
    switch (update.sessionUpdate) {
      case "state_update":
        active = true;
        break;
      case "user_message":
        userMessageId = update.messageId;
        break;
      case "agent_message_chunk":
        if (update.content.type === "text") text += update.content.text;
        break;
      case "tool_call_update": {
        const tool = tools.get(update.toolCallId) ?? { toolCallId: update.toolCallId, statuses: [], content: "" };
        if (update.status) tool.statuses.push(update.status);
        tools.set(update.toolCallId, tool);
        break;
      }
      case "tool_call_content_chunk": {
        const tool = tools.get(update.toolCallId);
        if (tool && update.content.type === "content" && update.content.content.type === "text") {
          tool.content += update.content.content.text;
        }
        break;
      }
    }
  }
}

async function promptTurn(session, text) {
  permissions = [];
  const accepted = await session.prompt(text);
  const turn = await readTurn(session);
  return { messageId: accepted.messageId, ...turn, permissions };
}

async function runV2(cx) {
  await step("initialize", async () => {
    const init = await cx.request(v2.methods.agent.initialize, {
      protocolVersion: 2,
      info: { name: "ts-sdk-v2-interop", version: "1.0.0" },
      capabilities: {},
    });
    return { protocolVersion: init.protocolVersion, agentName: init.info?.name ?? null, capabilities: init.capabilities ?? null };
  });
  let session;
  await step("session-new", async () => {
    session = await cx.buildSession(cwd).start();
    return { sessionId: session.sessionId };
  });
  await step("session-list", async () => {
    const listed = await cx.request(v2.methods.agent.session.list, {});
    return { sessions: listed.sessions.map((s) => ({ sessionId: s.sessionId, cwd: s.cwd })) };
  });
  policy = "allow";
  await step("prompt-allow", () => promptTurn(session, "Please read notes.txt"));
  policy = "cancel";
  await step("prompt-cancel", () => promptTurn(session, "Please read notes.txt again"));
  await step("session-resume", async () => {
    await cx.request(v2.methods.agent.session.resume, { sessionId: session.sessionId, cwd, replayFrom: { type: "start" } });
    return {};
  });
  await step("session-close", async () => {
    await cx.request(v2.methods.agent.session.close, { sessionId: session.sessionId });
    return {};
  });
  session.dispose();
  // The SDK itself would let a closed session's prompt through to the agent: the agent refuses.
  await step("prompt-closed", async () => {
    try {
      await cx.request(v2.methods.agent.session.prompt, { sessionId: session.sessionId, prompt: [{ type: "text", text: "still there?" }] });
      return { refused: false };
    } catch (e) {
      return { refused: true, error: errorOf(e) };
    }
  });
}

// ---- cancellable work (`--cancel-work`) -------------------------------------------------------

/** A JSON-RPC error as the agent sent it, or null when the request succeeded. */
async function errorFrom(request) {
  try {
    await request;
    return null;
  } catch (e) {
    return errorOf(e);
  }
}

/**
 * Prompts `text`, reads updates until `cancellable(update)` names an id the SDK's session lets
 * us cancel and `progress(update, id)` shows that work under way (so that the cancel stops
 * running work), runs `cancel(id)`, then reads to the idle update. What the turn showed is
 * returned.
 */
async function cancelTurn(session, text, cancellable, progress, cancel) {
  const accepted = await session.prompt(text);
  const kinds = [];
  const statuses = [];
  const terminals = [];
  let output = "";
  let said = "";
  let target = null;
  let id = null;
  let cancelled = null;
  let active = false;
  for (;;) {
    const message = await session.nextUpdate();
    const update = message.update;
    if (message.kind === "stop" && !active) continue;
    kinds.push(update.state ? `${update.sessionUpdate} ${update.state}` : update.sessionUpdate);
    if (message.kind === "stop") {
      return { messageId: accepted.messageId, id, kinds, statuses, terminals, output, said, ...cancelled, stopReason: message.stopReason ?? null };
    }
    if (update.sessionUpdate === "state_update") active = true;
    if (update.sessionUpdate === "tool_call_update" && update.status) statuses.push(update.status);
    if (update.sessionUpdate === "terminal_update") terminals.push(update);
    if (update.sessionUpdate === "terminal_output_chunk") output += Buffer.from(update.data, "base64").toString("utf8");
    if (update.sessionUpdate === "agent_message_chunk" && cancelled) said += update.content.text ?? "";
    if (id === null) {
      target ??= cancellable(update);
      if (target !== null && progress(update, target)) {
        id = target;
        cancelled = await cancel(id);
      }
    }
  }
}

async function runCancelWork(cx) {
  let session;
  await step("tool-call-cancel", async () => {
    session = await cx.buildSession(cwd).start();
    const cancellable = (u) => (u.sessionUpdate === "tool_call_update" && session.canCancelToolCall(u.toolCallId) ? u.toolCallId : null);
    const progress = (u, id) => u.sessionUpdate === "tool_call_content_chunk" && u.toolCallId === id;
    const turn = await cancelTurn(session, "/slow", cancellable, progress, async (id) => {
      const unknown = await errorFrom(
        cx.request(v2.methods.agent.toolCall.cancel, { sessionId: session.sessionId, toolCallId: "call_nobody_made" }),
      );
      const answer = await session.cancelToolCall(id);
      return { unknown, answer };
    });
    return { ...turn, cancellableAfter: turn.id !== null && session.canCancelToolCall(turn.id) };
  });
  await step("terminal-cancel", async () => {
    const cancellable = (u) => (u.sessionUpdate === "terminal_update" && session.canCancelTerminal(u.terminalId) ? u.terminalId : null);
    const progress = (u, id) => u.sessionUpdate === "terminal_output_chunk" && u.terminalId === id;
    const turn = await cancelTurn(session, "/ticker", cancellable, progress, async (id) => {
      const unknown = await errorFrom(
        cx.request(v2.methods.agent.terminal.cancel, { sessionId: session.sessionId, terminalId: "term_nobody_made" }),
      );
      const answer = await session.cancelTerminal(id);
      return { unknown, answer };
    });
    return { ...turn, cancellableAfter: turn.id !== null && session.canCancelTerminal(turn.id) };
  });
  session.dispose();
}

// ---- the v1 client (`--v1`) -----------------------------------------------------------------

async function runV1(cx) {
  await step("initialize", async () => {
    const init = await cx.request(v1.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    return { protocolVersion: init.protocolVersion, agentName: init.agentInfo?.name ?? null };
  });
  let sessionId;
  await step("session-new", async () => {
    ({ sessionId } = await cx.request(v1.methods.agent.session.new, { cwd, mcpServers: [] }));
    return { sessionId };
  });
  await step("prompt", async () => {
    const answer = await cx.request(v1.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hello" }] });
    return { stopReason: answer.stopReason, updates: v1Updates };
  });
}

const v1Updates = [];
const v1App = v1
  .client({ name: "ts-sdk-v1-interop" })
  .onNotification(v1.methods.client.session.update, ({ params }) => {
    v1Updates.push(params.update.sessionUpdate);
  })
  .onRequest(v1.methods.client.session.requestPermission, async ({ params }) => {
    const option = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  });

// ---- main -----------------------------------------------------------------------------------

try {
  if (useV1) {
    await v1App.connectWith(v1.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)), runV1);
  } else {
    await app.connectWith(stream(), async (cx) => {
      await runV2(cx);
      if (cancelWork) await runCancelWork(cx);
    });
  }
} catch (e) {
  if (!stopped) report("connection", { ok: false, error: errorOf(e) });
}
console.error("END");
// stdin stays open (the test owns the other end): leave without waiting for it.
process.exit(0);
