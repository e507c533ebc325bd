// Small pure helpers over entries and byte strings shared by the core and the stores.
import type { Entry, HardState } from './types.js';

/** entryBytes is the size an entry counts for in flow control: its payload plus a fixed header. */
export function entryBytes(e: Entry): number {
  return e.data.length + ENTRY_HEADER_BYTES;
}

/** The header counted per entry, about the size of index, term and framing on the wire. */
const ENTRY_HEADER_BYTES = 24;

/**
 * limitBytes returns the longest prefix of `ents` whose size is at most `maxBytes`,
 * but always at least one entry, so that one large entry still makes progress.
 */
export function limitBytes(ents: Entry[], maxBytes: number): Entry[] {
  let total = 0;
  for (let k = 0; k < ents.length; k++) {
    total += entryBytes(ents[k] as Entry);
    if (total > maxBytes && k > 0) return ents.slice(0, k);
  }
  return ents;
}

export function bytesEqual(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

export function hardStateEqual(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

export const EMPTY_HARD_STATE: HardState = Object.freeze({ term: 0, vote: null, commit: 0 });

export function isSafeIndex(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}
