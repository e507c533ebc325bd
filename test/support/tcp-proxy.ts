/**
 * Test support: a TCP proxy on a free port of 127.0.0.1 in front of one address, which
 * a test can cut (every connection through it is destroyed and new ones are refused
 * at once) and heal. TLS passes through it untouched, so the peer mesh's mutual TLS
 * works across it; placed between two members it partitions them.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  port: number;
  cut(): void;
  heal(): void;
  readonly isCut: boolean;
  close(): Promise<void>;
}

export async function tcpProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let cut = false;
  const server: Server = createServer((client) => {
    if (cut) {
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const destroyAll = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    port: (server.address() as { port: number }).port,
    cut: () => {
      cut = true;
      destroyAll();
    },
    heal: () => {
      cut = false;
    },
    get isCut() {
      return cut;
    },
    close: () => {
      destroyAll();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
