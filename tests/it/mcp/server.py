"""An MCP server for ctxd's integration tests, written with the official Python SDK.

    server.py stdio [--hostile-stderr]
    server.py http PORT           (requires `Authorization: Bearer $MCP_TEST_TOKEN`)

Tools take the lookup value as `customer`: `lookup` answers, `profile` answers with
structured content, `fail` returns an error, `hang` never answers (and writes
$MCP_TEST_MARKS/cancelled when the call is cancelled), `die` exits the process mid-call,
`big` returns 2 MiB, `many` seven text blocks, `wide` one of 100 KiB, `aws` returns an AWS access key id, `reflect` returns the bearer
token it was sent, `env` reports which environment variables it sees, `version` the
protocol version the client asked for in `initialize`, `cwd` its working directory and
what is in it, `noisy` writes a line to stderr before it answers, `flood` writes 128 MiB
to stderr without a newline (then $MCP_TEST_MARKS/flooded, then the newline), `forge` writes control characters (a forged log line, CR,
ESC, OSC) to stderr and fails with them in its error. The resource template
`customers://{customer}/profile` reads a customer's profile; `flaky://{customer}` answers
once, then fails.

With `--hostile-stderr` the server first writes bytes that are not UTF-8 to stderr, and
dies of SIGPIPE (as a C or Go program would) if it ever writes to a stderr no one reads.
"""

import asyncio
import json
import os
import signal
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import TextContent
from pydantic import BaseModel
from mcp.server.mcpserver.exceptions import ToolError

MARKS = os.environ.get("MCP_TEST_MARKS")

server = MCPServer("ctxd-test-server", version="1.2.3")


def mark(name: str) -> None:
    if MARKS:
        with open(os.path.join(MARKS, name), "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")


@server.tool()
def lookup(customer: str, region: str = "eu") -> str:
    """A customer's record."""
    return f"customer {customer} in {region}: plan gold"


class Profile(BaseModel):
    customer: str
    tier: str
    seats: int


@server.tool()
def profile(customer: str) -> Profile:
    """A customer's profile as structured content."""
    return Profile(customer=customer, tier="gold", seats=12)


@server.tool()
def fail(customer: str) -> str:
    """Always fails, quoting an AWS key in its error."""
    raise ToolError("backend refused AKIAQ3RT7KWY2ZZW4N5P")


@server.tool()
async def hang(customer: str) -> str:
    """Never answers; records its cancellation."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        mark("cancelled")
        raise
    return "late"


@server.tool()
def die(customer: str) -> str:
    """Exits the server in the middle of the call."""
    mark("died")
    os._exit(3)


@server.tool()
def big(customer: str) -> str:
    """Two MiB of text."""
    return "x" * (2 * 1024 * 1024)


@server.tool()
def many(customer: str) -> list[TextContent]:
    """Seven text blocks: seven items."""
    return [TextContent(type="text", text=f"note {i} for {customer}") for i in range(7)]


@server.tool()
def wide(customer: str) -> str:
    """One item of 100 KiB: within the answer's bound, over an item's."""
    return "y" * (100 * 1024)


@server.tool()
def aws(customer: str) -> str:
    """Leaks an AWS access key id."""
    return "the key is AKIAQ3RT7KWY2ZZW4N5P"


@server.tool()
def reflect(customer: str, ctx: Context) -> str:
    """Returns the Authorization header it received."""
    request = ctx.request_context.request
    header = request.headers.get("authorization", "") if request is not None else ""
    return f"you sent {header}"


@server.tool()
def env(customer: str) -> str:
    """The names of the environment variables the server sees."""
    return " ".join(sorted(os.environ))


@server.tool()
def version(customer: str, ctx: Context) -> str:
    """The protocol version the client asked for in `initialize`."""
    return ctx.session.client_params.protocol_version


@server.tool()
def cwd(customer: str) -> str:
    """The working directory and its entries, as JSON."""
    return json.dumps({"cwd": os.getcwd(), "entries": sorted(os.listdir("."))})


@server.tool()
def noisy(customer: str) -> str:
    """Writes a line to stderr, then answers."""
    print("noisy call", file=sys.stderr, flush=True)
    return "noisy answer"


@server.tool()
def flood(customer: str) -> str:
    """128 MiB on stderr in one line without a newline, then an answer."""
    chunk = b"z" * (1 << 20)
    for _ in range(128):
        sys.stderr.buffer.write(chunk)
    sys.stderr.buffer.flush()
    mark("flooded")
    sys.stderr.buffer.write(b"\n")
    sys.stderr.buffer.flush()
    return "flooded"


FORGED = "bad\n2026-01-01T00:00:00.000000Z  INFO forged line\r\x1b[31mred\x1b]0;owned\x07"


@server.tool()
def forge(customer: str) -> str:
    """Control characters on stderr and in the error."""
    print(f"stderr {FORGED}", file=sys.stderr, flush=True)
    raise ToolError(f"error {FORGED}")


@server.resource("customers://{customer}/profile")
def customer_profile(customer: str) -> str:
    """A customer's profile, by URI."""
    return f"profile of {customer}"


READS = {"flaky": 0}


@server.resource("flaky://{customer}")
def flaky(customer: str) -> str:
    """Answers the first read, fails every later one."""
    READS["flaky"] += 1
    if READS["flaky"] > 1:
        raise ValueError("the backend is down")
    return f"first read of {customer}"


def main() -> None:
    mark("started")
    if "--hostile-stderr" in sys.argv:
        sys.stderr.buffer.write(b"\xff\xfe not utf-8 \xc3\x28\n")
        sys.stderr.buffer.flush()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # One stderr line with a secret in it: ctxd logs it redacted.
    print("starting with key AKIAQ3RT7KWY2ZZW4N5P", file=sys.stderr, flush=True)
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port = int(sys.argv[2])
    token = os.environ["MCP_TEST_TOKEN"]
    app = server.streamable_http_app()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                challenge = [(b"www-authenticate", b'Bearer realm="ctxd-test"')]
                await send({"type": "http.response.start", "status": 401, "headers": challenge})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
