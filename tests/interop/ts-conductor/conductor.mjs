// @thinkwell/conductor as a command: `node conductor.mjs "proxy cmd" ... "agent cmd"`, the
// editor's side on this process's stdin and stdout (the package is a library with no command
// line of its own). Exits when the editor closes stdin.
import { createInterface } from "node:readline";
import { Conductor, fromCommands } from "@thinkwell/conductor";

const commands = process.argv.slice(2);
if (commands.length === 0) {
  console.error("usage: node conductor.mjs [proxy command ...] agent command");
  process.exit(2);
}

// The editor's connection: one JSON-RPC message per line, both ways.
const editor = {
  async connect() {
    const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
    return {
      send(message) {
        process.stdout.write(JSON.stringify(message) + "\n");
      },
      messages: (async function* () {
        for await (const line of lines) {
          if (line.trim()) yield JSON.parse(line);
        }
      })(),
      async close() {
        lines.close();
      },
    };
  },
};

const conductor = new Conductor({ instantiator: fromCommands(commands), mcpBridgeMode: "disabled" });
await conductor.connect(editor);
process.exit(0);
