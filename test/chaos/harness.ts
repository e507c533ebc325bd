/**
 * The chaos run: a bank workload (purchases among parties' cash accounts and a
 * merchant, purchases the policy forbids, actions no rule permits, receipts that
 * discharge obligations, usage consumed, metered and billed) from concurrent agents
 * against three node processes, while a nemesis SIGKILLs the primary, stops the
 * primary gracefully between kills (SIGTERM: it hands leadership over while writes
 * wait for the transfer, then it is started again), pauses a node (SIGSTOP, then
 * SIGCONT) and partitions a node from its peers (TCP proxies on every peer link, cut
 * and healed). Agents send each request to a random live replica and
 * retry a 503, a 421 or a broken connection with the same transaction id, as the
 * SDK does.
 *
 * The nodes compact often and keep their Raft log in the smallest segments allowed
 * (64 KiB), so that a run fills many, reuses the ones compactions free, and kills
 * members in the middle of writing into reused ones. The whole stores sent to members
 * behind compaction are counted from the members' logs, and a transfer a member did
 * not install is logged with its reason.
 *
 * When the time is up, every fault is healed and every member restarted; the checker
 * then proves the promises:
 *   - every intent answered with a verdict is in every replica's log exactly once,
 *     with that verdict (refusals too: they are recorded);
 *   - an intent whose answer was lost (503, a broken connection) is there once or
 *     not at all, never twice;
 *   - conservation: over all accounts, debits equal credits per currency; every
 *     usage balance keeps 0 <= billed <= metered <= consumed;
 *   - every replica has the same state hash and ledger digest, and its export
 *     verifies (re-applied from the first record, every result and link checked);
 *   - no read went back in time: a linearizable read of a transaction acknowledged
 *     before the read was sent never answered 404.
 */
