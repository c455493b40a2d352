# A worker writing with psycopg 3 (extended protocol, server-side
# parameters, prepared statements, pipeline mode) through fencegate's
# PostgreSQL listener, as TestDrivers runs it:
#   python3 psycopg_worker.py <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the startup options, SETs
# fencegate.token first unless set-token is -, then writes rows whose v
# starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
import sys

import psycopg
from psycopg import sql

port, fence, token, set_token, table, tag = sys.argv[1:7]
ins = f"INSERT INTO {table} (v) VALUES (%s)"
try:
    # prepare_threshold=1: the second run of a statement is prepared.
    with psycopg.connect(host="127.0.0.1", port=port, user="worker", dbname="postgres",
                         options=f"-c fencegate.fence={fence} -c fencegate.token={token}",
                         prepare_threshold=1) as c:
        if set_token != "-":
            # Outside a transaction: psycopg opens one before each
            # statement unless autocommit is on.
            c.autocommit = True
            c.execute(sql.SQL("SET fencegate.token = {}").format(sql.Literal(set_token)))
            c.autocommit = False
        for i in range(3):
            c.execute(ins, (f"{tag}-{i}",))
        c.commit()
        with c.cursor() as cur:
            cur.executemany(ins, [(f"{tag}-m{i}",) for i in range(3)])
        c.commit()
        with c.pipeline():
            for i in range(3):
                c.execute(ins, (f"{tag}-p{i}",))
        c.commit()
        with c.transaction():
            c.execute(ins, (f"{tag}-tx",))
            with c.transaction():  # a savepoint
                c.execute(ins, (f"{tag}-sp",))
        with c.cursor() as cur:
            with cur.copy(f"COPY {table} (v) FROM STDIN") as cp:
                cp.write_row((f"{tag}-copy",))
        c.commit()
        c.autocommit = True
        with c.pipeline():
            for i in range(2):
                c.execute(ins, (f"{tag}-ap{i}",))
        n = c.execute(f"SELECT count(*) FROM {table} WHERE v LIKE %s", (tag + "-%",)).fetchone()[0]
        print("OK", n)
except psycopg.Error as e:
    print("ERR", e.sqlstate, str(e).strip().splitlines()[0])
