/**
 * An HTTP downstream that checks the `Fencing-Token` header as a fenced resource does: it accepts (204) a
 * token larger than any it accepted before and refuses (409) the others, keeping every token it saw.
 */
import { createServer } from 'node:http';

/** A started fenced downstream. */
export interface FencedDownstream {
  readonly url: string;
  /** Every token received, in order. */
  readonly seen: string[];
  close(): Promise<void>;
}

/** Starts a fenced downstream on a free loopback port. */
export async function fencedDownstream(): Promise<FencedDownstream> {
  let accepted = 0n;
  const seen: string[] = [];
  const server = createServer((req, res) => {
    const token = BigInt(req.headers['fencing-token'] as string);
    seen.push(String(token));
    res.statusCode = token > accepted ? 204 : 409;
    if (token > accepted) accepted = token;
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/`;
  return { url, seen, close: () => new Promise((resolve) => server.close(() => resolve())) };
}
