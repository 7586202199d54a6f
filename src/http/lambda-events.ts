/**
 * API Gateway and Lambda function URL events seen as HTTP requests, and responses turned back into the
 * result shape each event's integration expects: REST APIs and HTTP APIs with payload format 1.0
 * (`APIGatewayProxyEvent`), HTTP APIs with payload format 2.0 and function URLs (`APIGatewayProxyEventV2`).
 * Source: AWS, "Working with AWS Lambda proxy integrations for HTTP APIs" (payload formats 1.0 and 2.0).
 *
 * @module
 */
import type { APIGatewayProxyEvent, APIGatewayProxyEventV2, APIGatewayProxyResult, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { CapturedResponse, OutgoingResponse } from './pipeline.js';

/** An event the HTTP wrapper takes. */
export type HttpEvent = APIGatewayProxyEvent | APIGatewayProxyEventV2;

/** The result shape of `E`'s integration: payload format 1.0 or 2.0. */
export type HttpResult<E extends HttpEvent> = E extends APIGatewayProxyEventV2 ? APIGatewayProxyStructuredResultV2 : APIGatewayProxyResult;

/** Whether `event` is in payload format 2.0 (HTTP API v2, function URL). */
function isV2(event: HttpEvent): event is APIGatewayProxyEventV2 {
  return (event as Partial<APIGatewayProxyEventV2>).version === '2.0';
}

/** What the pipeline needs of an event: method, path, raw query, header lookup and the body bytes. */
interface EventRequest {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** Lower-case name → value; several values of a header joined with `, `, as HTTP does. */
  readonly headers: ReadonlyMap<string, string>;
  readonly body: Uint8Array | string;
}

/** `event` as an HTTP request; a base64 body (`isBase64Encoded`) decoded to its bytes. */
export function eventRequest(event: HttpEvent): EventRequest {
  const headers = new Map<string, string>();
  const body = event.body === undefined || event.body === null ? '' : event.isBase64Encoded ? Buffer.from(event.body, 'base64') : event.body;
  if (isV2(event)) {
    for (const [name, value] of Object.entries(event.headers)) if (value !== undefined) add(headers, name, value);
    return { method: event.requestContext.http.method, path: event.rawPath, query: event.rawQueryString, headers, body };
  }
  // Payload format 1.0 has each header twice: `headers` (last value) and `multiValueHeaders` (all of them).
  const multi = event.multiValueHeaders as Record<string, string[] | undefined> | null | undefined;
  if (multi !== null && multi !== undefined && Object.keys(multi).length > 0) {
    for (const [name, values] of Object.entries(multi)) for (const value of values ?? []) add(headers, name, value);
  } else {
    for (const [name, value] of Object.entries(event.headers)) if (value !== undefined) add(headers, name, value);
  }
  const query = new URLSearchParams();
  const multiQuery = event.multiValueQueryStringParameters;
  if (multiQuery !== null) {
    for (const [name, values] of Object.entries(multiQuery)) for (const value of values ?? []) query.append(name, value);
  } else {
    for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) query.append(name, value);
  }
  return { method: event.httpMethod, path: event.path, query: query.toString(), headers, body };
}

/** Header names are case-insensitive (RFC 9110 section 5.1); repeated headers join with `, ` (section 5.3). */
function add(headers: Map<string, string>, name: string, value: string): void {
  const lower = name.toLowerCase();
  const before = headers.get(lower);
  headers.set(lower, before === undefined ? value : `${before}, ${value}`);
}

/** A handler's result as the pipeline captures it: lower-case headers, the body's bytes. */
export function capturedResult(result: APIGatewayProxyResult | APIGatewayProxyStructuredResultV2): CapturedResponse {
  const headers: Record<string, string> = {};
  const record = (name: string, value: boolean | number | string): void => {
    const lower = name.toLowerCase();
    headers[lower] = headers[lower] === undefined ? String(value) : `${headers[lower]}, ${String(value)}`;
  };
  for (const [name, value] of Object.entries(result.headers ?? {})) record(name, value);
  const multi = (result as APIGatewayProxyResult).multiValueHeaders;
  for (const [name, values] of Object.entries(multi ?? {})) for (const value of values) record(name, value);
  const text = result.body ?? '';
  const body = result.isBase64Encoded === true ? Buffer.from(text, 'base64') : Buffer.from(text, 'utf8');
  return { status: result.statusCode ?? 200, headers, body };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A replay or a problem in the result shape both payload formats take: a body that is valid UTF-8 goes as
 * text, any other as base64 (`isBase64Encoded: true`), so binary bodies replay byte for byte.
 */
export function eventResult(response: OutgoingResponse): APIGatewayProxyResult & APIGatewayProxyStructuredResultV2 {
  let body: string;
  let isBase64Encoded = false;
  try {
    body = utf8.decode(response.body);
  } catch {
    body = Buffer.from(response.body).toString('base64');
    isBase64Encoded = true;
  }
  return { statusCode: response.status, headers: { ...response.headers }, body, isBase64Encoded };
}
