// Proves that SIGTERM stops a node whose clients keep their connections busy: the
// process exits while its clients, kept alive, still send (before, it answered them
// for as long as they sent, and did not exit).
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TOKENS, testCerts } from '../support/node.js';
import { nodeEnv, spawnNode } from '../support/process.js';

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