import { verifyExport } from '@apl/core';
import { bootstrapWorkload, Mix, type BenchRequest, type Fixtures } from '../bench/support/workload.js';
import { startCluster, type Cluster } from '../support/cluster.js';
import { TOKENS } from '../support/node.js';
import { tcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

export interface ChaosOptions {
  durationS: number;
  seed: number;
  agents: number;
  /** how many times the nemesis kills the primary, spread over the run; fewer (a run too short) fails a check. */
  killsMin: number;
  /** the members' configuration over CHAOS_ENV (`npm run chaos -- --server-env`). */
  env?: Record<string, string>;
  log: (line: string) => void;
}

export interface ChaosReport {
  ok: boolean;
  violations: string[];
  counts: {
    requests: number; answered: number; permitted: number; refused: number; unknown: number; retries: number;
    reads: number; staleReads: number; kills: number; restarts: number; pauses: number; partitions: number;
  };
  /**
   * The whole stores sent to members behind compaction, from the members' logs: the
   * senders' transfers a member installed and those that failed, the members' installs,
   * the transfers they refused or could not finish, and those whose snapshot Raft did
   * not take.
   */
  stores: { sent: number; failed: number; installed: number; receiveFailed: number; notTaken: number };
  /**
   * Each primary kill's failover: ms from the kill to the next intent committed through
   * the new primary, and what else happened before that intent committed (empty: the
   * kill alone). The 2 s target is for a primary's death; two things hold a commit
   * longer, and are listed: another fault the nemesis began (a pause, a partition, a
   * graceful restart), and a whole store sent to a member behind compaction (its
   * transfer ended, failed or was refused in the meantime), which a quorum that needs
   * that member waits for.
   */
  failovers: { ms: number; besides: string[] }[];
  applied: number;
}

/** The fate a client saw for a transaction: a verdict, or nothing usable. */
type Seen = { verdict: string } | { verdict: null };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class Rng {
  constructor(private s: number) {}
  next(): number {
    let x = this.s || 1;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.s = x >>> 0;
    return this.s / 0x1_0000_0000;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
  between(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
}

/**
 * The members' configuration in a run: commits confirmed or refused within 2 s, and a
 * log compacted every 500 entries keeping 50, held for no member behind, in segments of
 * 64 KiB, so that a member paused or cut off for a second or two falls behind compaction
 * and is sent the whole store, and segments are cut and used again all through the run.
 */
export const CHAOS_ENV: Readonly<Record<string, string>> = {
  APL_COMMIT_TIMEOUT_MS: '2000', APL_TICK_INTERVAL_MS: '500', APL_SNAPSHOT_INTERVAL_ENTRIES: '500', APL_SNAPSHOT_CATCHUP_ENTRIES: '50', APL_SNAPSHOT_HOLD_ENTRIES: '0',
  APL_RAFT_WAL_SEGMENT_BYTES: '65536', APL_LOG_LEVEL: 'info',
};

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const rng = new Rng(o.seed);
  const proxies = new Map<string, TcpProxy>();
  const stores = { sent: 0, failed: 0, installed: 0, receiveFailed: 0, notTaken: 0 };
  /** the failover under way: when the primary was killed, and what else happened since. */
  let failover: { killedAt: number; besides: string[] } | null = null;
  const duringFailover = (what: string) => {
    if (failover !== null && failover.besides.length < 3) failover.besides.push(`${what}, ${Date.now() - failover.killedAt} ms after the kill`);
  };
  const c = await startCluster({
    env: { ...CHAOS_ENV, ...o.env },
    onEvent: (id, line) => {
      if (!line.includes('"event":"snapshot_')) return;
      let e: { event?: string; ok?: boolean; from?: string; to?: string; err?: string; ms?: number };
      try {
        e = JSON.parse(line) as typeof e;
      } catch {
        return; // not a log line
      }
      if (e.event === 'snapshot_sent') {
        stores[e.ok === true ? 'sent' : 'failed']++;
        duringFailover(`a whole store sent by ${id} to ${e.to}, ${e.ok === true ? 'installed' : 'failed'} after ${e.ms} ms`);
      } else if (e.event === 'snapshot_installed') stores.installed++;
      else if (e.event === 'snapshot_not_taken') {
        stores.notTaken++;
        duringFailover(`a whole store received by ${id} and not taken`);
      } else if (e.event === 'snapshot_receive_failed') {
        stores.receiveFailed++;
        duringFailover(`a whole store to ${id} refused or cut`);
        o.log(`${id}: a store from ${e.from} was not installed: ${e.err}`);
      }
    },
    peerAddr: async (from, to) => {
      const p = await tcpProxy(to.ports.peer);
      proxies.set(`${from}>${to.id}`, p);
      return `127.0.0.1:${p.port}`;
    },
  });
  const ids = c.members.map((m) => m.id);
  const down = new Set<string>();
  const paused = new Set<string>();
  const counts = { requests: 0, answered: 0, permitted: 0, refused: 0, unknown: 0, retries: 0, reads: 0, staleReads: 0, kills: 0, restarts: 0, pauses: 0, partitions: 0 };
  const violations: string[] = [];
  const failovers: { ms: number; besides: string[] }[] = [];
  try {
    const leader = await c.leader(15_000);
    const runId = `c${o.seed}`;
    const admin = c.handle(leader);
    const fixtures = await bootstrapWorkload((who, path, body) => admin.admin.request('POST', path, { body, token: TOKENS[who] }), o.agents, runId);
    const fates = new Map<string, Seen>();
    /** per agent, its latest transactions acknowledged with a verdict, and when. */
    const acked = new Map<number, { txn: string; at: number }[]>();
    const deadline = Date.now() + o.durationS * 1000;

    const live = () => ids.filter((id) => !down.has(id) && !paused.has(id));
    const send = async (req: BenchRequest) => {
      for (let attempt = 0; attempt < 30; attempt++) {
        const at = rng.pick(live().length > 0 ? live() : ids);
        counts.requests++;
        const r = await c.handle(at).agent.request(req.method, req.path, { raw: req.body ?? '', headers: req.headers }).catch(() => null);
        if (r && r.status === 200) return r;
        // 503: maybe recorded; 421: no primary here now; 422 gateway_error: certainly
        // not recorded. Each may be resubmitted as it is, with the same transaction id.
        const retryable = r === null || r.status === 503 || r.status === 421 || (r.status === 422 && r.body?.error === 'gateway_error');
        if (!retryable) {
          const errors = (c.process(at)?.output() ?? '').split('\n').filter((l) => /"level":"(error|fatal)"|"level":50|"level":60/.test(l) || l.includes('"err"'));
          o.log(`${at} answered ${r.status}: ${errors.slice(-3).join(' | ')}`);
          return r;
        }
        counts.retries++;
        await sleep(100);
      }
      return null;
    };

    const agentLoop = async (k: number) => {
      const mix = new Mix({ ...fixtures, agents: [fixtures.agents[k]!] } as Fixtures, runId, o.seed * 31 + k, 0.15);
      const agent = fixtures.agents[k]!.uri;
      while (Date.now() < deadline) {
        const req = mix.next();
        if (req.method === 'GET') {
          await checkRead(k);
          continue;
        }
        const sentAt = Date.now();
        const r = await send(req);
        const key = `${agent}/${req.transaction!}`;
        if (r === null) {
          fates.set(key, { verdict: null });
          counts.unknown++;
          continue;
        }
        if (r.status !== 200) {
          violations.push(`${req.transaction}: answered ${r.status} ${r.text.slice(0, 160)}`);
          continue;
        }
        counts.answered++;
        const verdict = r.body.verdict as string;
        if (verdict === 'Permitted') counts.permitted++;
        else counts.refused++;
        fates.set(key, { verdict });
        const mine = acked.get(k) ?? [];
        mine.push({ txn: req.transaction!, at: Date.now() });
        if (mine.length > 50) mine.shift();
        acked.set(k, mine);
        // Time to recover: from the kill to the first intent sent after it and committed (by
        // the new primary; an answer to one sent before may have been on its way).
        if (failover !== null && sentAt >= failover.killedAt) {
          const { killedAt, besides } = failover;
          const ms = Date.now() - killedAt;
          failovers.push({ ms, besides });
          o.log(`failover: the first intent sent after the kill committed ${ms} ms after it${besides.length === 0 ? '' : ` (not the kill alone: ${besides.join('; ')})`}`);
          // A slow one is shown with what each member logged from the kill on (no requests).
          if (ms > SLOW_FAILOVER_MS) {
            for (const id of ids) for (const l of eventsSince(c.process(id)?.output() ?? '', killedAt - 200).slice(0, 40)) o.log(`  ${id}: ${l.slice(0, 300)}`);
          }
          failover = null;
        }
        mix.observe(req, r.status, r.text);
      }
    };

    /** A linearizable read of a transaction this agent had acknowledged must find it. */
    const checkRead = async (k: number) => {
      const mine = acked.get(k) ?? [];
      const pick = mine[mine.length - 1 - Math.floor(rng.next() * Math.min(mine.length, 5))];
      if (!pick) return;
      const at = rng.pick(live().length > 0 ? live() : ids);
      const r = await c.handle(at).agent.request('GET', `/api/v1/transactions/${pick.txn}`, { headers: { authorization: `Bearer ${fixtures.agents[k]!.attestation}` } }).catch(() => null);
      if (!r) return;
      counts.reads++;
      if (r.status === 404) {
        counts.staleReads++;
        violations.push(`a read of ${pick.txn} on ${at}, acknowledged ${Date.now() - pick.at} ms before, answered 404`);
      }
    };

    const nemesis = async () => {
      const kills = o.killsMin;
      const killEvery = (o.durationS * 1000) / (kills + 1);
      let nextKill = Date.now() + killEvery;
      // A graceful stop of the primary halfway between two kills.
      let nextRestart = Date.now() + killEvery / 2;
      while (Date.now() < deadline - 3_000) {
        if (Date.now() >= nextRestart) {
          nextRestart += killEvery;
          const primary = await c.leader(10_000).catch(() => null);
          if (primary) {
            o.log(`nemesis: SIGTERM the primary ${primary}, then start it again`);
            duringFailover(`a graceful restart of ${primary}`);
            down.add(primary);
            await c.stop(primary);
            counts.restarts++;
            await sleep(rng.between(500, 1_500));
            await c.start(primary);
            down.delete(primary);
            continue;
          }
        }
        if (Date.now() >= nextKill && counts.kills < kills) {
          nextKill += killEvery;
          const primary = await c.leader(10_000).catch(() => null);
          if (primary) {
            o.log(`nemesis: SIGKILL the primary ${primary}`);
            await c.kill(primary);
            down.add(primary);
            failover = { killedAt: Date.now(), besides: [] };
            counts.kills++;
            await sleep(rng.between(1_000, 3_000));
            await c.start(primary);
            down.delete(primary);
            continue;
          }
        }
        const fault = rng.next();
        const victim = rng.pick(ids.filter((id) => !down.has(id)));
        if (fault < 0.5) {
          o.log(`nemesis: pause ${victim}`);
          duringFailover(`a pause of ${victim}`);
          process.kill(c.process(victim)!.pid, 'SIGSTOP');
          paused.add(victim);
          counts.pauses++;
          await sleep(rng.between(500, 2_500));
          process.kill(c.process(victim)!.pid, 'SIGCONT');
          paused.delete(victim);
        } else {
          o.log(`nemesis: partition ${victim} from its peers`);
          duringFailover(`a partition of ${victim}`);
          const links = [...proxies].filter(([k]) => k.startsWith(`${victim}>`) || k.endsWith(`>${victim}`)).map(([, p]) => p);
          for (const p of links) p.cut();
          counts.partitions++;
          await sleep(rng.between(1_000, 3_000));
          for (const p of links) p.heal();
        }
        await sleep(rng.between(1_000, 3_000));
      }
    };

    await Promise.all([nemesis(), ...fixtures.agents.map((_, k) => agentLoop(k))]);
    o.log(`load done: ${JSON.stringify(counts)}`);
    if (counts.kills < o.killsMin) violations.push(`the primary was killed ${counts.kills} times of the ${o.killsMin} asked: the run was too short for them (--duration-s)`);
    for (const p of proxies.values()) p.heal();
    for (const id of ids) {
      if (paused.has(id)) process.kill(c.process(id)!.pid, 'SIGCONT');
      if (!c.process(id)?.alive()) await c.start(id);
    }
    const accounts = [`acc_merchant_${runId}`, ...fixtures.agents.map((a) => a.cash)];
    const applied = await check(c, ids, fates, violations, accounts, fixtures.agents.map((a) => a.usage));
    return { ok: violations.length === 0, violations, counts, stores, failovers, applied };
  } finally {
    for (const id of ids) {
      const p = c.process(id);
      if (p?.alive()) process.kill(p.pid, 'SIGCONT');
    }
    await c.close();
    for (const p of proxies.values()) await p.close();
  }
}

/** Waits for the replicas to agree, then checks every promise; answers the applied index. */
async function check(c: Cluster, ids: string[], fates: Map<string, Seen>, violations: string[], accounts: string[], usages: string[]): Promise<number> {
  const digests = await converge(c, ids);
  const first = digests[0]!;
  for (const [k, d] of digests.entries()) {
    if (d.state_hash !== first.state_hash || d.digest !== first.digest) violations.push(`${ids[k]} has state ${d.state_hash} digest ${d.digest} at ${d.applied_index}; ${ids[0]} has ${first.state_hash} ${first.digest}`);
  }
  const exports: string[][] = [];
  for (const id of ids) {
    const exported = await adminGet(c, id, '/admin/v1/log/export?consistency=local');
    const v = verifyExport(exported.text);
    if (!v.ok) violations.push(`${id}'s export does not verify: line ${v.line}: ${v.reason}`);
    else {
      // The primary's ticks go on while the exports are read: compare each replay with the
      // replica's own digest at the same applied index.
      const now = (await adminGet(c, id, '/admin/v1/log/digest?consistency=local')).body as Digest;
      if (now.applied_index === v.applied && now.state_hash !== v.state_hash) violations.push(`${id}'s export replays to ${v.state_hash}, its state hash is ${now.state_hash} at ${v.applied}`);
      exports.push(exported.text.split('\n').filter(Boolean));
    }
    const posted = new Map<string, string[]>();
    for (const line of exported.text.split('\n')) {
      if (!line.includes('"SubmitIntent"')) continue;
      const r = JSON.parse(line) as { op: { transaction: string; agent: string }; result: { ok: boolean; value?: { kind: string; outcome?: { verdict: string } } } };
      if (r.result.value?.kind !== 'recorded') continue;
      const key = `${r.op.agent}/${r.op.transaction}`;
      posted.set(key, [...(posted.get(key) ?? []), r.result.value.outcome!.verdict]);
    }
    for (const [txn, seen] of fates) {
      const found = posted.get(txn) ?? [];
      if (found.length > 1) violations.push(`${id}: ${txn} is recorded ${found.length} times`);
      if (seen.verdict !== null && (found.length !== 1 || found[0] !== seen.verdict)) {
        violations.push(`${id}: ${txn} was answered ${seen.verdict} but the log holds ${JSON.stringify(found)}`);
      }
    }
  }
  // Every replica's log is the same log: the exports agree line for line on their common prefix.
  const common = Math.min(...exports.map((e) => e.length));
  for (let k = 1; k < exports.length; k++) {
    const at = exports[k]!.slice(0, common).findIndex((line, i) => line !== exports[0]![i]);
    if (at >= 0) violations.push(`${ids[k]}'s export differs from ${ids[0]}'s at record ${at}`);
  }
  for (const id of ids) await checkBooks(c, id, accounts, usages, violations);
  return first.applied_index;
}

interface Digest { applied_index: number; digest: string; state_hash: string }

/** An admin read that survives a connection kept alive across its node's restart (reset once reused). */
async function adminGet(c: Cluster, id: string, path: string): Promise<{ status: number; text: string; body: any }> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await c.handle(id).admin.request('GET', path, { token: TOKENS.operator });
    } catch (err) {
      if (attempt >= 5) throw err;
      await sleep(100);
    }
  }
}

