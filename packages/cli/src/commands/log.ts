/**
 * The log for auditors: the digest, the export, and its verification.
 *
 * `apl log verify` reads the node's digest first, then streams the export and
 * re-applies it line by line with the core's ExportVerifier (never holding it
 * whole). The node keeps ticking while it is read, so the export may run past the
 * digest's index: the verifier's digest and state hash are taken where the export
 * crosses that index and compared with the node's, and the rest of the export is
 * verified too.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { Command } from 'commander';
import { ExportVerifier, type Verified } from '@apl/core';
import { parseJson, type AdminClient, type Digest } from '@apl/client';
import { act } from '../context.js';
import { MismatchError, UsageError } from '../exit.js';
import { bytes, fields, type Output } from '../output.js';
import { withAdmin } from './admin.js';

/** The index of an export record, read from its canonical text (`entry_hash` comes first), or by parsing it. */
function indexOf(line: string): number | null {
  const m = /^\{"entry_hash":"[0-9a-f]*","index":(\d+),/.exec(line);
  if (m) return Number(m[1]);
  try {
    const i = (parseJson(line) as { index?: unknown }).index;
    return typeof i === 'number' ? i : null;
  } catch {
    return null; // the verifier reports it
  }
}

export interface VerifyReport {
  ok: boolean;
  records: number;
  bytes: number;
  /** node is the digest the node reported before the export was read. */
  node: Digest;
  /** at_node_index is what the export leads to at the node's applied index. */
  at_node_index: Verified;
  /** end is what the whole export leads to. */
  end: Verified;
  message: string;
}

/** Verifies the node's export against its digest. */
export async function verifyLive(admin: AdminClient, out: Output): Promise<VerifyReport> {
  const node = await admin.getDigest();
  const v = new ExportVerifier();
  const progress = out.progress('verifying the log');
  let received = 0;
  let records = 0;
  let atNode: Verified | null = null;
  for await (const line of admin.exportLog({ onProgress: (b) => (received = b) })) {
    if (atNode === null) {
      const i = indexOf(line);
      if (i !== null && i > node.applied_index) atNode = v.result();
    }
    if (!v.push(line).ok) break;
    if (line.trim() !== '') records++;
    progress.update(`${records} records, ${bytes(received)}`);
  }
  const end = v.result();
  atNode ??= end;
  progress.done(`${records} records, ${bytes(received)}`);
  const report = { records, bytes: received, node, at_node_index: atNode, end };
  if (!end.ok) return { ...report, ok: false, message: `The export does not verify: line ${end.line}: ${end.reason}.` };
  if (!atNode.ok) return { ...report, ok: false, message: 'The export does not verify.' };
  if (atNode.digest !== node.digest || atNode.state_hash !== node.state_hash) {
    return {
      ...report, ok: false,
      message: `The export verifies, but at index ${node.applied_index} it leads to digest ${atNode.digest} and state hash ${atNode.state_hash}, while the node reports ${node.digest} and ${node.state_hash}.`,
    };
  }
  return { ...report, ok: true, message: `The log verifies: ${records} records re-applied; at index ${node.applied_index} the digest and the state hash are the node's.` };
}

/** Verifies an export saved in a file: what it leads to. */
async function verifyFile(path: string, out: Output): Promise<Verified> {
  const v = new ExportVerifier();
  const input = createReadStream(path);
  const opened = once(input, 'open').catch(() => {
    throw new UsageError(`There is no export file ${path}.`);
  });
  await opened;
  const progress = out.progress('verifying the file');
  let records = 0;
  for await (const line of createInterface({ input, crlfDelay: Infinity })) {
    if (!v.push(line).ok) break;
    if (line.trim() !== '') records++;
    progress.update(`${records} records`);
  }
  progress.done(`${records} records`);
  return v.result();
}

export function logCommand(): Command {
  const log = new Command('log').description('the hash-chained log, for auditors');

  log.command('digest').description('the ledger digest (hash-chain head), the applied index, the tick and the state hash')
    .action(act(async (ctx) => {
      const d = await withAdmin(ctx, (a) => a.getDigest());
      ctx.out.result(d, () => fields([['applied index', d.applied_index], ['tick', d.tick], ['digest', d.digest], ['state hash', d.state_hash]]));
    }));

  log.command('export').description('download the log as NDJSON (one record per line)')
    .option('-o, --out <file>', 'write it to a file (default: standard output)')
    .action(act<{ out?: string }>(async (ctx, _args, o) => {
      const sink = o.out === undefined ? process.stdout : createWriteStream(o.out);
      const progress = ctx.out.progress('exporting the log');
      let received = 0;
      let records = 0;
      await withAdmin(ctx, async (a) => {
        for await (const line of a.exportLog({ onProgress: (b) => (received = b) })) {
          if (!sink.write(`${line}\n`)) await once(sink, 'drain');
          records++;
          progress.update(`${records} records, ${bytes(received)}`);
        }
      });
      progress.done(`${records} records, ${bytes(received)}${o.out === undefined ? '' : ` written to ${o.out}`}`);
      if (sink !== process.stdout) {
        sink.end();
        await once(sink, 'finish');
      }
    }));

  log.command('verify')
    .description('download the export and verify it line by line against the node\'s digest and state hash (exit 6 when it does not check out)')
    .option('--file <export.ndjson>', 'verify a saved export instead, without a node: print what it leads to')
    .action(act<{ file?: string }>(async (ctx, _args, o) => {
      if (o.file !== undefined) {
        const r = await verifyFile(o.file, ctx.out);
        if (!r.ok) throw new MismatchError(`The export does not verify: line ${r.line}: ${r.reason}.`);
        ctx.out.result(r, () => fields([['records', r.records], ['applied index', r.applied], ['digest', r.digest], ['state hash', r.state_hash]]));
        return;
      }
      const r = await withAdmin(ctx, (a) => verifyLive(a, ctx.out));
      if (!r.ok) throw new MismatchError(r.message);
      const at = r.at_node_index as Extract<Verified, { ok: true }>;
      ctx.out.result(r, () => `${r.message}\n${fields([['applied index', r.node.applied_index], ['digest', at.digest], ['state hash', at.state_hash]])}`);
    }));

  return log;
}
