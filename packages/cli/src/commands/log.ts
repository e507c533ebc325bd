/**
 * The log for auditors: the digest, the export, and its verification.
 *
 * `apl log verify` reads the node's digest first, then streams the export and
 * re-applies it line by line with the core's ExportVerifier (never holding it
 * whole). The node keeps ticking while it is read, so the export may run past the
 * digest's index: the verifier's digest and state hash are taken where the export
 * crosses that index and compared with the node's, and the rest of the export is
 * verified too.
 *
 * `apl log verify --file` checks a saved export without a node. A file with its last
 * records cut off is still a valid chain, so the auditor gives back the digest (and
 * its index) that `apl log export` printed: the file must lead to it there.
 */
import { createReadStream, createWriteStream, type ReadStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { StringDecoder } from 'node:string_decoder';
import { Command } from 'commander';
import type { ExportVerifier, Verified } from '@apl/core';
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

/**
 * A verifier of the core. The core is loaded only by the commands that verify: it is
 * most of what apl would load at every start (0.2 s of its 0.4 s).
 */
async function verifier(): Promise<ExportVerifier> {
  const { ExportVerifier } = await import('@apl/core');
  return new ExportVerifier();
}

/** Verifies the node's export against its digest. */
export async function verifyLive(admin: AdminClient, out: Output): Promise<VerifyReport> {
  const node = await admin.getDigest();
  const v = await verifier();
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
    records++;
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

/** The index and entry hash of the export's last record (read once, at its end); null when there is none. */
function lastOf(line: string): { index: number; digest: string } | null {
  let record: { index?: unknown; entry_hash?: unknown };
  try {
    record = parseJson(line) as typeof record;
  } catch {
    return null; // no record (an empty log), or none this command can name
  }
  const { index, entry_hash: digest } = record;
  return typeof index === 'number' && typeof digest === 'string' ? { index, digest } : null;
}

/** What an auditor recorded at export time: the digest, and the index it was taken at (null: the file's last record). */
interface Expected {
  digest: string;
  index: number | null;
}

interface FileReport {
  /** end is what the whole file leads to. */
  end: Verified;
  /** at_index is what it leads to at the expected index (the end when none is given). */
  at_index: Verified;
}

/** Verifies an export saved in a file: what it leads to, at its end and at `at` (the head after the last record at or before it). */
async function verifyFile(path: string, at: number | null, out: Output): Promise<FileReport> {
  const v = await verifier();
  const progress = out.progress('verifying the file');
  let records = 0;
  let atIndex: Verified | null = null;
  for await (const line of fileLines(path)) {
    if (at !== null && atIndex === null) {
      const i = indexOf(line);
      if (i !== null && i > at) atIndex = v.result();
    }
    if (!v.push(line).ok) break;
    records++;
    progress.update(`${records} records`);
  }
  progress.done(`${records} records`);
  const end = v.result();
  return { end, at_index: atIndex ?? end };
}

/**
 * The lines of an export file, split at line feeds alone: a carriage return stays in
 * its line for the verifier to name, and only the empty piece after the last line feed
 * is dropped, so the file is verified byte for byte as the library verifies its text.
 */
async function* fileLines(path: string): AsyncGenerator<string> {
  const input = createReadStream(path);
  await opened(input, path, 'read');
  const decoder = new StringDecoder('utf8');
  let rest = '';
  try {
    for await (const chunk of input) {
      rest += decoder.write(chunk as Buffer);
      let from = 0;
      for (let at = rest.indexOf('\n'); at >= 0; at = rest.indexOf('\n', from)) {
        yield rest.slice(from, at);
        from = at + 1;
      }
      rest = rest.slice(from);
    }
  } catch (err) {
    throw new UsageError(`Cannot read the export file ${path}: ${(err as Error).message}.`);
  }
  rest += decoder.end();
  if (rest !== '') yield rest;
}

/** Waits for a file stream to open; a file that is not there, or cannot be, is the caller's to fix (exit 2). */
async function opened(stream: ReadStream | WriteStream, path: string, to: 'read' | 'write'): Promise<void> {
  try {
    await once(stream, 'open');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (to === 'read' && e.code === 'ENOENT') throw new UsageError(`There is no export file ${path}.`);
    throw new UsageError(`Cannot ${to} ${path}: ${e.message}.`);
  }
}

/** The flags --digest and --index, checked. */
function expected(o: { digest?: string; index?: string }): Expected | null {
  if (o.digest === undefined) {
    if (o.index !== undefined) throw new UsageError('--index says where --digest was taken: give --digest too.');
    return null;
  }
  if (!/^[0-9a-f]{64}$/.test(o.digest)) throw new UsageError(`--digest must be 64 lowercase hexadecimal digits (a ledger digest), not "${o.digest}".`);
  if (o.index !== undefined && !/^[0-9]+$/.test(o.index)) throw new UsageError(`--index must be an integer from 0, not "${o.index}".`);
  return { digest: o.digest, index: o.index === undefined ? null : Number(o.index) };
}

/** `apl log verify --file`: the file verifies, and leads to the recorded digest when one is given. */
async function verifyOffline(file: string, want: Expected | null, out: Output): Promise<void> {
  const r = await verifyFile(file, want?.index ?? null, out);
  if (!r.end.ok) throw new MismatchError(`The export does not verify: line ${r.end.line}: ${r.end.reason}.`, r.end);
  const end = r.end;
  const at = r.at_index as Extract<Verified, { ok: true }>;
  if (want !== null && at.digest !== want.digest) {
    // The head at an index is the one after the last record at or before it: a file cut short names where it stops.
    const where = want.index === null ? `its last record (index ${end.applied})` : at.applied === want.index ? `index ${want.index}` : `index ${want.index} (its last record at or before it is index ${at.applied})`;
    throw new MismatchError(`The export verifies, but at ${where} it leads to digest ${at.digest}, not the ${want.digest} recorded: records are missing or the digest is of another log.`,
      { ...at, ok: false, expected: want });
  }
  const checked = want === null ? undefined : `the recorded one, at index ${want.index ?? end.applied}`;
  // An empty chain is a valid one, and so is an empty file from a redirect that failed.
  if (end.records === 0 && want === null) out.note(`apl: ${file} holds no records: a chain of none verifies. If it should hold a log, check it against the log's digest (apl log verify --file ${file} --digest <digest>).`);
  out.result({ ...end, ...(want === null ? {} : { expected: want }) }, () => fields([
    ['records', end.records], ['applied index', end.applied], ['digest', end.digest], ['state hash', end.state_hash], ['digest checked', checked],
  ]));
}

export function logCommand(): Command {
  const log = new Command('log').description('the hash-chained log, for auditors');

  log.command('digest').description('the ledger digest (hash-chain head), the applied index, the tick and the state hash')
    .action(act(async (ctx) => {
      const d = await withAdmin(ctx, (a) => a.getDigest());
      ctx.out.result(d, () => fields([['applied index', d.applied_index], ['tick', d.tick], ['digest', d.digest], ['state hash', d.state_hash]]));
    }));

  log.command('export').description('download the log as NDJSON (one record per line); it ends by saying the index and entry hash of the last record, for apl log verify --file --index --digest')
    .option('-o, --out <file>', 'write it to a file (default: standard output)')
    .action(act<{ out?: string }>(async (ctx, _args, o) => {
      const sink = o.out === undefined ? process.stdout : createWriteStream(o.out);
      // A write that fails (a full disk) is said at the next write, not left unhandled.
      let failed: Error | null = null;
      if (sink !== process.stdout) {
        await opened(sink as WriteStream, o.out!, 'write');
        sink.on('error', (err) => (failed ??= err));
      }
      const written = async (event?: 'drain' | 'finish') => {
        if (event !== undefined) await once(sink, event).catch((err: Error) => (failed ??= err));
        if (failed) throw new UsageError(`Cannot write ${o.out}: ${failed.message}.`);
      };
      const progress = ctx.out.progress('exporting the log');
      let received = 0;
      let records = 0;
      let lastLine = '';
      await withAdmin(ctx, async (a) => {
        for await (const line of a.exportLog({ onProgress: (b) => (received = b) })) {
          await written();
          if (!sink.write(`${line}\n`)) await written('drain');
          records++;
          lastLine = line;
          progress.update(`${records} records, ${bytes(received)}`);
        }
      });
      progress.done(`${records} records, ${bytes(received)}${o.out === undefined ? '' : ` written to ${o.out}`}`);
      if (sink !== process.stdout) {
        sink.end();
        await written('finish');
      }
      const last = lastOf(lastLine);
      const keep = last === null
        ? 'the log has no record yet'
        : `last record: index ${last.index}, entry hash ${last.digest}\nkeep them: apl log verify --file ${o.out ?? '<file>'} --index ${last.index} --digest ${last.digest} checks that nothing was cut off`;
      // Standard output holds the export itself unless --out moved it to a file.
      if (o.out === undefined) ctx.out.note(keep);
      else ctx.out.result({ file: o.out, records, bytes: received, last_index: last?.index ?? null, digest: last?.digest ?? null }, () => keep);
    }));

  log.command('verify')
    .description('download the export and verify it line by line against the node\'s digest and state hash (exit 6 when it does not check out)')
    .option('--file <export.ndjson>', 'verify a saved export instead, without a node: print what it leads to')
    .option('--digest <hex>', 'with --file: the digest recorded at export time (apl log export prints it); a file cut short does not lead to it')
    .option('--index <n>', 'with --digest: the index the digest was taken at (default: the file\'s last record)')
    .action(act<{ file?: string; digest?: string; index?: string }>(async (ctx, _args, o) => {
      const want = expected(o);
      if (o.file !== undefined) return verifyOffline(o.file, want, ctx.out);
      if (want !== null) throw new UsageError('--digest and --index check a saved export: give --file.', 'Without --file, apl log verify compares the export with the node\'s own digest.');
      const r = await withAdmin(ctx, (a) => verifyLive(a, ctx.out));
      if (!r.ok) throw new MismatchError(r.message, r);
      const at = r.at_node_index as Extract<Verified, { ok: true }>;
      ctx.out.result(r, () => `${r.message}\n${fields([['applied index', r.node.applied_index], ['digest', at.digest], ['state hash', at.state_hash]])}`);
    }));

  return log;
}
