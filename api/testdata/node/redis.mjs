// A worker writing with node-redis through fencegate's RESP listener, as
// api/resp's TestClientLibraries runs it:
//   node redis.mjs <port> <fence> <token> <auth-token|-> <tag> <2|3>
// It connects in RESP2 or RESP3 (HELLO 3 AUTH ...), AUTHs again with
// auth-token unless it is -, then writes keys {fence}:<tag>*: plain
// commands, MULTI/EXEC and a pipeline. It prints "OK" or "ERR <message>".
import { createClient } from 'redis';

const [port, fence, token, authToken, tag, resp] = process.argv.slice(2);
const r = createClient({
  socket: { host: '127.0.0.1', port: Number(port), reconnectStrategy: false },
  username: fence, password: token, name: 'node-worker', RESP: Number(resp),
});
r.on('error', () => {}); // the failed command says why
const k = `{${fence}}:${tag}`;
try {
  await r.connect();
  if (authToken !== '-') await r.auth({ username: fence, password: authToken });
  await r.set(k, 'v');
  if (await r.get(k) !== 'v') throw new Error('GET: not v');
  const m = await r.multi().rPush(`${k}-l`, ['a', 'b']).lRange(`${k}-l`, 0, -1).exec();
  if (JSON.stringify(m) !== '[2,["a","b"]]') throw new Error(`MULTI: ${JSON.stringify(m)}`);
  const p = await r.multi().incr(`${k}-n`).hSet(`${k}-h`, 'f', '1').execAsPipeline();
  if (JSON.stringify(p) !== '[1,1]') throw new Error(`pipeline: ${JSON.stringify(p)}`);
  console.log('OK');
} catch (e) {
  console.log(`ERR ${e.message}`);
} finally {
  await r.close().catch(() => {});
}
