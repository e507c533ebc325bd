/**
 * Action patterns, shared by capabilities, rule matches and repair-duty blocks:
 * an exact action name, `<prefix>.*` for every action under the prefix, or `*`.
 */

export function matchesPattern(pattern: string, action: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return action.startsWith(pattern.slice(0, -1));
  return pattern === action;
}

/** How specific a pattern is: an exact name beats every wildcard, a longer prefix a shorter one. */
function specificity(pattern: string): number {
  if (pattern === '*') return 0;
  if (pattern.endsWith('.*')) return pattern.length;
  return Number.MAX_SAFE_INTEGER;
}

/** The capability that grants `action`: the most specific one, or null when none does. */
export function grantingCapability(capabilities: readonly string[], action: string): string | null {
  let best: string | null = null;
  for (const cap of capabilities) {
    if (!matchesPattern(cap, action)) continue;
    if (best === null || specificity(cap) > specificity(best)) best = cap;
  }
  return best;
}
