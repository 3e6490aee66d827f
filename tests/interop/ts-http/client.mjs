// The official TypeScript SDK 2.4's remote client against a server of ours:
//   node client.mjs URL [ws]
// Over Streamable HTTP (createHttpStream) or WebSocket (createWebSocketStream): initialize,
// session/new and one prompt; a permission request is answered with its first option. Prints
// INIT, SESSION, each UPDATE's kind, PERMISSION, PROMPT with the answer, then DONE.
import WebSocket from "ws";
import * as acp from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

const [url, mode] = process.argv.slice(2);
const stream = mode === "ws"
  ? createWebSocketStream(url.replace(/^http/, "ws"), { WebSocket })
  : createHttpStream(url);
const app = acp.client({ name: "ts-http-interop-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => console.log("UPDATE", params.update.sessionUpdate))
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    console.log("PERMISSION", params.toolCall.toolCallId);
    return { outcome: { outcome: "selected", optionId: params.options[0].optionId } };
  });
await app.connectWith(stream, async (cx) => {
  const init = await cx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  console.log("INIT", JSON.stringify(init));
  const { sessionId } = await cx.request(acp.methods.agent.session.new, { cwd: "/tmp", mcpServers: [] });
  console.log("SESSION", sessionId);
  const answer = await cx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "read README.md" }] });
  console.log("PROMPT", JSON.stringify(answer));
});
console.log("DONE");
process.exit(0);
