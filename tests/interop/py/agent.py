"""The official Python SDK as the agent, on stdio: the scripted turn of ../ts/agent.mjs.

    python agent.py

A plan, a message chunk, a `read` tool call behind a permission request, the file named in
the prompt read through the client's fs/read_text_file, the tool call completed with the start
of the file, a closing message, `end_turn`. A rejection fails the tool call; session/cancel
ends the turn with `cancelled`. Logs go to stderr.
"""

import asyncio
import re
import sys

from acp import PROTOCOL_VERSION, run_agent
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentPlanUpdate,
    ContentToolCallContent,
    PlanEntry,
    TextContentBlock,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)


def text_block(text):
    return TextContentBlock(type="text", text=text)


def update_agent_message_text(text):
    return AgentMessageChunk(session_update="agent_message_chunk", content=text_block(text))


def tool_content(block):
    return ContentToolCallContent(type="content", content=block)


def log(*args):
    print("[py-agent]", *args, file=sys.stderr, flush=True)


class InteropAgent:
    def __init__(self):
        self.conn = None
        self.sessions = {}
        self.client_reads = False

    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kwargs):
        fs = client_capabilities.fs if client_capabilities else None
        self.client_reads = bool(fs and fs.read_text_file)
        log(f"initialize from {client_info.name if client_info else 'an unnamed client'} (protocol {protocol_version})")
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=False),
            auth_methods=[],
            agent_info=Implementation(name="py-sdk-interop-agent", version="1.0.0rc3"),
        )

    async def authenticate(self, method_id, **kwargs):
        return None

    async def new_session(self, cwd, additional_directories=None, mcp_servers=None, **kwargs):
        session_id = f"py_sess_{len(self.sessions) + 1}"
        self.sessions[session_id] = {"cwd": cwd, "cancelled": asyncio.Event()}
        log(f"session/new {session_id} in {cwd}")
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id, **kwargs):
        log(f"session/cancel {session_id}")
        if session_id in self.sessions:
            self.sessions[session_id]["cancelled"].set()

    async def prompt(self, session_id, prompt, **kwargs):
        session = self.sessions[session_id]
        session["cancelled"] = cancelled = asyncio.Event()
        stop = await self.turn(session_id, session["cwd"], prompt, cancelled)
        return PromptResponse(stop_reason="cancelled" if cancelled.is_set() else stop)

    async def update(self, session_id, update):
        await self.conn.session_update(session_id=session_id, update=update)

    async def turn(self, session_id, cwd, prompt, cancelled):
        text = " ".join(block.text for block in prompt if getattr(block, "type", None) == "text")
        match = re.search(r"[\w.\-/]+\.\w+", text)
        target = match.group(0) if match else "README.md"
        path = f"{cwd}/{target}"
        plan = [PlanEntry(content=f"Read {target}", priority="high", status="pending")]
        await self.update(session_id, AgentPlanUpdate(session_update="plan", entries=plan))
        await self.update(session_id, update_agent_message_text(f"Python agent reading {target}."))
        if cancelled.is_set():
            return "cancelled"
        await self.update(
            session_id,
            ToolCallStart(
                session_update="tool_call",
                tool_call_id="py_call_1",
                title=f"Read {target}",
                kind="read",
                status="pending",
                locations=[ToolCallLocation(path=path)],
                raw_input={"path": path},
            ),
        )
        asked = asyncio.ensure_future(
            self.conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id="py_call_1"),
                options=[
                    PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
                    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                ],
            )
        )
        waiting = asyncio.ensure_future(cancelled.wait())
        done, _ = await asyncio.wait({asked, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if asked not in done:
            asked.cancel()
            return "cancelled"
        answer = asked.result()
        if cancelled.is_set() or answer.outcome.outcome == "cancelled":
            return "cancelled"
        progress = lambda **fields: ToolCallProgress(session_update="tool_call_update", tool_call_id="py_call_1", **fields)
        if answer.outcome.option_id != "allow":
            await self.update(session_id, progress(status="failed"))
            return "end_turn"
        await self.update(session_id, progress(status="in_progress"))
        if self.client_reads:
            content = (await self.conn.read_text_file(session_id=session_id, path=path, limit=8)).content
        else:
            content = "(the client does not offer fs/read_text_file)"
        await self.update(session_id, progress(status="completed", content=[tool_content(text_block(content))]))
        first = next((line.strip() for line in content.splitlines() if line.strip()), "")
        await self.update(session_id, update_agent_message_text(f' It starts with "{first}".'))
        return "end_turn"


if __name__ == "__main__":
    log("ready on stdio")
    asyncio.run(run_agent(InteropAgent()))
