"""The official Python SDK as the client, driving an ACP agent (ours) over stdio.

    python client.py <root dir> <agent command...>

The same scenarios as ../ts/client.mjs, each printed as `RESULT <json>`; `DONE` at the end,
or `FAILED <reason>` and exit status 1.
"""

import asyncio
import json
import sys
from pathlib import Path

from acp import PROTOCOL_VERSION, RequestError
from acp.schema import AllowedOutcome, DeniedOutcome, ReadTextFileResponse, RequestPermissionResponse, TextContentBlock
from acp.stdio import spawn_agent_process

LIMIT = 20


def result(name, **value):
    print("RESULT " + json.dumps({"scenario": name, **value}), flush=True)


class InteropClient:
    def __init__(self):
        self.turn = 0
        self.updates = {1: [], 2: []}
        self.permissions = []
        self.reads = []
        self.conn = None

    def on_connect(self, conn):
        self.conn = conn

    async def session_update(self, session_id, update, **kwargs):
        self.updates.setdefault(self.turn, []).append(update.model_dump(by_alias=True, exclude_none=True))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(self.turn)
        if self.turn == 2:
            # Not decided yet: cancel the turn; the pending request is answered `cancelled`.
            await self.conn.cancel(session_id=session_id)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        allow = next((o for o in options if o.kind == "allow_once"), options[0])
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        self.reads.append({"path": path, "limit": limit})
        lines = Path(path).read_text().splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        return ReadTextFileResponse(content="".join(lines[start : start + limit if limit else None]))

    async def write_text_file(self, session_id, path, content, **kwargs):
        return None


async def main(root, command):
    client = InteropClient()
    async with spawn_agent_process(client, command[0], *command[1:]) as (conn, _process):
        client.conn = conn
        # A newer client: fields this schema version does not know, and `_meta` (sent raw:
        # the typed API would not let them through).
        init = await asyncio.wait_for(
            conn._conn.send_request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": True, "writeTextFile": True},
                        "terminal": False,
                        "hologramDisplay": {"depth": 3},
                    },
                    "clientInfo": {"name": "py-sdk-interop", "version": "1.0.0rc3", "vendorBuild": "x"},
                    "aFieldFromTheFuture": [1, 2, 3],
                    "_meta": {"interop.example/trace": "abc"},
                },
            ),
            LIMIT,
        )
        result(
            "initialize",
            protocolVersion=init["protocolVersion"],
            agentName=(init.get("agentInfo") or {}).get("name"),
            loadSession=(init.get("agentCapabilities") or {}).get("loadSession", False),
        )

        session = await asyncio.wait_for(conn.new_session(cwd=root, mcp_servers=[]), LIMIT)
        session_id = session.session_id
        result("session-new", sessionId=session_id)

        client.turn = 1
        first = await asyncio.wait_for(
            conn.prompt(session_id=session_id, prompt=[TextContentBlock(type="text", text="Please read notes.txt and tell me how it starts.")]),
            LIMIT,
        )
        updates = client.updates[1]
        kinds = list(dict.fromkeys(u["sessionUpdate"] for u in updates))
        completed = next((u for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"), None)
        message = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk" and u["content"]["type"] == "text")
        result(
            "prompt",
            stopReason=first.stop_reason,
            updateKinds=kinds,
            permissions=client.permissions.count(1),
            reads=client.reads,
            toolContent=completed["content"][0]["content"]["text"] if completed else None,
            message=message,
        )

        client.turn = 2
        second = await asyncio.wait_for(
            conn.prompt(session_id=session_id, prompt=[TextContentBlock(type="text", text="Please read notes.txt again.")]),
            LIMIT,
        )
        result("cancel", stopReason=second.stop_reason, permissions=client.permissions.count(2))

        # The SDK prefixes extension names with `_`.
        await conn.ext_notification("interop/notice", {"hello": "world"})
        try:
            answer = await asyncio.wait_for(conn.ext_method("interop/ping", {"n": 1}), LIMIT)
            result("extension", answered="result", result=answer)
        except RequestError as error:
            result("extension", answered="error", code=error.code, message=str(error))

        again = await asyncio.wait_for(conn.new_session(cwd=root, mcp_servers=[]), LIMIT)
        result("still-alive", sessionId=again.session_id)
    print("DONE", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("usage: python client.py <root dir> <agent command...>", file=sys.stderr)
        sys.exit(2)
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2:]))
    except Exception as error:  # noqa: BLE001 - report whatever went wrong
        import traceback

        traceback.print_exc()
        print(f"FAILED {error!r}", flush=True)
        sys.exit(1)
