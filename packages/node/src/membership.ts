/**
 * The node's side of membership changes. Raft keeps the configuration in force (who
 * votes, who learns) and an opaque context per member; the node puts each member's
 * addresses there, so a member added at run time is reachable by every replica and
 * shown by GET /admin/v1/cluster without any configuration file knowing it.
 *
 * A member that applied its own removal writes a marker beside its data, so that it
 * keeps refusing to serve across restarts and says why.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { ConfState } from '@apl/raft';

/**
 * A learner is promoted only when it is at most this many entries behind the commit
 * index and streaming (not receiving a snapshot): a voter that cannot acknowledge new
 * entries would count toward the quorum and stall commits until it catches up.
 */
export const PROMOTE_LAG_ENTRIES_MAX = 1000;

/** A member's id: what its peer certificate names, in the configuration and the admin plane alike. */
export const MEMBER_ID = /^[a-z0-9][a-z0-9-]{0,31}$/;
export const MEMBER_ID_PHRASE = 'must be a node id (lowercase letters, digits and -, at most 32)';

const PEER_ADDR_PHRASE = 'must be host:port, the port from 1 to 65535';
const HTTPS_URL_PHRASE = 'must be an https URL (https://<host>:<port>): the planes speak https only';

/**
 * A plane's base URL. A member's addresses stay in the replicated configuration for
 * good, and its id is never used again, so one that can never be reached is refused.
 */
function httpsUrl() {
  return z.string().refine((u) => {
    try {
      const url = new URL(u);
      return url.protocol === 'https:' && url.hostname !== '' && url.username === '' && url.password === '' && url.search === '' && url.hash === '';
    } catch {
      return false;
    }
  }, HTTPS_URL_PHRASE).meta({ format: 'uri', pattern: '^https://' });
}

/** A member's addresses, as its configuration entry and the admin request name them. */
export const MemberAddresses = z.strictObject({
  /** host:port of its peer-mesh listener; its certificate names its id. */
  peer_addr: z.string().regex(/^[^\s:]+:\d{1,5}$/, { message: PEER_ADDR_PHRASE, abort: true }).refine((a) => {
    const port = Number(a.slice(a.lastIndexOf(':') + 1));
    return port >= 1 && port <= 65_535;
  }, PEER_ADDR_PHRASE).meta({ description: 'host:port of the member\'s peer-mesh listener, the port from 1 to 65535.' }),
  /** its agent-plane base URL, answered in 421 not_primary. */
  agent_url: httpsUrl(),
  /** its admin-plane base URL, shown by GET /admin/v1/cluster. */
  admin_url: httpsUrl().optional(),
});
export type MemberAddresses = z.infer<typeof MemberAddresses>;

export interface MemberView extends MemberAddresses {
  id: string;
  voter: boolean;
}

/** A member's context in the Raft configuration: its addresses as JSON. */
export function memberContext(a: MemberAddresses): string {
  return JSON.stringify(a.admin_url === undefined ? { peer_addr: a.peer_addr, agent_url: a.agent_url } : { peer_addr: a.peer_addr, agent_url: a.agent_url, admin_url: a.admin_url });
}

/**
 * The members in force with their addresses. A context that does not parse (a
 * bootstrap member whose context is empty) falls back to the configuration file's
 * entry for that id; a member known to neither has no address and is left out of the
 * mesh until its addresses are known.
 */
export function membersInForce(conf: ConfState, configured: readonly ({ id: string } & MemberAddresses)[]): MemberView[] {
  const out: MemberView[] = [];
  for (const id of [...conf.voters, ...conf.learners].sort()) {
    const parsed = MemberAddresses.safeParse(parseJson(conf.context[id]));
    const addresses = parsed.success ? parsed.data : configured.find((m) => m.id === id);
    if (!addresses) continue;
    out.push({ id, voter: conf.voters.includes(id), peer_addr: addresses.peer_addr, agent_url: addresses.agent_url, ...(addresses.admin_url ? { admin_url: addresses.admin_url } : {}) });
  }
  return out;
}

function parseJson(text: string | undefined): unknown {
  if (text === undefined || text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Where and when this member's removal was committed. */
export interface Removed {
  index: number;
  term: number;
}

const REMOVED_FILE = 'REMOVED';

export function writeRemoved(dataDir: string, r: Removed): void {
  writeFileSync(join(dataDir, REMOVED_FILE), `${JSON.stringify(r)}\n`);
}

export function readRemoved(dataDir: string): Removed | null {
  try {
    const v = JSON.parse(readFileSync(join(dataDir, REMOVED_FILE), 'utf8')) as Removed;
    return { index: Number(v.index), term: Number(v.term) };
  } catch {
    return null;
  }
}

const MEMBERS_FILE = 'MEMBERS';

/**
 * Writes the membership in force as this member last applied it (at `index`) to
 * `<data_dir>/MEMBERS`, so that a tool that starts the members while none runs (after
 * a host's crash) finds who they are without asking one: `npm run cluster` takes the
 * newest of its members' files.
 */
export function writeMembers(dataDir: string, index: number, conf: ConfState): void {
  const path = join(dataDir, MEMBERS_FILE);
  writeFileSync(`${path}.tmp`, `${JSON.stringify({ index, voters: conf.voters, learners: conf.learners, removed: conf.removed })}\n`);
  renameSync(`${path}.tmp`, path);
}