async function converge(c: Cluster, ids: string[]): Promise<Digest[]> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ds = await Promise.all(ids.map(async (id) => {
      const r = await c.handle(id).admin.request('GET', '/admin/v1/log/digest?consistency=local', { token: TOKENS.operator }).catch(() => null);
      return r?.status === 200 ? (r.body as Digest) : null;
    }));
    if (ds.every((d) => d !== null) && new Set(ds.map((d) => d!.applied_index)).size === 1) return ds as Digest[];
    if (Date.now() > deadline) throw new Error(`the replicas did not converge in 60 s: ${JSON.stringify(ds)}`);
    await sleep(20);
  }
}

/**
 * On replica `id`: every account and usage balance the workload made is there,
 * conservation holds over the accounts, and the usage chain over each usage balance.
 */
async function checkBooks(c: Cluster, id: string, accounts: string[], usages: string[], violations: string[]): Promise<void> {
  const totals = new Map<string, { debits: bigint; credits: bigint; net: bigint }>();
  for (const account of accounts) {
    const a = await adminGet(c, id, `/admin/v1/accounts/${account}?consistency=local`);
    if (a.status !== 200) {
      violations.push(`${id}: account ${account} answered ${a.status} ${a.text}`);
      continue;
    }
    for (const b of (a.body as { balances: { currency: string; debits: bigint | number; credits: bigint | number; net: bigint | number }[] }).balances) {
      const t = totals.get(b.currency) ?? { debits: 0n, credits: 0n, net: 0n };
      t.debits += BigInt(b.debits);
      t.credits += BigInt(b.credits);
      t.net += BigInt(b.net);
      totals.set(b.currency, t);
    }
  }
  if (totals.size === 0) violations.push(`${id}: no account holds a balance: the workload posted nothing`);
  for (const [currency, t] of totals) {
    if (t.debits !== t.credits || t.net !== 0n) violations.push(`${id}: conservation broken in ${currency}: debits ${t.debits}, credits ${t.credits}, net ${t.net}`);
  }
  for (const usage of usages) {
    const r = await adminGet(c, id, `/admin/v1/usages/${usage}?consistency=local`);
    if (r.status !== 200) {
      violations.push(`${id}: usage balance ${usage} answered ${r.status} ${r.text}`);
      continue;
    }
    const v = r.body as { consumed: bigint | number; metered: bigint | number; billed: bigint | number };
    const [consumed, metered, billed] = [BigInt(v.consumed), BigInt(v.metered), BigInt(v.billed)];
    if (!(0n <= billed && billed <= metered && metered <= consumed)) violations.push(`${id}: usage chain broken in ${usage}: ${billed} <= ${metered} <= ${consumed}`);
  }
}

/** A failover slower than this is shown with the members' logs. */
const SLOW_FAILOVER_MS = 1000;

/** A member's log lines from `since` (epoch ms) on, without its request lines (output() names each line's stream first). */
function eventsSince(output: string, since: number): string[] {
  return output.split('\n').map((l) => l.replace(/^std(out|err): /, '')).filter((l) => {
    try {
      const r = JSON.parse(l) as { time?: string; event?: string };
      return Date.parse(r.time ?? '') >= since && r.event !== 'request';
    } catch {
      return false; // not a log line
    }
  });
}
