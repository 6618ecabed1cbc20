"""A stdio "MCP server" whose tool answers with one JSON-RPC line of a million and a half
JSON values (3 MB): structured content of zeros. It speaks line-delimited JSON-RPC by
hand, so nothing stands between the line and the client.

    values.py
"""

import json
import sys

ZEROS = 1_500_000


def send(message) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    method = request.get("method")
    if "id" not in request:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request["id"], "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "values", "version": "1.0"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": [{
            "name": "zeros",
            "inputSchema": {"type": "object", "properties": {"customer": {"type": "string"}}},
        }]}})
    elif method == "tools/call":
        head = json.dumps({"jsonrpc": "2.0", "id": request["id"]}, separators=(",", ":"))[:-1]
        sys.stdout.write(head + ',"result":{"content":[],"structuredContent":{"zeros":[')
        sys.stdout.write(",".join(["0"] * ZEROS))
        sys.stdout.write("]}}}\n")
        sys.stdout.flush()
    else:
        send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
