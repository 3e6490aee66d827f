// The official TypeScript SDK (2.4's `acp.agent()` app) as the agent, on stdio: a scripted
// turn for a client (ours) to drive.
//
//   node agent.mjs
//
// A turn: a plan, a message chunk, an update kind no schema has (as a newer agent would send,
// with `_meta`), a `read` tool call behind a permission request, the file named in the prompt
// read through the client's fs/read_text_file, the tool call completed with the start of the
// file, a closing message, `end_turn`. A rejection fails the tool call; session/cancel ends
// the turn with `cancelled`. `agentInfo.version` is the installed SDK's version, so the test
// sees which SDK it ran. Logs go to stderr.
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const NAME = "ts-sdk-interop-agent";
// The SDK's exports do not include its package.json: read it from node_modules.
const SDK_VERSION = JSON.parse(
  readFileSync(new URL("./node_modules/@agentclientprotocol/sdk/package.json", import.meta.url), "utf8"),
).version;
const log = (...args) => console.error("[ts-agent]", ...args);

/** sessionId -> { cwd, abort: AbortController | null } */
const sessions = new Map();
let clientReads = false;

async function turn(client, sessionId, cwd, prompt, signal) {
  const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
  const text = prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");
  const target = text.match(/[\w.\-/]+\.\w+/)?.[0] ?? "README.md";
  const path = `${cwd}/${target}`;
  await update({
    sessionUpdate: "plan",
    entries: [{ content: `Read ${target}`, priority: "high", status: "pending" }],
  });
  await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: `TS agent reading ${target}.` } });
  // An update kind from a newer protocol version: a client must not choke on it. (The SDK
  // does not validate what it sends, so it goes out as written.)
  await update({ sessionUpdate: "hologram_projection", depth: 3, _meta: { "interop.example/newer": true } });
  if (signal.aborted) return "cancelled";
  await update({
    sessionUpdate: "tool_call",
    toolCallId: "ts_call_1",
    title: `Read ${target}`,
    kind: "read",
    status: "pending",
    locations: [{ path }],
    rawInput: { path },
  });
  // A cancelled turn stops waiting for the user (the client answers `cancelled` too).
  const aborted = new Promise((resolve) =>
    signal.addEventListener("abort", () => resolve({ outcome: { outcome: "cancelled" } }), { once: true }),
  );
  const asked = client.request(acp.methods.client.session.requestPermission, {
    sessionId,
    toolCall: { toolCallId: "ts_call_1" },
    options: [
      { optionId: "allow", name: "Allow once", kind: "allow_once" },
      { optionId: "reject", name: "Reject", kind: "reject_once" },
    ],
  });
  const answer = await Promise.race([asked, aborted]);
  if (signal.aborted || answer.outcome.outcome === "cancelled") return "cancelled";
  if (answer.outcome.optionId !== "allow") {
    await update({ sessionUpdate: "tool_call_update", toolCallId: "ts_call_1", status: "failed" });
    return "end_turn";
  }
  await update({ sessionUpdate: "tool_call_update", toolCallId: "ts_call_1", status: "in_progress" });
  let content;
  if (clientReads) {
    const read = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path, limit: 8 });
    content = read.content;
  } else {
    content = "(the client does not offer fs/read_text_file)";
  }
  await update({
    sessionUpdate: "tool_call_update",
    toolCallId: "ts_call_1",
    status: "completed",
    content: [{ type: "content", content: { type: "text", text: content } }],
  });
  const first = content.split("\n").find((l) => l.trim() !== "") ?? "";
  await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: ` It starts with "${first.trim()}".` } });
  return "end_turn";
}

const app = acp
  .agent({ name: NAME })
  .onRequest(acp.methods.agent.initialize, ({ params }) => {
    clientReads = params.clientCapabilities?.fs?.readTextFile === true;
    log(`initialize from ${params.clientInfo?.name ?? "an unnamed client"} (protocol ${params.protocolVersion})`);
    return {
      protocolVersion: Math.min(params.protocolVersion, acp.PROTOCOL_VERSION),
      agentCapabilities: { loadSession: false },
      authMethods: [],
      agentInfo: { name: NAME, version: SDK_VERSION },
    };
  })
  .onRequest(acp.methods.agent.authenticate, () => ({}))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `ts_sess_${sessions.size + 1}`;
    sessions.set(sessionId, { cwd: params.cwd, abort: null });
    log(`session/new ${sessionId} in ${params.cwd}`);
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw acp.RequestError.invalidParams(`unknown session ${params.sessionId}`);
    session.abort?.abort();
    const abort = new AbortController();
    session.abort = abort;
    try {
      const stop = await turn(client, params.sessionId, session.cwd, params.prompt, abort.signal);
      return { stopReason: abort.signal.aborted ? "cancelled" : stop };
    } catch (error) {
      if (abort.signal.aborted) return { stopReason: "cancelled" };
      throw error;
    }
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    log(`session/cancel ${params.sessionId}`);
    sessions.get(params.sessionId)?.abort?.abort();
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
log(`ready on stdio (SDK ${SDK_VERSION})`);
await connection.closed;
log("connection closed");
process.exit(0);
