"""A worker that campaigns with kazoo's Election, as a Python service would.

Usage: kazoo_elect.py HOSTS ELECTION_PATH IDENTIFIER

Once elected it prints its fencing token (its candidate node's czxid) and
leads until a line (or EOF) on stdin, then resigns and exits.
"""
import sys

from kazoo.client import KazooClient

hosts, path, ident = sys.argv[1:4]
zk = KazooClient(hosts=hosts, timeout=2.0)
zk.start(timeout=10)


def lead():
    # kazoo names candidates <uuid>__lock__<seq>; the leader is the lowest.
    children = [c for c in zk.get_children(path) if c[-10:].isdigit()]
    leader = min(children, key=lambda c: int(c[-10:]))
    _, stat = zk.get(path + "/" + leader)
    print(stat.czxid, flush=True)
    sys.stdin.readline()


zk.Election(path, ident).run(lead)
zk.stop()
zk.close()
