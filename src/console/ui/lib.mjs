/* global fetch, location, setInterval, clearInterval, URLSearchParams */
// What every view of the console's web UI shares: the API client, the poll, and the widgets for times,
// errors and the outcome of an action.
import { h } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);
const REFRESH_MS = 1500;
const fragment = new URLSearchParams(location.hash.slice(1));
const token = fragment.get('token');
const auth = token === null ? {} : { authorization: `Bearer ${token}` };

/** The key a copied link names (`#scope=…&key=…`), opened in the keys view at start; or undefined. */
export const linkedKey = fragment.get('key') === null ? undefined : { scope: fragment.get('scope') ?? '', key: fragment.get('key') };

/**
 * A link to the console with `which` (scope and key) opened. The token is left out: whoever opens it adds
 * their own (`&token=…`), so a link passed on never carries the sender's credential.
 */
export function keyLink(which) {
  return `${location.origin}${location.pathname}#${new URLSearchParams({ scope: which.scope, key: which.key })}`;
}

/**
 * Runs `act(item)` for each item, one after another, and tells how many succeeded and the first problem:
 * `{ ok, text }` for {@link Outcome}. `what` names the items ("stuck keys"), `done` the action ("Released").
 */
export async function each(items, act, what, done) {
  let succeeded = 0;
  let firstProblem;
  for (const item of items) {
    try {
      await act(item);
      succeeded++;
    } catch (e) {
      firstProblem ??= e.message;
    }
  }
  const failed = items.length - succeeded;
  const text = `${done} ${succeeded} of ${items.length} ${what}${failed === 0 ? '.' : `; ${failed} not (first problem: ${firstProblem}).`}`;
  return { ok: failed === 0, text };
}

/** Calls the API; a problem answer throws an Error carrying its `status` and its detail (or title) as message. */
export async function api(path, body) {
  const init = body === undefined ? { headers: auth } : { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) };
  const response = await fetch(path, init);
  const json = await response.json();
  if (!response.ok) throw Object.assign(new Error(json.detail ?? json.title), { status: response.status });
  return json;
}

/** `api(path)`, with a 404 read as `null`: the thing asked for is gone, which is an answer, not a failure. */
export function orGone(path) {
  return api(path).catch((error) => (error.status === 404 ? null : Promise.reject(error)));
}

/**
 * Polls `load` every REFRESH_MS; returns [data, error, reload]. Only the answer to the latest request is
 * shown: fetches can answer out of order, and an older one (say, the list before a filter was typed) must
 * not overwrite a newer one. `reload` resolves once an answer at least as new as its own is shown (when a
 * poll started after it, once that one's is), so what an action shows next is the store after the action.
 */
export function usePoll(load, deps) {
  const [state, setState] = useState({ data: undefined, error: undefined });
  const latest = useRef(0);
  const newest = useRef(Promise.resolve());
  const reload = useCallback(() => {
    const request = ++latest.current;
    const shown = load()
      .then(
        (data) => request === latest.current && setState({ data, error: undefined }),
        (error) => request === latest.current && setState((s) => ({ ...s, error: `Could not refresh: ${error.message}` })),
      )
      .then(() => (request === latest.current ? undefined : newest.current));
    newest.current = shown;
    return shown;
  }, deps);
  useEffect(() => {
    void reload();
    const timer = setInterval(reload, REFRESH_MS);
    return () => clearInterval(timer);
  }, [reload]);
  return [state.data, state.error, reload];
}

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
const UNITS = [['day', 86_400_000], ['hour', 3_600_000], ['minute', 60_000], ['second', 1000]];

/** How far `ms` (a time since the epoch) is from now, in words: "3 minutes ago", "in 20 seconds". */
function fromNow(ms) {
  const delta = ms - Date.now();
  for (const [unit, size] of UNITS) {
    if (Math.abs(delta) >= size || unit === 'second') return relative.format(Math.round(delta / size), unit);
  }
  return '';
}

/** A time (ISO 8601 UTC from the API) in the browser's time zone and relative to now, the UTC time on hover. */
export function Time({ iso }) {
  if (iso === null || iso === undefined) return '—';
  const at = new Date(iso);
  return html`<time datetime=${iso} title=${`${iso.replace('T', ' ').replace(/\.\d+Z$/, '')} UTC`}>${at.toLocaleString()} (${fromNow(at.getTime())})</time>`;
}

/** A table cell holding an error message: cut to the column's width, shown in full when clicked. */
export function ErrorCell({ text }) {
  const [full, setFull] = useState(false);
  if (text === null || text === undefined || text === '') return html`<td></td>`;
  return html`<td class=${full ? 'error-text full' : 'error-text'} title=${full ? 'Click to shorten' : 'Click to read in full'} onClick=${(e) => { e.stopPropagation(); setFull(!full); }}>${text}</td>`;
}

/** The outcome of an action: `{ ok, text }`, green when it worked, red with the problem when not. */
export function Outcome({ outcome }) {
  if (outcome === undefined) return null;
  return html`<p class=${outcome.ok ? 'message' : 'error'} role="status">${outcome.text}</p>`;
}

/** A lease token, shortened for a message. */
export function short(leaseToken) {
  return `${leaseToken.slice(0, 8)}…`;
}
