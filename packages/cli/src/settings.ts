/**
 * Where apl finds the node and who it acts as. Every setting has a flag and an
 * `APL_` variable, and a default that fits the node `npm start` runs: its data
 * directory holds the development CA, the admin tokens and (after `apl dev init`)
 * the development issuer.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { AdminClient, AgentClient } from '@apl/client';
import { UsageError } from './exit.js';

export interface GlobalOptions {
  dataDir: string;
  agentUrl: string;
  adminUrl: string;
  ca?: string;
  cert?: string;
  key?: string;
  tokens?: string;
  as: string;
  token?: string;
  attestation?: string;
  json?: boolean;
}

export const DEFAULTS = {
  dataDir: '.data/standalone',
  agentUrl: 'https://127.0.0.1:8443',
  adminUrl: 'https://127.0.0.1:9443',
  as: 'dev-author',
};

export class Settings {
  constructor(readonly o: GlobalOptions) {}

  get dataDir(): string {
    return resolve(this.o.dataDir);
  }
  get json(): boolean {
    return this.o.json === true;
  }
  /** The CA file: the one given, else the development node's when it exists, else none (the system's). */
  get caFile(): string | null {
    if (this.o.ca !== undefined) return resolve(this.o.ca);
    const dev = join(this.dataDir, 'certs/ca.pem');
    return existsSync(dev) ? dev : null;
  }
  get tokensFile(): string {
    return resolve(this.o.tokens ?? join(this.dataDir, 'admin-tokens.json'));
  }
  /** The directory of the development issuer that `apl dev init` makes. */
  get issuerDir(): string {
    return join(this.dataDir, 'issuer');
  }
  /** The plane's addresses; one that is not an https URL is a usage error, naming the flag. */
  urls(plane: 'agent' | 'admin'): string[] {
    const flag = plane === 'agent' ? '--agent-url (APL_AGENT_URL)' : '--admin-url (APL_ADMIN_URL)';
    const urls = (plane === 'agent' ? this.o.agentUrl : this.o.adminUrl).split(',').map((u) => u.trim()).filter(Boolean);
    if (urls.length === 0) throw new UsageError(`${flag} names no address.`, `Give the ${plane} plane's https address, or several separated by commas.`);
    for (const u of urls) {
      let url: URL;
      try {
        url = new URL(u);
      } catch {
        throw new UsageError(`${flag}: "${u}" is not a URL.`, `Give the ${plane} plane's address as https://<host>:<port>.`);
      }
      if (url.protocol !== 'https:') throw new UsageError(`${flag}: ${u} is not https; the ledger is reached over https only.`, `Give the ${plane} plane's address as https://<host>:<port>.`);
    }
    return urls;
  }

  private ca(): Buffer | undefined {
    const file = this.caFile;
    if (file === null) return undefined;
    if (!existsSync(file)) throw new UsageError(`The CA file ${file} does not exist.`, 'Give the node\'s CA with --ca (APL_CA); a development node writes its own to <data-dir>/certs/ca.pem on first start (npm start).');
    return readFileSync(file);
  }

  /** The client certificate and key (--cert, --key), read; none when neither is given. */
  private clientCert(): { cert: Buffer; key: Buffer } | Record<string, never> {
    const { cert, key } = this.o;
    if (cert === undefined && key === undefined) return {};
    if (cert === undefined || key === undefined) throw new UsageError(`${cert === undefined ? '--key (APL_KEY)' : '--cert (APL_CERT)'} was given without ${cert === undefined ? '--cert (APL_CERT)' : '--key (APL_KEY)'}.`, 'A client certificate goes with its key: give both.');
    const read = (file: string, flag: string) => {
      if (!existsSync(file)) throw new UsageError(`The ${flag} file ${resolve(file)} does not exist.`, 'certs/dev-certs.sh <certs-dir> --client <name> makes a client certificate (<name>-client.pem) and its key (<name>-client-key.pem) from the cluster\'s CA.');
      return readFileSync(file);
    };
    return { cert: read(cert, '--cert'), key: read(key, '--key') };
  }

  /** The admin token: --token, else the principal's (--as) from the tokens file. */
  adminToken(principal = this.o.as): string {
    if (this.o.token !== undefined && principal === this.o.as) return this.o.token;
    const file = this.tokensFile;
    if (!existsSync(file)) {
      throw new UsageError(`There is no admin tokens file at ${file}.`, 'A development node writes one on first start (npm start); otherwise give a token with --token (APL_ADMIN_TOKEN) or the file with --tokens.');
    }
    let tokens: Record<string, { token?: unknown }>;
    try {
      tokens = JSON.parse(readFileSync(file, 'utf8')) as typeof tokens;
    } catch (err) {
      throw new UsageError(`The admin tokens file ${file} is not JSON: ${(err as Error).message}.`, 'It holds {"<principal>": {"token": "...", "roles": [...]}}.');
    }
    const t = tokens[principal]?.token;
    if (typeof t !== 'string') {
      throw new UsageError(`The admin tokens file ${file} has no principal ${principal}.`, `Act as one it has with --as (${Object.keys(tokens).join(', ') || 'it has none'}).`);
    }
    return t;
  }

  /** A client of the admin planes given; with `url`, of that one only (one of them). */
  admin(principal?: string, url?: string): AdminClient {
    const ca = this.ca();
    return new AdminClient({ url: url ?? this.urls('admin'), token: this.adminToken(principal), ...(ca ? { ca } : {}), ...this.clientCert() });
  }

  agent(attestation = this.o.attestation): AgentClient {
    const ca = this.ca();
    return new AgentClient({ url: this.urls('agent'), attestation, ...(ca ? { ca } : {}), ...this.clientCert() });
  }
}
