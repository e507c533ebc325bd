// Proves that the series of a closed set of labels are exposed from the start, at 0:
// a rate or an alert on one of them sees "none yet" rather than no series at all.
import t from 'tap';
import { Metrics } from './metrics.js';

t.test('the counters of closed label sets start at 0, every series there before the first event', async (t) => {
  const text = await new Metrics().exposition();
  const series = [
    ...['foreign_cluster', 'unknown_member', 'sender_mismatch', 'malformed', 'superseded'].map((reason) => `apl_peer_refused_total{reason="${reason}"} 0`),
    ...['sent', 'received'].flatMap((direction) => ['installed', 'failed'].map((outcome) => `apl_peer_snapshots_total{direction="${direction}",outcome="${outcome}"} 0`)),
    ...['appended', 'refused', 'unconfirmed'].map((outcome) => `apl_forwarded_proposals_total{outcome="${outcome}"} 0`),
    ...['consumer_left', 'feed_lagging', 'shutting_down', 'member_removed', 'internal_error'].map((reason) => `apl_feed_ends_total{reason="${reason}"} 0`),
  ];
  for (const line of series) t.ok(text.split('\n').includes(line), line);
});
