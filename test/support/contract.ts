/**
 * The contract check: every response body a test receives is validated against the
 * committed OpenAPI document of its plane (the route, method and status select the
 * schema), and so are the headers it declares required. A body or a header the
 * document does not describe fails the test that received it.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { OPENAPI_FILES } from '@apl/node';
import type { Response } from './node.js';

type Header = { required?: boolean; schema: { enum?: string[] } };
type Doc = { paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, Header>; content?: Record<string, { schema: unknown }> }> }>> };

const docs = { agent: load(OPENAPI_FILES.agent), admin: load(OPENAPI_FILES.admin) };

function load(file: string): { doc: Doc; ajv: Ajv2020 } {
  // JSON.parse is right here: the schema bounds are doubles, and response integers
  // beyond 2^53 only need to be integers to match `type: integer`.
  const doc = JSON.parse(readFileSync(file, 'utf8')) as Doc & { components: unknown };
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema({ ...doc, $id: 'openapi' } as object);
  return { doc, ajv };
}

function route(doc: Doc, path: string): string | null {
  const bare = path.split('?')[0]!;
  for (const template of Object.keys(doc.paths)) {
    const re = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (re.test(bare)) return template;
  }
  return null;
}

/** Throws when the response is not described by the plane's document. */
export function contract(plane: 'agent' | 'admin', method: string, path: string, r: Response): void {
  const { doc, ajv } = docs[plane];
  const template = route(doc, path);
  if (template === null) {
    if (r.status === 404 && r.body?.error === 'not_found') return;
    throw new Error(`contract: ${method} ${path} is not in the ${plane} document`);
  }
  const op = doc.paths[template]![method.toLowerCase()];
  if (!op) {
    if (r.status === 404 && r.body?.error === 'not_found') return;
    if (r.status === 405 && r.body?.error === 'method_not_allowed' && r.headers.allow !== undefined) return;
    throw new Error(`contract: ${method} ${template} is not in the ${plane} document`);
  }
  const resp = op.responses[String(r.status)];
  if (!resp) throw new Error(`contract: ${method} ${template} does not document status ${r.status} (${r.text.slice(0, 200)})`);
  for (const [name, h] of Object.entries(resp.headers ?? {})) {
    const value = r.headers[name.toLowerCase()];
    if (value === undefined) {
      if (h.required) throw new Error(`contract: ${method} ${path} ${r.status} lacks the ${name} header the document requires`);
    } else if (h.schema.enum && !h.schema.enum.includes(String(value))) {
      throw new Error(`contract: ${method} ${path} ${r.status} has ${name}: ${String(value)}, not one of ${h.schema.enum.join(', ')}`);
    }
  }
  const type = String(r.headers['content-type'] ?? '').split(';')[0]!;
  const content = resp.content?.[type];
  if (!resp.content) return;
  if (!content) throw new Error(`contract: ${method} ${template} ${r.status} does not document ${type}`);
  const pointer = `openapi#/paths/${template.replace(/~/g, '~0').replace(/\//g, '~1')}/${method.toLowerCase()}/responses/${r.status}/content/${type.replace(/\//g, '~1')}/schema`;
  const validate = ajv.getSchema(pointer);
  if (!validate) throw new Error(`contract: no schema at ${pointer}`);
  const body = type === 'application/json' ? JSON.parse(r.text) : r.text;
  if (!validate(body)) {
    throw new Error(`contract: ${method} ${path} ${r.status} does not match the document: ${ajv.errorsText(validate.errors)}\n${r.text.slice(0, 500)}`);
  }
}
