// The official TypeScript SDK as the client, driving an ACP agent (ours) over stdio.
//
//   node client.mjs <root dir> <agent command...>
//
// Scenarios, in order (each prints `RESULT <json>` on stdout; `DONE` at the end, or
// `FAILED <reason>` and exit status 1):
//   initialize    with unknown fields and `_meta`, as a newer client would send
//   session-new
//   prompt        a turn that reads notes.txt: the permission is allowed, the file is served here
//   cancel        a second turn, cancelled while its permission request is pending
//   extension     `_interop/ping` (an unknown extension method) and an extension notification
//   still-alive   session/new after all that
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [root, ...agentCommand] = process.argv.slice(2);
if (!root || agentCommand.length === 0) {
  console.error("usage: node client.mjs <root dir> <agent command...>");
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
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), ms))]);

// What the agent sends us, per turn.
let turn = 0;
const updates = { 1: [], 2: [] };
const permissions = [];
const reads = [];
let connection;
let sessionId;

class InteropClient {
  async sessionUpdate(params) {
    (updates[turn] ??= []).push(params.update);
  }
  async requestPermission(params) {
    permissions.push({ turn, options: params.options.map((o) => o.kind) });
    if (turn === 2) {
      // The user has not decided yet: cancel the turn; a pending permission request of a
      // cancelled turn is answered `cancelled`.
      await connection.cancel({ sessionId: params.sessionId });
      return { outcome: { outcome: "cancelled" } };
    }
    const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  }
  async readTextFile(params) {
    reads.push({ path: params.path, limit: params.limit ?? null });
    const text = await readFile(params.path, "utf8");
    const lines = text.split(/(?<=\n)/);
    const start = Math.max((params.line ?? 1) - 1, 0);
    return { content: lines.slice(start, params.limit ? start + params.limit : undefined).join("") };
  }
  async writeTextFile() {
    return {};
  }
}

async function main() {
  const stream = acp.ndJsonStream(Writable.toWeb(agentProcess.stdin), Readable.toWeb(agentProcess.stdout));
  connection = new acp.ClientSideConnection(() => new InteropClient(), stream);

  // A newer client: fields this version of the schema does not know, and `_meta`.
  const init = await withTimeout(
    connection.initialize({
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {
        fs: { readTextFile: true, writeTextFile: true },
        terminal: false,
        hologramDisplay: { depth: 3 },
        _meta: { "interop.example/capability": true },
      },
      clientInfo: { name: "ts-sdk-interop", version: "1.9.0", vendorBuild: "x" },
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

  const session = await withTimeout(connection.newSession({ cwd: root, mcpServers: [] }), 10000, "session/new");
  sessionId = session.sessionId;
  result("session-new", { sessionId });

  turn = 1;
  const first = await withTimeout(
    connection.prompt({ sessionId, prompt: [{ type: "text", text: "Please read notes.txt and tell me how it starts." }] }),
    20000,
    "first prompt",
  );
  const kinds = [...new Set(updates[1].map((u) => u.sessionUpdate))];
  const completed = updates[1].find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
  const text = updates[1]
    .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
    .map((u) => u.content.text)
    .join("");
  result("prompt", {
    stopReason: first.stopReason,
    updateKinds: kinds,
    permissions: permissions.filter((p) => p.turn === 1).length,
    reads,
    toolContent: completed?.content?.[0]?.content?.text ?? null,
    message: text,
  });

  turn = 2;
  const second = await withTimeout(
    connection.prompt({ sessionId, prompt: [{ type: "text", text: "Please read notes.txt again." }] }),
    20000,
    "cancelled prompt",
  );
  result("cancel", { stopReason: second.stopReason, permissions: permissions.filter((p) => p.turn === 2).length });

  await connection.extNotification("_interop/notice", { hello: "world" });
  let extension;
  try {
    const answer = await withTimeout(connection.extMethod("_interop/ping", { n: 1, _meta: { x: 1 } }), 10000, "_interop/ping");
    extension = { answered: "result", result: answer };
  } catch (error) {
    extension = { answered: "error", code: error.code ?? null, message: error.message ?? String(error) };
  }
  result("extension", extension);

  const again = await withTimeout(connection.newSession({ cwd: root, mcpServers: [] }), 10000, "session/new again");
  result("still-alive", { sessionId: again.sessionId });

  console.log("DONE");
  agentProcess.stdin.end();
  agentProcess.kill();
  process.exit(0);
}

agentProcess.on("error", (e) => fail(`cannot start the agent: ${e.message}`));
main().catch((e) => fail(e?.stack ?? JSON.stringify(e)));
