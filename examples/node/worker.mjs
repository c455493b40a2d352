// A Node worker: campaigns in etcd with the npm etcd3 package, and once
// elected writes a row through fencegate's HTTP API with fetch, its token
// in the Fencing-Token header. With --once it then resigns and exits;
// otherwise it writes again, as if still leader, for each line "write" on
// stdin, until stdin ends. demo.mjs drives two of them.
//
// Environment: ETCD_ENDPOINT (http://127.0.0.1:2379), FENCEGATE_HTTP_ADDR
// (http://127.0.0.1:7080), ELECTION_PREFIX (/fencegate/elections),
// ELECTION (node-example).
import { createInterface } from 'node:readline';
import { Etcd3, Election } from 'etcd3';

const ETCD = process.env.ETCD_ENDPOINT ?? 'http://127.0.0.1:2379';
const HTTP = (process.env.FENCEGATE_HTTP_ADDR ?? 'http://127.0.0.1:7080').replace(/\/$/, '');
const PREFIX = process.env.ELECTION_PREFIX ?? '/fencegate/elections';
const ELECTION = process.env.ELECTION ?? 'node-example';
const TTL = 2; // seconds; short, so the example is quick

const [name, mode] = process.argv.slice(2);

// etcd3 keeps candidates under `${Election.prefix}/<name>/<lease id>`:
// with fencegate's prefix, that is the layout fencegate watches (etcd's
// concurrency.Election's), and the leader is the oldest key.
Election.prefix = PREFIX;
const client = new Etcd3({ hosts: ETCD });
const campaign = client.election(ELECTION, TTL).campaign(name);
campaign.on('error', (err) => console.log(`${name}: campaign ended: ${err.message}`));
await campaign.wait();

// The token is the create revision of our key.
const key = await campaign.getCampaignKey();
const token = (await client.get(key).exec()).kvs[0].create_revision;
console.log(`${name} leads with token ${token}`);

async function write(who) {
  const res = await fetch(`${HTTP}/v1/fences/${encodeURIComponent(ELECTION)}/sql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Fencing-Token': token },
    body: JSON.stringify({
      statements: [{
        sql: 'INSERT INTO example_writes(example, worker, token) VALUES ($1, $2, $3)',
        params: ['node', who, Number(token)],
      }],
    }),
  });
  const body = await res.json();
  if (res.ok) {
    console.log(`${who} writes with token ${token}: HTTP ${res.status}, accepted`);
  } else {
    console.log(`${who} writes with token ${token}: HTTP ${res.status}, refused: ${body.details[0].reason}: ${body.message}`);
  }
  return res.status;
}

await write(name);
if (mode === '--once') {
  await campaign.resign();
} else {
  console.log(`${name} ready`);
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'write') await write(`${name} (zombie)`);
  }
  await campaign.resign().catch(() => {});
}
client.close();
