// Proves that a failed peer call is reported by what failed alone: grpc-js ends a
// connection failure with "Resolution note: " and the resolver's note, empty for a
// peer given by its address, which the log line and the forward's error leave off.
import t from 'tap';
import { callError } from './mesh.js';

t.test('a failed call says what failed, without an empty resolution note', async (t) => {
  t.equal(callError({ details: 'No connection established. Last error: connect ECONNREFUSED 127.0.0.1:23125. Resolution note: ', message: '' }),
    'No connection established. Last error: connect ECONNREFUSED 127.0.0.1:23125');
  t.equal(callError({ details: 'No connection established. Last error: x. Resolution note: DNS lookup failed', message: '' }),
    'No connection established. Last error: x. Resolution note: DNS lookup failed', 'a note that says something is kept');
  t.equal(callError({ details: '', message: '14 UNAVAILABLE: Connection dropped' }), '14 UNAVAILABLE: Connection dropped', 'the message when there are no details');
});
