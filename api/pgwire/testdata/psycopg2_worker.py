# A worker writing with psycopg2 (libpq: simple queries, the driver's own
# BEGIN) through fencegate's PostgreSQL listener, as TestDrivers runs it:
#   python3 psycopg2_worker.py <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the startup options, SETs
# fencegate.token first unless set-token is -, then writes rows whose v
# starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
import io
import sys

import psycopg2

port, fence, token, set_token, table, tag = sys.argv[1:7]
try:
    c = psycopg2.connect(host="127.0.0.1", port=port, user="worker", dbname="postgres",
                         options=f"-c fencegate.fence={fence} -c fencegate.token={token}")
    cur = c.cursor()
    if set_token != "-":
        # Outside a transaction: psycopg2 opens one before each statement
        # unless autocommit is on.
        c.autocommit = True
        cur.execute("SET fencegate.token = %s", (set_token,))
        c.autocommit = False
    ins = f"INSERT INTO {table} (v) VALUES (%s)"
    # psycopg2 opens a transaction with BEGIN before the first statement.
    cur.execute(ins, (tag + "-1",))
    cur.executemany(ins, [(tag + "-m1",), (tag + "-m2",)])
    c.commit()
    c.autocommit = True
    cur.execute(ins, (tag + "-auto",))
    cur.copy_expert(f"COPY {table} (v) FROM STDIN", io.StringIO(tag + "-copy\n"))
    cur.execute(f"SELECT count(*) FROM {table} WHERE v LIKE %s", (tag + "-%",))
    print("OK", cur.fetchone()[0])
except psycopg2.Error as e:
    print("ERR", e.pgcode, str(e).strip().splitlines()[0])
