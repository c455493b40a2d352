# A worker writing with asyncpg (extended protocol, a named prepared
# statement for every statement it runs with arguments, a pool that runs
# its reset, RESET ALL among it, at every release, transactions with an
# isolation level) through fencegate's
# PostgreSQL listener, as TestDrivers runs it:
#   python3 asyncpg_worker.py <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token as server settings, SETs
# fencegate.token first unless set-token is -, then writes rows whose v
# starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
import asyncio
import sys

import asyncpg

port, fence, token, set_token, table, tag = sys.argv[1:7]
ins = f"INSERT INTO {table} (v) VALUES ($1)"


async def main():
    settings = {"fencegate.fence": fence, "fencegate.token": token}
    pool = await asyncpg.create_pool(host="127.0.0.1", port=int(port), user="worker", database="postgres",
                                     server_settings=settings, min_size=1, max_size=1)
    try:
        async with pool.acquire() as c:
            if set_token != "-":
                await c.execute(f"SET fencegate.token = {int(set_token)}")
                # Prepared and named, as asyncpg runs every fetch.
                if await c.fetchval("SHOW fencegate.token") != set_token:
                    raise RuntimeError("SHOW fencegate.token is not the token SET")
            for i in range(3):
                await c.execute(ins, f"{tag}-{i}")
            await c.executemany(ins, [(f"{tag}-m{i}",) for i in range(2)])
            async with c.transaction():
                # Prepared and named, in a block.
                want = set_token if set_token != "-" else token
                if await c.fetchval("SHOW fencegate.token") != want:
                    raise RuntimeError("SHOW fencegate.token in a transaction is not the token")
                await c.execute(ins, f"{tag}-tx")
                async with c.transaction():  # a savepoint
                    await c.execute(ins, f"{tag}-sp")
            async with c.transaction(isolation="serializable"):
                await c.execute(ins, f"{tag}-serializable")
            await c.copy_records_to_table(table, columns=["v"], records=[(f"{tag}-copy",)])
        # Released: the pool ran its reset (RESET ALL among it); the token
        # is the connection's still.
        async with pool.acquire() as c:
            await c.execute(ins, f"{tag}-again")
            n = await c.fetchval(f"SELECT count(*) FROM {table} WHERE v LIKE $1", tag + "-%")
        print("OK", n)
    finally:
        await pool.close()


try:
    asyncio.run(main())
except asyncpg.PostgresError as e:
    print("ERR", e.sqlstate, str(e).strip().splitlines()[0])
