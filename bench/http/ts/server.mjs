// The official TypeScript SDK's remote server (npm @agentclientprotocol/sdk 2.4.0: `AcpServer`
// behind its node adapter, WebSocket through `ws`) with the bench agent, for bench/http/run.sh.
//
//   PORT=0 node server.mjs      prints `LISTENING <port>`, serves `/acp` on 127.0.0.1
//
// The agent is the one every server of the bench runs: `initialize`, `session/new` (a fresh
// id), and `session/prompt` whose text is "N" or "N P": N `agent_message_chunk` updates, P µs
// apart, each awaited (`client.notify`), then `end_turn`.
import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { WebSocketServer } from "ws";
import * as v1 from "@agentclientprotocol/sdk";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";
import { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } from "@agentclientprotocol/sdk/experimental/node";

const TEXT = "Hello, world! ";
let sessions = 0;

function makeAgent() {
  return v1
    .agent({ name: "bench-agent" })
    .onRequest(v1.methods.agent.initialize, ({ params }) => ({ protocolVersion: params.protocolVersion, agentCapabilities: {}, authMethods: [] }))
    .onRequest(v1.methods.agent.session.new, () => ({ sessionId: `sess-${sessions++}` }))
    .onRequest(v1.methods.agent.session.prompt, async ({ params, client }) => {
      const text = params.prompt.find((b) => b.type === "text")?.text ?? "";
      const [n = 0, pauseUs = 0] = text.trim().split(/\s+/).map((w) => Number.parseInt(w, 10) || 0);
      const update = { sessionUpdate: "agent_message_chunk", content: { type: "text", text: TEXT } };
      for (let i = 0; i < n; i++) {
        await client.notify(v1.methods.client.session.update, { sessionId: params.sessionId, update });
        if (pauseUs > 0) await sleep(pauseUs / 1000);
      }
      return { stopReason: "end_turn" };
    })
    .onNotification(v1.methods.agent.session.cancel, () => {});
}

const server = new AcpServer({ createAgent: makeAgent });
const handler = createNodeHttpHandler(server);
const upgrade = createNodeWebSocketUpgradeHandler(server, new WebSocketServer({ noServer: true }));
const httpServer = http.createServer(handler);
httpServer.on("upgrade", upgrade);
httpServer.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => console.log(`LISTENING ${httpServer.address().port}`));
