// A worker writing with node-postgres through fencegate's PostgreSQL
// listener, as api/pgwire's TestDrivers runs it:
//   node pg.mjs <port> <fence> <token> <set-token|-> <table> <tag>
// It connects with the fence and token in the startup options, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
import pg from 'pg';

const [port, fence, token, setToken, table, tag] = process.argv.slice(2);
const c = new pg.Client({
  host: '127.0.0.1', port: Number(port), user: 'worker', database: 'postgres',
  options: `-c fencegate.fence=${fence} -c fencegate.token=${token}`,
});
const ins = `INSERT INTO ${table} (v) VALUES ($1)`;
try {
  await c.connect();
  if (setToken !== '-') await c.query(`SET fencegate.token = '${setToken}'`);
  // Unnamed statements (Parse/Bind/Execute/Sync), then a named one twice.
  await c.query(ins, [`${tag}-1`]);
  await c.query({ name: 'ins', text: ins, values: [`${tag}-named1`] });
  await c.query({ name: 'ins', text: ins, values: [`${tag}-named2`] });
  // An explicit transaction.
  await c.query('BEGIN');
  await c.query(ins, [`${tag}-tx1`]);
  await c.query(ins, [`${tag}-tx2`]);
  await c.query('COMMIT');
  // A text-only query (simple protocol) with two statements.
  await c.query(`INSERT INTO ${table} (v) VALUES ('${tag}-s1'); INSERT INTO ${table} (v) VALUES ('${tag}-s2')`);
  const r = await c.query(`SELECT count(*)::int AS n FROM ${table} WHERE v LIKE $1`, [`${tag}-%`]);
  console.log(`OK ${r.rows[0].n}`);
} catch (e) {
  console.log(`ERR ${e.code} ${String(e.message).split('\n')[0]}`);
} finally {
  await c.end().catch(() => {});
}
