// The official TypeScript SDK (2.4's `acp.client()` app) as the client, driving an ACP agent
// (ours) over stdio.
//
//   node client.mjs <root dir> <agent command...>                       the main scenarios
//   node client.mjs --compact=<capabilities> <root dir> <agent command...>
//
// Each scenario prints `RESULT <json>` on stdout; `DONE` at the end, or `FAILED <reason>` and
// exit status 1. Every session update that reaches the app's handler, that is, that the SDK
// validated with its zod schemas, is printed as `UPDATE <json>` (the SDK's parse result).
//
// Main scenarios, in order:
//   initialize    with unknown fields and `_meta`, as a newer client would send
//   session-new
//   prompt        a turn that reads notes.txt: the permission is allowed, the file is served here
//   cancel        a second turn, cancelled while its permission request is pending
//   extension     `_interop/ping` (an unknown extension method) and an extension notification
//   still-alive   session/new after all that
//
// `--compact=notices,compaction` (a comma-separated subset; empty for none): initialize
// advertising those `clientCapabilities.session` entries (each `{}`), session/new, then the
// prompt `/compact` (scenario `compact`).
//
// The SDK drops a session/update its schema rejects: it logs "Error handling notification"
// and never calls the handler. So the wire is tapped too, and every turn checks that each
// session/update that arrived reached the handler; if not, the script fails and names them.
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const args = process.argv.slice(2);
const compactFlag = args[0]?.startsWith("--compact=") ? args.shift().slice("--compact=".length) : null;
const [root, ...agentCommand] = args;
if (!root || agentCommand.length === 0) {
  console.error("usage: node client.mjs [--compact=notices,compaction] <root dir> <agent command...>");
  process.exit(2);
}

const agentProcess = spawn(agentCommand[0], agentCommand.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const result = (name, value) => console.log(`RESULT ${JSON.stringify({ scenario: name, ...value })}`);
const fail = (reason) => {
  console.log(`FAILED ${reason}`);
  agentProcess.kill();
  process.exit(1);
};
const withTimeout = (promise, ms, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), ms).unref())]);

// What the SDK says about notifications it could not handle (a schema rejection among them).
const sdkErrors = [];
const consoleError = console.error.bind(console);
console.error = (...items) => {
  if (items[0] === "Error handling notification") sdkErrors.push(items[1]);
  consoleError(...items);
};

// Session updates as they arrived on the wire, and as the handler got them, per turn.
let turn = 0;
const wire = {};
const updates = {};
const permissions = [];
const reads = [];

/** The agent's stream, with every incoming session/update recorded before the SDK sees it. */
function tappedStream() {
  const stream = acp.ndJsonStream(Writable.toWeb(agentProcess.stdin), Readable.toWeb(agentProcess.stdout));
  const tap = new TransformStream({
    transform(message, controller) {
      if (message.method === acp.methods.client.session.update && !("id" in message)) {
        (wire[turn] ??= []).push(structuredClone(message.params?.update));
      }
      controller.enqueue(message);
    },
  });
  return { readable: stream.readable.pipeThrough(tap), writable: stream.writable };
}

/**
 * Ends a turn's bookkeeping, once its response is in: the agent sent the turn's updates
 * before it, but the SDK's dispatch of them may still be on the microtask queue, which is
 * empty by the next macrotask (the handlers wait for nothing else). Then every update that
 * arrived must have reached the handler.
 */
async function settled(what) {
  await new Promise((resolve) => setImmediate(resolve));
  const arrived = wire[turn] ?? [];
  const handled = updates[turn] ?? [];
  if (arrived.length !== handled.length || sdkErrors.length > 0) {
    fail(
      `${what}: the SDK passed on ${handled.length} of the ${arrived.length} session updates that arrived ` +
        `(handled kinds ${JSON.stringify(handled.map((u) => u.sessionUpdate))}); ` +
        `arrived ${JSON.stringify(arrived)}; SDK errors ${JSON.stringify(sdkErrors)}`,
    );
  }
  return handled;
}

