/* global URLSearchParams */
// The client sessions view: sessions by client id prefix, paged.
import { useState } from 'preact/hooks';
import { api, html, Time, usePoll } from './lib.mjs';

export function Sessions({ info }) {
  const [client, setClient] = useState('');
  const [cursors, setCursors] = useState([]);
  const after = cursors[cursors.length - 1];
  const query = new URLSearchParams({ client, limit: '25', ...(after !== undefined && { after }) });
  const [page, error] = usePoll(() => api(`/api/sessions?${query}`), [query.toString()]);
  const state = (s) => (s.state === 'expired' ? 'expired' : s.leaseEnded ? 'lease ended' : 'live');
  return html`<main><section class="list">
    <form class="search" onSubmit=${(e) => e.preventDefault()}>
      <input name="client" placeholder="client id starts with" value=${client} onInput=${(e) => { setClient(e.target.value); setCursors([]); }} />
    </form>
    <p class="where">Client sessions in ${info.sessions.location}. A saved response is kept for retries of its request until the client's low-water mark passes it.</p>
    ${error && html`<p class="error">${error}</p>`}
    <table id="sessions">
      <thead><tr><th>client id</th><th>state</th><th>low-water mark</th><th>highest request</th><th>saved responses</th><th>in progress</th><th>lease expires</th></tr></thead>
      <tbody>${(page?.sessions ?? []).map((s) => html`<tr key=${s.clientId}>
        <td class="id">${s.clientId}</td><td class=${state(s) === 'live' ? '' : 'stuck'}>${state(s)}</td>
        <td>${s.lowWaterMark}</td><td>${s.highestRequestNumber ?? '—'}</td><td>${s.storedResponses}</td><td>${s.inProgress}</td><td><${Time} iso=${s.leaseExpiresAt} /></td></tr>`)}</tbody>
    </table>
    ${page && page.sessions.length === 0 && html`<p>No sessions.</p>`}
    <p>
      <button disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>previous</button>
      <button disabled=${!page?.next} onClick=${() => setCursors([...cursors, page.next])}>next</button>
    </p>
  </section></main>`;
}
