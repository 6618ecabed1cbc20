#!/usr/bin/env python3
# A context-provider.v1 provider, standard library only: see docs/WRITING_A_PROVIDER.md.
# Run: python3 docs/examples/provider.py [PORT]   (default 8090; 0 picks a free port)
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTRACT, VERSION = "context-provider.v1", "crm-1.0"
RECORDS = {  # lookup value -> its items, most relevant first
    "CUST-1042": [{"id": "CUST-1042", "title": "Nordwind Logistics GmbH",
                   "content": "Enterprise customer since 2021; payment terms net 30.",
                   "metadata": {"plan": "Enterprise"}, "updatedAt": "2026-11-28T09:14:00Z"}],
}

class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: ctxd reuses its connections

    def do_POST(self):
        secret = os.environ.get("PROVIDER_SECRET")
        if secret and self.headers.get("Authorization") != f"Bearer {secret}":
            return self.reply(401, {"error": "unauthorized"})  # never echo the token back
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if request.get("capability") == "describe":
            return self.reply(200, {"contract": CONTRACT, "version": VERSION,
                                    "capabilities": ["describe", "lookup"]})
        items = RECORDS.get(request.get("value"), [])[: request.get("limit", 1)]
        if not items:  # 404 is the contract's "no record for this value"
            return self.reply(404, {"contract": CONTRACT, "items": []})
        self.reply(200, {"contract": CONTRACT, "version": VERSION,
                         "currentness": "CURRENT", "items": items})

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

server = ThreadingHTTPServer(("127.0.0.1", int((sys.argv[1:] or [8090])[0])), Provider)
print(f"listening on http://127.0.0.1:{server.server_port}/context", flush=True)
server.serve_forever()
