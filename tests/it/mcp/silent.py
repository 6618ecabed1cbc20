"""A stdio "MCP server" that never answers: it reads what it is sent and writes
nothing back, so `initialize` is never answered. It does not exit when its input
ends either: only a kill stops it. Writes its pid to $MCP_TEST_MARKS/started.

    silent.py
"""

import os
import sys
import time

MARKS = os.environ.get("MCP_TEST_MARKS")
if MARKS:
    with open(os.path.join(MARKS, "started"), "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()}\n")
sys.stdin.buffer.read()
while True:
    time.sleep(3600)