const app = acp
  .client({ name: "ts-sdk-interop" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    // `params` is what the SDK's schema parsed: only validated updates get here.
    console.log(`UPDATE ${JSON.stringify({ turn, sessionId: params.sessionId, update: params.update })}`);
    (updates[turn] ??= []).push(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
    permissions.push({ turn, options: params.options.map((o) => o.kind) });
    if (turn === 2) {
      // The user has not decided yet: cancel the turn; a pending permission request of a
      // cancelled turn is answered `cancelled`.
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
      return { outcome: { outcome: "cancelled" } };
    }
    const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    reads.push({ path: params.path, limit: params.limit ?? null });
    const text = await readFile(params.path, "utf8");
    const lines = text.split(/(?<=\n)/);
    const start = Math.max((params.line ?? 1) - 1, 0);
    return { content: lines.slice(start, params.limit ? start + params.limit : undefined).join("") };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, () => ({}));

const textOf = (list) =>
  list
    .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
    .map((u) => u.content.text)
    .join("");

async function main(cx) {
  // A newer client: fields this version of the schema does not know, and `_meta`.
  const init = await withTimeout(
    cx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {
        fs: { readTextFile: true, writeTextFile: true },
        terminal: false,
        hologramDisplay: { depth: 3 },
        _meta: { "interop.example/capability": true },
      },
      clientInfo: { name: "ts-sdk-interop", version: "2.4.0", vendorBuild: "x" },
      aFieldFromTheFuture: { nested: [1, 2, 3] },
      _meta: { "interop.example/trace": "abc" },
    }),
    10000,
    "initialize",
  );
  result("initialize", {
    protocolVersion: init.protocolVersion,
    agentName: init.agentInfo?.name ?? null,
    loadSession: init.agentCapabilities?.loadSession ?? false,
  });

  const session = await withTimeout(cx.request(acp.methods.agent.session.new, { cwd: root, mcpServers: [] }), 10000, "session/new");
  const sessionId = session.sessionId;
  result("session-new", { sessionId });

  turn = 1;
  const first = await withTimeout(
    cx.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "Please read notes.txt and tell me how it starts." }],
    }),
    20000,
    "first prompt",
  );
  const seen = await settled("first prompt");
  const completed = seen.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
  result("prompt", {
    stopReason: first.stopReason,
    updateKinds: [...new Set(seen.map((u) => u.sessionUpdate))],
    permissions: permissions.filter((p) => p.turn === 1).length,
    reads,
    toolContent: completed?.content?.[0]?.content?.text ?? null,
    message: textOf(seen),
  });

  turn = 2;
  const second = await withTimeout(
    cx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "Please read notes.txt again." }] }),
    20000,
    "cancelled prompt",
  );
  await settled("cancelled prompt");
  result("cancel", { stopReason: second.stopReason, permissions: permissions.filter((p) => p.turn === 2).length });

  await cx.notify("_interop/notice", { hello: "world" });
  let extension;
  try {
    const answer = await withTimeout(cx.request("_interop/ping", { n: 1, _meta: { x: 1 } }), 10000, "_interop/ping");
    extension = { answered: "result", result: answer };
  } catch (error) {
    extension = { answered: "error", code: error.code ?? null, message: error.message ?? String(error) };
  }
  result("extension", extension);

  const again = await withTimeout(cx.request(acp.methods.agent.session.new, { cwd: root, mcpServers: [] }), 10000, "session/new again");
  result("still-alive", { sessionId: again.sessionId });
}

async function compact(cx, advertised) {
  // `{}` is how a client advertises either capability (both are open records in the schema).
  const sessionCapabilities = Object.fromEntries(advertised.map((name) => [name, {}]));
  const init = await withTimeout(
    cx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: advertised.length > 0 ? { session: sessionCapabilities } : {},
      clientInfo: { name: "ts-sdk-interop-compact", version: "2.4.0" },
    }),
    10000,
    "initialize",
  );
  result("initialize", { protocolVersion: init.protocolVersion, agentName: init.agentInfo?.name ?? null, advertised });
  const { sessionId } = await withTimeout(cx.request(acp.methods.agent.session.new, { cwd: root, mcpServers: [] }), 10000, "session/new");

  turn = 1;
  const answer = await withTimeout(
    cx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/compact" }] }),
    20000,
    "/compact",
  );
  const seen = await settled("/compact");
  result("compact", {
    sessionId,
    stopReason: answer.stopReason,
    kinds: seen.map((u) => u.sessionUpdate),
    message: textOf(seen),
  });
}

agentProcess.on("error", (e) => fail(`cannot start the agent: ${e.message}`));
try {
  await app.connectWith(tappedStream(), (cx) => {
    if (compactFlag === null) return main(cx);
    return compact(cx, compactFlag.split(",").filter((name) => name !== ""));
  });
} catch (e) {
  fail(e?.stack ?? JSON.stringify(e));
}
console.log("DONE");
agentProcess.stdin.end();
agentProcess.kill();
process.exit(0);
