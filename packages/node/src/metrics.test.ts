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

t.test('every metric named _total is a counter: none of the process gauges is named as one', async (t) => {
  const text = await new Metrics().exposition();
  const types = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => ({ name: m[1]!, type: m[2]! }));
  t.ok(types.length > 20, `${types.length} metrics`);
  t.same(types.filter((m) => m.name.endsWith('_total') && m.type !== 'counter'), [], 'no gauge, histogram or summary ends in _total');
  for (const name of ['nodejs_active_handles', 'nodejs_active_requests', 'nodejs_active_resources']) {
    t.same(types.find((m) => m.name === name), { name, type: 'gauge' }, `${name} (by type) is there: sum it for the total`);
  }
});
