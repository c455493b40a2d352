// A worker writing with ioredis through fencegate's RESP listener, as
// api/resp's TestClientLibraries runs it:
//   node ioredis.mjs <port> <fence> <token> <auth-token|-> <tag>
// It connects with AUTH <fence> <token> and ioredis's defaults (its ready
// check sends INFO), AUTHs again with auth-token unless it is -, then
// writes keys {fence}:<tag>*: plain commands, a pipeline and MULTI/EXEC.
// It prints "OK" or "ERR <message>".
import Redis from 'ioredis';

const [port, fence, token, authToken, tag] = process.argv.slice(2);
const r = new Redis({
  host: '127.0.0.1', port: Number(port), username: fence, password: token,
  connectionName: 'node-worker', lazyConnect: true, maxRetriesPerRequest: 0,
  retryStrategy: () => null,
});
r.on('error', () => {}); // the failed command says why
const k = `{${fence}}:${tag}`;
try {
  await r.connect();
  if (authToken !== '-') await r.call('AUTH', fence, authToken);
  await r.set(k, 'v');
  if (await r.get(k) !== 'v') throw new Error('GET: not v');
  const p = await r.pipeline().incr(`${k}-n`).hset(`${k}-h`, 'f', '1').exec();
  for (const [err] of p) if (err) throw err;
  const m = await r.multi().rpush(`${k}-l`, 'a', 'b').lrange(`${k}-l`, 0, -1).exec();
  if (JSON.stringify(m) !== '[[null,2],[null,["a","b"]]]') throw new Error(`MULTI: ${JSON.stringify(m)}`);
  console.log('OK');
} catch (e) {
  console.log(`ERR ${e.message}`);
} finally {
  r.disconnect();
}
