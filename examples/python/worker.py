#!/usr/bin/env python3
"""Python workers campaigning in etcd and writing through fencegate.

Two workers, a and b, campaign in election python-example with Debian's
python3-etcd3, using the layout of etcd's concurrency.Election that
fencegate watches: a key <prefix>/<election>/<lease id in hex> attached to
the worker's lease; the leader is the key with the lowest create revision,
and that revision is its fencing token. Each writes a row over fencegate's
HTTP API with python3-requests.

worker-a leads and writes, then pauses (it stops its lease keep-alives, as
a process stuck in a GC pause or frozen by SIGSTOP would). Its lease
expires, worker-b is elected and writes. worker-a wakes up still believing
it leads and writes with its old token: fencegate refuses it.

Environment: ETCD_ENDPOINT (http://127.0.0.1:2379), FENCEGATE_HTTP_ADDR
(http://127.0.0.1:7080), ELECTION_PREFIX (/fencegate/elections), ELECTION
(python-example).
"""

import os
import sys
import threading
import urllib.parse

import etcd3
import requests

ETCD = urllib.parse.urlparse(os.environ.get("ETCD_ENDPOINT", "http://127.0.0.1:2379"))
HTTP = os.environ.get("FENCEGATE_HTTP_ADDR", "http://127.0.0.1:7080").rstrip("/")
PREFIX = os.environ.get("ELECTION_PREFIX", "/fencegate/elections")
ELECTION = os.environ.get("ELECTION", "python-example")
TTL = 2  # seconds; short, so the example is quick


class Candidate:
    """One worker's candidacy: its lease, its key, and once elected its token."""

    def __init__(self, name):
        self.name = name
        self.client = etcd3.client(host=ETCD.hostname, port=ETCD.port or 2379)
        self.lease = self.client.lease(TTL)
        self.key = "%s/%s/%x" % (PREFIX, ELECTION, self.lease.id)
        self.token = None
        self.paused = threading.Event()
        threading.Thread(target=self._keep_alive, daemon=True).start()

    def _keep_alive(self):
        while not self.paused.wait(TTL / 3):
            self.lease.refresh()

    def campaign(self):
        """Put our key and wait until every older key in the election is gone."""
        tx = self.client.transactions
        self.client.transaction(
            compare=[tx.create(self.key) == 0],
            success=[tx.put(self.key, self.name, self.lease)],
            failure=[],
        )
        _, meta = self.client.get(self.key)
        self.token = meta.create_revision
        while True:
            older = [
                m
                for _, m in self.client.get_prefix("%s/%s/" % (PREFIX, ELECTION))
                if m.create_revision < self.token
            ]
            if not older:
                return self.token
            last = max(older, key=lambda m: m.create_revision)
            # From the revision it was last seen at, so its deletion is not missed.
            try:
                self.client.watch_once(last.key, timeout=3 * TTL, start_revision=last.mod_revision + 1)
            except etcd3.exceptions.WatchTimedOut:
                pass

    def write(self, who):
        body = {
            "statements": [
                {
                    "sql": "INSERT INTO example_writes(example, worker, token) VALUES ($1, $2, $3)",
                    "params": ["python", who, self.token],
                }
            ]
        }
        r = requests.post(
            "%s/v1/fences/%s/sql" % (HTTP, ELECTION),
            json=body,
            headers={"Fencing-Token": str(self.token)},
            timeout=10,
        )
        if r.ok:
            print("%s writes with token %d: HTTP %d, accepted" % (who, self.token, r.status_code))
        else:
            reason = r.json()["details"][0]["reason"]
            print("%s writes with token %d: HTTP %d, refused: %s: %s"
                  % (who, self.token, r.status_code, reason, r.json()["message"]))
        sys.stdout.flush()
        return r

    def resign(self):
        self.paused.set()
        self.client.delete(self.key)
        self.lease.revoke()
        # No client.close(): python3-etcd3 0.12's watch thread then dies
        # on a closed channel with a traceback. Exiting ends it cleanly.


def main():
    a = Candidate("worker-a")
    print("worker-a leads with token %d" % a.campaign())
    a.write("worker-a")

    a.paused.set()
    print("worker-a pauses: no keep-alives; its lease expires in %ds" % TTL)
    sys.stdout.flush()

    b = Candidate("worker-b")
    print("worker-b leads with token %d" % b.campaign())
    b.write("worker-b")

    print("worker-a wakes up, still believing it leads")
    r = a.write("worker-a (zombie)")
    b.resign()
    return 0 if r.status_code == 409 else 1


if __name__ == "__main__":
    sys.exit(main())
