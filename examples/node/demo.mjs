// The Node example: worker-a leads and writes, then is frozen with
// SIGSTOP (a GC pause, a stalled VM). Its lease expires; worker-b is
// elected and writes. worker-a is thawed and, still believing it leads,
// writes again with its old token: fencegate refuses it. Exits 0 when
// both leaders' writes were accepted and the zombie's refused.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const worker = fileURLToPath(new URL('./worker.mjs', import.meta.url));

function start(name, ...args) {
  const p = spawn(process.execPath, [worker, name, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: p.stdout });
  const waiters = [];
  const seen = [];
  lines.on('line', (line) => {
    console.log(line);
    seen.push(line);
    for (const w of waiters.splice(0)) w();
  });
  p.until = async (re) => {
    for (;;) {
      const hit = seen.find((l) => re.test(l));
      if (hit) return hit;
      await new Promise((resolve) => waiters.push(resolve));
    }
  };
  p.exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
  return p;
}

const a = start('worker-a');
const aWrite = await a.until(/^worker-a writes/);
await a.until(/^worker-a ready/);
process.kill(a.pid, 'SIGSTOP');
console.log('worker-a frozen (SIGSTOP): no keep-alives, its lease expires');

const b = start('worker-b', '--once');
const bWrite = await b.until(/^worker-b writes/);
await b.exited;

// The request is queued while worker-a is still frozen: the first thing
// it does when thawed is to write, as if nothing had happened.
a.stdin.write('write\n');
a.stdin.end();
process.kill(a.pid, 'SIGCONT');
console.log('worker-a thawed, still believing it leads');
const zombie = await a.until(/^worker-a \(zombie\) writes/);
await a.exited;

const ok = /accepted/.test(aWrite) && /accepted/.test(bWrite) && /HTTP 409, refused: (STALE_TOKEN|TERM_ENDED)/.test(zombie);
process.exit(ok ? 0 : 1);
