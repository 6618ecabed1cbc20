"""An MCP client for ctxd's integration tests, written with the official Python SDK.

    client.py http URL KEY CUSTOMER     (ctxd serve's /mcp, the tenant's API key)
    client.py stdio CUSTOMER -- CMD...  (a server launched as a subprocess: `ctxd mcp …`)

Lists the tools, runs get_context for CUSTOMER, and works the first handle the turn
returned through handle_metadata, handle_peek and handle_search. Prints one JSON object;
a refused connection prints {"refused": "<error>"}.
"""

import asyncio
import json
import sys

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def scenario(session: ClientSession, customer: str) -> dict:
    await session.initialize()
    tools = await session.list_tools()
    report = {"tools": sorted(tool.name for tool in tools.tools)}
    schema = next(t.input_schema for t in tools.tools if t.name == "get_context")
    report["get_context_schema"] = sorted(schema.get("properties", {}))
    context = await session.call_tool(
        "get_context", {"project": "acme", "inputs": {"customerId": customer}}
    )
    report["context_error"] = bool(context.is_error)
    report["context"] = context.structured_content
    handle = None
    for selection in (context.structured_content or {}).get("selections", []):
        if selection.get("handle"):
            handle = selection["handle"]["id"]
            break
    report["handle"] = handle
    if handle:
        for name, arguments in [
            ("handle_metadata", {}),
            ("handle_peek", {"item": 0, "maxBytes": 200}),
            ("handle_search", {"pattern": "ERROR", "maxResults": 3}),
            ("handle_search", {"pattern": "ERROR", "maxResults": 0}),
        ]:
            result = await session.call_tool(name, {"handle": handle, **arguments})
            report.setdefault("operations", []).append(
                {"tool": name, "error": bool(result.is_error), "result": result.structured_content}
            )
    bad = await session.call_tool("handle_peek", {"handle": "h_" + "0" * 32, "head": 5})
    report["unknown_handle"] = {"error": bool(bad.is_error), "result": bad.structured_content}
    turn_id = (context.structured_content or {}).get("turnId")
    if turn_id:
        # The trace writer commits in batches: poll until the turn is stored.
        for _ in range(100):
            trace = await session.call_tool("get_trace", {"turnId": turn_id})
            if not trace.is_error:
                break
            await asyncio.sleep(0.1)
        report["trace"] = {"error": bool(trace.is_error), "result": trace.structured_content}
        found = await session.call_tool("search_traces", {"limit": 5})
        report["search"] = {"error": bool(found.is_error), "result": found.structured_content}
        bad_search = await session.call_tool("search_traces", {"limit": 0})
        report["bad_search"] = {"error": bool(bad_search.is_error), "result": bad_search.structured_content}
    return report


async def main() -> None:
    mode = sys.argv[1]
    try:
        if mode == "http":
            url, key, customer = sys.argv[2:5]
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
            async with client:
                async with streamable_http_client(url, http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        report = await asyncio.wait_for(scenario(session, customer), 30)
        else:
            customer = sys.argv[2]
            command = sys.argv[sys.argv.index("--") + 1 :]
            params = StdioServerParameters(command=command[0], args=command[1:])
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    report = await asyncio.wait_for(scenario(session, customer), 60)
    except BaseException as error:  # noqa: BLE001 - the test reads what refused it
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        report = {"refused": f"{type(error).__name__}: {error}"}
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
