/**
 * Regenerates the committed OpenAPI documents (`npm run openapi`). Run it when a
 * change to the wire is deliberate, and commit the diff with the change.
 */
import { writeFileSync } from 'node:fs';
import { renderDocuments } from './openapi.js';
import { OPENAPI_FILES } from './node.js';

const docs = renderDocuments();
writeFileSync(OPENAPI_FILES.agent, docs.agent);
writeFileSync(OPENAPI_FILES.admin, docs.admin);
console.log(`wrote ${OPENAPI_FILES.agent}\nwrote ${OPENAPI_FILES.admin}`);
