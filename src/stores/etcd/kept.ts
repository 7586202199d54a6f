/**
 * What the etcd store keeps of a response: the whole of it up to its size limit, else the 410 form.
 *
 * @module
 */
import { RESPONSE_NOT_KEPT_HEADER, type StoredResponse } from '../../core/record.js';

/**
 * `response` as the store saves it: unchanged when its body is at most `maxBytes` long; otherwise without
 * its body and with {@link RESPONSE_NOT_KEPT_HEADER} set to the body's length, so a replay is answered 410
 * `idempotency-response-not-kept` instead of running the work again (etcd refuses a request larger than
 * its `--max-request-bytes`, 1.5 MiB by default).
 */
export function keptResponse(response: StoredResponse, maxBytes: number): StoredResponse {
  if (response.body.byteLength <= maxBytes) return response;
  return { status: response.status, headers: { ...response.headers, [RESPONSE_NOT_KEPT_HEADER]: String(response.body.byteLength) }, body: new Uint8Array(0) };
}
