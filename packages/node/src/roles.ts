/**
 * The roles of admin principals. The four of DESIGN §6 (author, reviewer, approver,
 * operator) act through the log: they go into every operation a principal proposes,
 * and the commit point checks them. The `feed` role is the credential of a system
 * that follows the ledger (a settlement rail, downstream books): it may read the
 * change feed and nothing else. It never enters the log, so a log written here reads
 * the same on a replica that does not know it.
 */
import { ROLES, type Principal, type Role } from '@apl/core';

export const PLANE_ROLES = [...ROLES, 'feed'] as const;
export type PlaneRole = (typeof PLANE_ROLES)[number];

/** The roles that may read the change feed: the rail's own, and the operator's. */
export const FEED_READERS: readonly PlaneRole[] = ['feed', 'operator'];

export const mayReadFeed = (roles: readonly PlaneRole[]): boolean => roles.some((r) => FEED_READERS.includes(r));

const isLogRole = (r: PlaneRole): r is Role => (ROLES as readonly string[]).includes(r);

/** The principal as the log records it: its name and the roles the log knows. */
export function logPrincipal(name: string, roles: readonly PlaneRole[]): Principal {
  return { name, roles: roles.filter(isLogRole) };
}

/**
 * Why a principal may not use an admin route other than the feed, or null when it
 * may: a principal with no role but `feed` is confined to the feed.
 */
export function feedOnlyRefusal(name: string, roles: readonly PlaneRole[]): string | null {
  if (roles.some(isLogRole)) return null;
  return `${name} may only read the change feed (GET /admin/v1/feed): its only role is feed.`;
}
