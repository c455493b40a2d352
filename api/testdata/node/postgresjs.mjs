// A worker writing with postgres.js (npm "postgres": named prepared
// statements for every query, queries pipelined on one connection,
// transactions with a savepoint and an isolation level, COPY FROM STDIN)
// through fencegate's PostgreSQL listener, as api/pgwire's TestDrivers
// runs it:
//   node postgresjs.mjs <port> <fence> <token> <set-token|-> <table> <tag>
// It connects with the fence and token as startup parameters, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
// Options may follow: fetch_types=false.
import postgres from 'postgres';

const [port, fence, token, setToken, table, tag, ...opts] = process.argv.slice(2);
const sql = postgres({
  host: '127.0.0.1', port: Number(port), user: 'worker', database: 'postgres',
  // One connection: the queries below that run at once share it, their
  // Parse/Bind/Execute/Sync sent back to back before any answer.
  max: 1, onnotice: () => {},
  // "fetch_types=false": no query of postgres.js's own before the worker's.
  fetch_types: !opts.includes('fetch_types=false'),
  connection: { 'fencegate.fence': fence, 'fencegate.token': token },
});
const t = sql(table);
let reported = false;
const fail = (e) => {
  if (!reported) console.log(`ERR ${e.code} ${String(e.message).split('\n')[0]}`);
  reported = true;
};
// postgres.js reads the array types with its first query on a new
// connection, and an error there (a zombie's token is refused for reads
// too) is a rejection nobody awaits: report it as the worker's error.
process.on('unhandledRejection', fail);
try {
  if (setToken !== '-') await sql.unsafe(`SET fencegate.token = '${setToken}'`);
  await sql`INSERT INTO ${t} ${sql({ v: `${tag}-1` })}`;
  await sql`INSERT INTO ${t} ${sql([{ v: `${tag}-m1` }, { v: `${tag}-m2` }])}`;
  // Four transactions pipelined: the listener fences each.
  await Promise.all([1, 2, 3, 4].map((i) => sql`INSERT INTO ${t} (v) VALUES (${`${tag}-p${i}`})`));
  await sql.begin(async (tx) => {
    await tx`INSERT INTO ${t} (v) VALUES (${`${tag}-tx`})`;
    // A savepoint rolled back: its row is not stored.
    await tx.savepoint(async (sp) => {
      await sp`INSERT INTO ${t} (v) VALUES (${`${tag}-sp`})`;
      throw new Error('roll back to the savepoint');
    }).catch((e) => { if (e.message !== 'roll back to the savepoint') throw e; });
  });
  await sql.begin('isolation level serializable', async (tx) => {
    await tx`INSERT INTO ${t} (v) VALUES (${`${tag}-ser`})`;
  });
  const w = await sql`COPY ${t} (v) FROM STDIN`.writable();
  await new Promise((resolve, reject) => {
    w.on('finish', resolve);
    w.on('error', reject);
    w.end(`${tag}-copy\n`);
  });
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM ${t} WHERE v LIKE ${`${tag}-%`}`;
  console.log(`OK ${n}`);
  reported = true;
} catch (e) {
  fail(e);
} finally {
  await sql.end({ timeout: 5 }).catch(() => {});
}
