/* global URLSearchParams */
// The indeterminate panel: records `retrysafe gateway` holds because the upstream's outcome is unknown
// (it timed out or the exchange broke after the request was sent). Retries get 502/504 until an operator
// resolves each one, as `retrysafe gateway resolve` does: "mark done with this response" (it took effect;
// every retry replays that response) or "release" (it did not; the next retry sends the request).
import { useEffect, useState } from 'preact/hooks';
import { api, html, orGone, Outcome, short, Time, usePoll } from './lib.mjs';

export function Indeterminate({ info }) {
  const [cursors, setCursors] = useState([]);
  const [selected, setSelected] = useState(undefined);
  const after = cursors[cursors.length - 1];
  const query = new URLSearchParams({ state: 'indeterminate', limit: '25', ...(after && { afterScope: after.scope, afterKey: after.key }) });
  const [page, error, reload] = usePoll(() => api(`/api/keys?${query}`), [query.toString()]);
  return html`<main>
    <section class="list">
      <p class="where">Requests the gateway sent whose outcome is unknown. Ask the upstream whether each took effect, then resolve it.</p>
      ${error && html`<p class="error">${error}</p>`}
      <table id="held">
        <thead><tr><th>scope</th><th>key</th><th>cause</th><th>retries get</th><th>claimed</th><th>held until</th></tr></thead>
        <tbody>${(page?.records ?? []).map((r) => html`<tr key=${r.scope + '\n' + r.key} class=${selected?.key === r.key && selected?.scope === r.scope ? 'selected' : ''} onClick=${() => setSelected({ scope: r.scope, key: r.key })}>
          <td>${r.scope}</td><td>${r.key}</td><td class="stuck">${r.indeterminate.cause}</td><td>${r.indeterminate.status}</td>
          <td><${Time} iso=${r.createdAt} /></td><td><${Time} iso=${r.leaseExpiresAt} /></td></tr>`)}</tbody>
      </table>
      ${page && page.records.length === 0 && html`<p>No indeterminate records.</p>`}
      <p>
        <button disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>previous</button>
        <button disabled=${!page?.next} onClick=${() => setCursors([...cursors, page.next])}>next</button>
      </p>
    </section>
    ${selected && html`<${Resolve} info=${info} which=${selected} onChange=${reload} />`}
  </main>`;
}

/** What the record is now, in words. */
function nowIs(record) {
  if (record === null) return 'gone: the next retry sends the request to the upstream';
  if (record.indeterminate) return `indeterminate (${record.indeterminate.cause}): retries get ${record.indeterminate.status}`;
  if (record.state === 'completed') return `completed with status ${record.status}: every retry replays it`;
  return `in progress under lease ${short(record.leaseToken)}: a retry is running`;
}

function Resolve({ info, which, onChange }) {
  const [record, error, reload] = usePoll(() => orGone(`/api/key?${new URLSearchParams(which)}`), [which.scope, which.key]);
  const [response, setResponse] = useState({ status: '200', type: 'application/json', body: '' });
  const [outcome, setOutcome] = useState(undefined);
  const [busy, setBusy] = useState(false);
  useEffect(() => setOutcome(undefined), [which.scope, which.key]);
  const field = (name) => (event) => setResponse({ ...response, [name]: event.target.value });
  const resolve = async (action) => {
    const ask = { scope: record.scope, key: record.key, leaseToken: record.leaseToken, action };
    const given = action === 'complete' ? { status: Number(response.status), headers: response.type === '' ? {} : { 'content-type': response.type }, body: response.body } : {};
    setBusy(true);
    let result;
    try {
      await api('/api/indeterminate/resolve', { ...ask, ...given });
      result = { ok: true, text: action === 'complete' ? `Marked done with status ${response.status}.` : 'Released.' };
    } catch (e) {
      result = { ok: false, text: `Not resolved: ${e.message}.` };
    }
    await reload();
    onChange();
    setOutcome(result);
    setBusy(false);
  };
  const open = record?.indeterminate != null && info.allowActions && !busy;
  return html`<aside class="detail" id="resolve">
    <h2>${which.key}</h2>
    ${error && html`<p class="error">${error}</p>`}
    ${record !== undefined && html`<p id="now">Now ${nowIs(record)}.</p>`}
    ${record?.indeterminate && html`<form class="resolve" onSubmit=${(e) => e.preventDefault()}>
      <label>status <input name="status" type="number" min="100" max="599" value=${response.status} onInput=${field('status')} /></label>
      <label>content-type <input name="content-type" value=${response.type} onInput=${field('type')} /></label>
      <label>body <textarea name="body" rows="4" value=${response.body} onInput=${field('body')}></textarea></label>
      <p>
        <button class="action" id="complete" disabled=${!open} title=${info.allowActions ? 'It took effect: every retry replays this response' : 'Read-only console'} onClick=${() => resolve('complete')}>Mark done with this response</button>
        <button class="action" id="held-release" disabled=${!open} title=${info.allowActions ? 'It did not take effect: the next retry sends the request' : 'Read-only console'} onClick=${() => resolve('release')}>Release</button>
      </p>
    </form>`}
    <${Outcome} outcome=${outcome} />
  </aside>`;
}
