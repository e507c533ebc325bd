// Proves that SIGTERM stops a node whose clients keep their connections busy: the
// process exits while its clients, kept alive, still send (before, it answered them
// for as long as they sent, and did not exit); and that a SIGTERM sent while the node
// starts, even the moment its node_started line is read, stops it gracefully once it
// has started (before, the signal came before the node took it, and killed the process).
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TOKENS, testCerts } from '../support/node.js';
import { killOnExit } from '../support/cleanup.js';
import { MAIN_JS, NODE_FLAGS, nodeEnv, spawnNode } from '../support/process.js';
import { createInterface } from 'node:readline';

t.test('SIGTERM under a steady load on kept-alive connections: the node exits while its clients still send', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-graceful-'));
  const p = await spawnNode(nodeEnv(dir));
  t.teardown(async () => {
    await p.kill();
    rmSync(dir, { recursive: true, force: true });
  });
  const agent = new Agent({ ca: readFileSync(testCerts().ca), keepAlive: true, maxSockets: 4 });
  t.teardown(() => agent.destroy());
  let stopping = false;
  let afterStop = 0;
  let closedAfterStop = 0;
  const get = (url: string, token?: string) => new Promise<void>((resolve) => {
    const req = request(url, { agent, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
      if (stopping) {
        afterStop++;
        if (res.headers.connection === 'close') closedAfterStop++;
      }
      res.resume();
      res.on('end', () => resolve());
      res.on('error', () => resolve());
    });
    req.on('error', () => resolve());
    req.end();
  });
  // Four clients of each plane, each sending its next request as soon as the last is answered.
  const loops = [
    ...Array.from({ length: 4 }, () => `${p.agentUrl}/healthz`),
    ...Array.from({ length: 4 }, () => `${p.adminUrl}/admin/v1/log/digest`),
  ].map(async (url) => {
    while (p.alive()) await get(url, url.includes('/admin/') ? TOKENS.operator : undefined);
  });
  await new Promise((r) => setTimeout(r, 500));
  stopping = true;
  process.kill(p.pid, 'SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const exited = await Promise.race([p.exited.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 20_000)))]);
  clearTimeout(timer);
  // (Which answers come after the listeners close, and so close their connection, is
  // up to timing; listener.test.ts proves that they do.)
  t.ok(exited, `the node exited while its clients kept sending (${afterStop} answers after SIGTERM, ${closedAfterStop} of them closing their connection)`);
  await Promise.all(loops);
});

t.test('a SIGTERM while the node starts stops it gracefully once it has started', async (t) => {
  // Sent when the replica has opened (its first line, well before node_started), and,
  // in a second start, the moment node_started is read: both come before the start
  // returns to the code that used to take the signals.
  for (const at of ['replica_open', 'node_started']) {
    const dir = mkdtempSync(join(tmpdir(), 'apl-graceful-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const child = spawn(process.execPath, [...NODE_FLAGS, MAIN_JS], { env: nodeEnv(dir), stdio: ['ignore', 'pipe', 'ignore'] });
    killOnExit(child);
    const events: string[] = [];
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const event = /"event":"(\w+)"/.exec(line)?.[1];
      if (event === undefined) return;
      events.push(event);
      // Sent as the line is read, not a turn later.
      if (event === at) child.kill('SIGTERM');
    });
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((r) => child.once('exit', (c, s) => r([c, s])));
    t.same({ code, signal }, { code: 0, signal: null }, `at ${at}: it exited by itself, not by the signal`);
    t.same(events.filter((e) => ['node_started', 'signal', 'node_stopped'].includes(e)), ['node_started', 'signal', 'node_stopped'], `at ${at}: it started, then stopped as a graceful stop does`);
  }
});
