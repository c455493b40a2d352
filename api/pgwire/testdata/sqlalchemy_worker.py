# A worker writing with SQLAlchemy 1.4's ORM over psycopg2 (Debian's
# python3-sqlalchemy: an engine's pool with pre-ping, ORM sessions and
# their flushes, executemany, a serializable connection, autocommit,
# rollback of a flushed row) through fencegate's PostgreSQL listener, as
# TestDrivers runs it:
#   python3 sqlalchemy_worker.py <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the startup options, SETs
# fencegate.token on each new pooled connection unless set-token is -,
# then writes rows whose v starts with tag. It prints "OK <rows with tag>"
# or "ERR <SQLSTATE> <message>".
import sys

import psycopg2
from sqlalchemy import Column, Integer, String, create_engine, event, exc, select, text
from sqlalchemy.orm import Session, declarative_base

port, fence, token, set_token, table, tag = sys.argv[1:7]
engine = create_engine(
    f"postgresql+psycopg2://worker@127.0.0.1:{port}/postgres",
    connect_args={"options": f"-c fencegate.fence={fence} -c fencegate.token={token}"},
    pool_size=2, pool_pre_ping=True, future=True)

if set_token != "-":
    # A worker that learns its token after opening its pool gives it to
    # each connection as the pool opens it, outside any transaction;
    # insert=True puts it before the dialect's own first queries.
    @event.listens_for(engine, "connect", insert=True)
    def set_fence_token(dbapi_conn, _record):
        dbapi_conn.autocommit = True
        with dbapi_conn.cursor() as cur:
            cur.execute("SET fencegate.token = %s", (set_token,))
        dbapi_conn.autocommit = False

Base = declarative_base()


class Row(Base):
    __tablename__ = table
    id = Column(Integer, primary_key=True)
    v = Column(String)


try:
    with Session(engine) as s:
        # One flush: INSERT ... RETURNING per row, in the transaction
        # psycopg2 opens with BEGIN.
        s.add_all([Row(v=f"{tag}-orm1"), Row(v=f"{tag}-orm2")])
        s.commit()
        r = s.execute(select(Row).where(Row.v == f"{tag}-orm1")).scalar_one()
        r.v = f"{tag}-orm1u"
        s.commit()
        # A flushed row rolled back: not stored.
        s.add(Row(v=f"{tag}-rolledback"))
        s.flush()
        s.rollback()
    with engine.begin() as c:
        c.execute(text(f"INSERT INTO {table} (v) VALUES (:v)"), [{"v": f"{tag}-many{i}"} for i in range(3)])
    with engine.connect().execution_options(isolation_level="SERIALIZABLE") as c:
        c.execute(text(f"INSERT INTO {table} (v) VALUES (:v)"), {"v": f"{tag}-ser"})
        c.commit()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text(f"INSERT INTO {table} (v) VALUES (:v)"), {"v": f"{tag}-auto"})
        n = c.execute(text(f"SELECT count(*) FROM {table} WHERE v LIKE :p"), {"p": f"{tag}-%"}).scalar()
    print("OK", n)
except exc.DBAPIError as e:
    orig = e.orig
    if isinstance(orig, psycopg2.Error):
        print("ERR", orig.pgcode, str(orig).strip().splitlines()[0])
    else:
        print("ERR", None, str(e).strip().splitlines()[0])
