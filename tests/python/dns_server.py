"""A DNS server on loopback whose answers the test controls (dnslib).

usage: dns_server.py RECORDS_JSON
RECORDS_JSON maps names to lists of IPv4 addresses, e.g.
{"workers.stoker.test": ["127.0.0.2", "127.0.0.3"]}; it is read again for
every query, so the test changes the answer by rewriting it (atomically).
A name not in the file is NXDOMAIN; a known name has no AAAA records.
Each A query answered appends a JSON line {"name": ..., "ips": [...]} to
RECORDS_JSON with the suffix ".queries", so that the test knows when a
client has seen a new answer. Prints "dns server on 127.0.0.1:PORT" once
listening (UDP), then serves until killed.
"""

import json
import sys
import time

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer


class FileResolver(BaseResolver):
    def __init__(self, path):
        self.path = path
        self.queries = path.rsplit(".", 1)[0] + ".queries"

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".")
        with open(self.path) as f:
            records = json.load(f)
        if name not in records:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if QTYPE[request.q.qtype] in ("A", "ANY"):
            for ip in records[name]:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(ip), ttl=0))
            with open(self.queries, "a") as f:
                f.write(json.dumps({"name": name, "ips": records[name]}) + "\n")
        return reply


def main():
    server = DNSServer(FileResolver(sys.argv[1]), address="127.0.0.1", port=0, logger=DNSLogger("-request,-reply,-truncated,-error,-recv,-send,-data"))
    port = server.server.server_address[1]
    server.start_thread()
    print(f"dns server on 127.0.0.1:{port}", flush=True)
    while server.isAlive():
        time.sleep(0.5)


if __name__ == "__main__":
    main()
