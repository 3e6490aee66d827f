// Runs the `--serve` viewer page's script against a small stand-in for the browser's DOM, with
// `/events` answering the events of a JSON file, and prints what the page drew as JSON:
//
//   node page.mjs viewer.html events.json
//
// Then it plays a user: selects the first response and filters on `session/new`.
import { readFileSync } from "node:fs";
import vm from "node:vm";

const [htmlPath, eventsPath] = process.argv.slice(2);
const html = readFileSync(htmlPath, "utf8");
const script = /<script>([\s\S]*)<\/script>/.exec(html)[1];
const events = JSON.parse(readFileSync(eventsPath, "utf8"));

class Element {
  constructor(tag) {
    Object.assign(this, { tag, attrs: {}, children: [], listeners: {}, textContent: "", value: "", checked: false });
    Object.assign(this, { className: "", scrollTop: 0, scrollHeight: 0 });
    const classes = () => (this.attrs.class ?? "").split(" ").filter(Boolean);
    this.classList = {
      add: (name) => { this.attrs.class = [...new Set([...classes(), name])].join(" "); },
      remove: (name) => { this.attrs.class = classes().filter((c) => c !== name).join(" "); },
    };
  }
  setAttribute(name, value) { this.attrs[name] = String(value); }
  append(...nodes) { this.children.push(...nodes); }
  replaceChildren(...nodes) { this.children = nodes; }
  addEventListener(type, listener) { (this.listeners[type] ??= []).push(listener); }
  fire(type) { for (const listener of this.listeners[type] ?? []) listener({}); }
  // Only `.class` selectors, which is all the page uses.
  querySelectorAll(selector) {
    const found = [];
    const walk = (node) => node.children.forEach((child) => {
      if ((child.attrs.class ?? "").split(" ").includes(selector.slice(1))) found.push(child);
      walk(child);
    });
    walk(this);
    return found;
  }
}

const byId = Object.fromEntries(["status", "filter", "follow", "diagram", "head", "rows", "detail"].map((id) => [id, new Element(id)]));
byId.follow.checked = true;
const document = {
  getElementById: (id) => byId[id],
  createElement: (tag) => new Element(tag),
  createElementNS: (_ns, tag) => new Element(tag),
};
let polls = 0;
const context = {
  document,
  JSON, Math, Number, String, Object, Map, Set, Error,
  setTimeout: () => {}, // one poll is enough
  fetch: async (url) => {
    polls += 1;
    if (url !== "/events") throw new Error(`unexpected fetch ${url}`);
    return { ok: true, json: async () => events, text: async () => "" };
  },
};
vm.runInNewContext(script, context);
for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve));

const rowsOf = () => byId.rows.children.filter((node) => node.tag === "g");
const rowText = (row) => row.children.filter((n) => n.tag === "text").map((n) => n.textContent);
const drawn = rowsOf().map((row) => ({ class: row.attrs.class, texts: rowText(row) }));
const height = Number(byId.rows.attrs.height);

const firstResponse = rowsOf().find((row) => row.attrs.class.includes("response"));
firstResponse.fire("click");
const detail = byId.detail.children.map((node) => node.textContent);
const selected = firstResponse.attrs.class;

byId.filter.value = "session/new";
byId.filter.fire("input");
const filtered = rowsOf().map((row) => rowText(row)[1]);

console.log(JSON.stringify({
  polls,
  status: byId.status.textContent,
  lanes: byId.head.children.map((node) => node.textContent),
  rows: drawn,
  selected,
  detail,
  filtered,
  height,
}));
