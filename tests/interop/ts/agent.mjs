// The official TypeScript SDK as the agent, on stdio: a scripted turn for a client (ours) to
// drive.
//
//   node agent.mjs
//
// A turn: a plan, a message chunk, an update kind no schema has (as a newer agent would send,
// with `_meta`), a `read` tool call behind a permission request, the file named in the prompt
// read through the client's fs/read_text_file, the tool call completed with the start of the
// file, a closing message, `end_turn`. A rejection fails the tool call; session/cancel ends
// the turn with `cancelled`. Logs go to stderr.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const log = (...args) => console.error("[ts-agent]", ...args);

class InteropAgent {
  constructor(connection) {
    this.connection = connection;
    this.sessions = new Map();
    this.clientReads = false;
  }

  async initialize(params) {
    this.clientReads = params.clientCapabilities?.fs?.readTextFile === true;
    log(`initialize from ${params.clientInfo?.name ?? "an unnamed client"} (protocol ${params.protocolVersion})`);
    return {
      protocolVersion: Math.min(params.protocolVersion, acp.PROTOCOL_VERSION),
      agentCapabilities: { loadSession: false },
      authMethods: [],
      agentInfo: { name: "ts-sdk-interop-agent", version: "1.9.0" },
    };
  }

  async authenticate() {
    return {};
  }

  async newSession(params) {
    const sessionId = `ts_sess_${this.sessions.size + 1}`;
    this.sessions.set(sessionId, { cwd: params.cwd, abort: null });
    log(`session/new ${sessionId} in ${params.cwd}`);
    return { sessionId };
  }

  async prompt(params) {
    const session = this.sessions.get(params.sessionId);
    if (!session) throw acp.RequestError.invalidParams(`unknown session ${params.sessionId}`);
    session.abort?.abort();
    const abort = new AbortController();
    session.abort = abort;
    try {
      const stop = await this.turn(params.sessionId, session.cwd, params.prompt, abort.signal);
      return { stopReason: abort.signal.aborted ? "cancelled" : stop };
    } catch (error) {
      if (abort.signal.aborted) return { stopReason: "cancelled" };
      throw error;
    }
  }

  async cancel(params) {
    log(`session/cancel ${params.sessionId}`);
    this.sessions.get(params.sessionId)?.abort?.abort();
  }

  async update(sessionId, update) {
    await this.connection.sessionUpdate({ sessionId, update });
  }

  async turn(sessionId, cwd, prompt, signal) {
    const text = prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");
    const target = text.match(/[\w.\-/]+\.\w+/)?.[0] ?? "README.md";
    const path = `${cwd}/${target}`;
    await this.update(sessionId, {
      sessionUpdate: "plan",
      entries: [{ content: `Read ${target}`, priority: "high", status: "pending" }],
    });
    await this.update(sessionId, {
      sessionUpdate: "agent_message_chunk",
      content: { type: "text", text: `TS agent reading ${target}.` },
    });
    // An update kind from a newer protocol version: a client must not choke on it.
    await this.update(sessionId, {
      sessionUpdate: "hologram_projection",
      depth: 3,
      _meta: { "interop.example/newer": true },
    });
    if (signal.aborted) return "cancelled";
    await this.update(sessionId, {
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
    const asked = this.connection.requestPermission({
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
      await this.update(sessionId, { sessionUpdate: "tool_call_update", toolCallId: "ts_call_1", status: "failed" });
      return "end_turn";
    }
    await this.update(sessionId, { sessionUpdate: "tool_call_update", toolCallId: "ts_call_1", status: "in_progress" });
    let content;
    if (this.clientReads) {
      const read = await this.connection.readTextFile({ sessionId, path, limit: 8 });
      content = read.content;
    } else {
      content = "(the client does not offer fs/read_text_file)";
    }
    await this.update(sessionId, {
      sessionUpdate: "tool_call_update",
      toolCallId: "ts_call_1",
      status: "completed",
      content: [{ type: "content", content: { type: "text", text: content } }],
    });
    const first = content.split("\n").find((l) => l.trim() !== "") ?? "";
    await this.update(sessionId, {
      sessionUpdate: "agent_message_chunk",
      content: { type: "text", text: ` It starts with "${first.trim()}".` },
    });
    return "end_turn";
  }
}

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = new acp.AgentSideConnection((conn) => new InteropAgent(conn), stream);
log("ready on stdio");
connection.closed.then(() => {
  log("connection closed");
  process.exit(0);
});
