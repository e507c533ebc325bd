/**
 * The kinds of request `npm run bench -- frontend` answers from a sample of the node's
 * own answers: one per verdict the mix draws, and one per read.
 */
import type { BenchRequest } from './workload.js';

export const FRONTEND_KINDS = ['purchase', 'forbidden', 'receipt', 'usage', 'denied', 'transaction', 'balance'] as const;
export type FrontendKind = (typeof FRONTEND_KINDS)[number];

export function kindOfRequest(req: BenchRequest): FrontendKind {
  if (req.kind !== 'read') return req.kind;
  return req.path.startsWith('/api/v1/transactions/') ? 'transaction' : 'balance';
}
