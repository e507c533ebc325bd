/** The p-th percentile (0 to 100) of values sorted ascending, by the nearest rank below; 0 for none. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
