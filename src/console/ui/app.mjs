/* global document, fetch, location, setInterval, clearInterval, URLSearchParams */
// The console's web UI: Preact components written with htm's tagged templates, so no build step is needed.
// Every view polls the JSON API every 1.5 seconds; the token, when the console needs one, comes from the
// page's fragment (#token=…), which the browser never sends to the server in the URL.
import { h, render } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';

const html = htm.bind(h);
const REFRESH_MS = 1500;
const token = new URLSearchParams(location.hash.slice(1)).get('token');
const auth = token === null ? {} : { authorization: `Bearer ${token}` };

async function api(path, body) {
  const init = body === undefined ? { headers: auth } : { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) };
  const response = await fetch(path, init);
  const json = await response.json();
  if (!response.ok) throw new Error(json.detail ?? json.title);
  return json;
}

/**
 * Polls `load` every REFRESH_MS; returns [data, error, reload]. Only the answer to the latest request is
 * shown: fetches can answer out of order, and an older one (say, the list before a filter was typed) must
 * not overwrite a newer one.
 */
function usePoll(load, deps) {
  const [state, setState] = useState({ data: undefined, error: undefined });
  const latest = useRef(0);
  const reload = useCallback(() => {
    const request = ++latest.current;
    return load().then(
      (data) => request === latest.current && setState({ data, error: undefined }),
      (error) => request === latest.current && setState((s) => ({ ...s, error: error.message })),
    );
  }, deps);
  useEffect(() => {
    void reload();
    const timer = setInterval(reload, REFRESH_MS);
    return () => clearInterval(timer);
  }, [reload]);
  return [state.data, state.error, reload];
}

function Keys({ info }) {
  const [filter, setFilter] = useState({ state: '', scope: '', key: '' });
  const [cursors, setCursors] = useState([]);
  const [selected, setSelected] = useState(undefined);
  const after = cursors[cursors.length - 1];
  const query = new URLSearchParams({ ...filter, limit: '25', ...(after && { afterScope: after.scope, afterKey: after.key }) });
  const [page, error] = usePoll(() => api(`/api/keys?${query}`), [query.toString()]);
  const change = (name) => (event) => {
    setFilter({ ...filter, [name]: event.target.value });
    setCursors([]);
  };
  return html`<main>
    <section class="list">
      <form class="search" onSubmit=${(e) => e.preventDefault()}>
        <select name="state" value=${filter.state} onChange=${change('state')}>
          <option value="">all states</option><option value="in_progress">in progress</option><option value="completed">completed</option>
        </select>
        <input name="scope" placeholder="scope" value=${filter.scope} onInput=${change('scope')} />
        <input name="key" placeholder="key starts with" value=${filter.key} onInput=${change('key')} />
      </form>
      ${error && html`<p class="error">${error}</p>`}
      <table id="keys">
        <thead><tr><th>scope</th><th>key</th><th>state</th><th>lease expires</th><th>status</th></tr></thead>
        <tbody>${(page?.records ?? []).map((r) => html`<tr key=${r.scope + '\n' + r.key} class=${selected?.key === r.key && selected?.scope === r.scope ? 'selected' : ''} onClick=${() => setSelected({ scope: r.scope, key: r.key })}>
          <td>${r.scope}</td><td>${r.key}</td>
          <td class=${r.stuck ? 'stuck' : ''}>${r.stuck ? 'stuck' : r.state.replace('_', ' ')}</td>
          <td>${r.leaseExpiresAt}</td><td>${r.status ?? ''}</td></tr>`)}</tbody>
      </table>
      <p>
        <button disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>previous</button>
        <button disabled=${!page?.next} onClick=${() => setCursors([...cursors, page.next])}>next</button>
      </p>
    </section>
    ${selected && html`<${KeyDetail} info=${info} which=${selected} />`}
  </main>`;
}

function KeyDetail({ info, which }) {
  const [record, error] = usePoll(() => api(`/api/key?${new URLSearchParams(which)}`), [which.scope, which.key]);
  const [message, setMessage] = useState(undefined);
  useEffect(() => setMessage(undefined), [which.scope, which.key]);
  const release = () =>
    api('/api/key/release', { scope: record.scope, key: record.key, leaseToken: record.leaseToken }).then(
      () => setMessage({ ok: true, text: 'Released: a retry runs the request again.' }),
      (e) => setMessage({ ok: false, text: e.message }),
    );
  return html`<aside class="detail" id="detail">
    <h2>${which.key}</h2>
    ${error && html`<p class="error">${error}</p>`}
    ${record && html`<dl>
      <dt>scope</dt><dd>${record.scope || '(none)'}</dd>
      <dt>state</dt><dd class=${record.stuck ? 'stuck' : ''}>${record.stuck ? 'in progress, lease expired (stuck)' : record.state}</dd>
      <dt>fingerprint</dt><dd>${record.fingerprint}</dd>
      <dt>fencing token</dt><dd>${record.leaseToken}</dd>
      <dt>lease expires</dt><dd>${record.leaseExpiresAt}</dd>
      <dt>created</dt><dd>${record.createdAt}</dd>
      <dt>retained until</dt><dd>${record.expiresAt}</dd>
      ${record.recoveryPoint !== null && html`<dt>recovery point</dt><dd>${record.recoveryPoint}</dd>`}
      <dt>saved status</dt><dd>${record.status ?? '—'}</dd>
      <dt>headers</dt><dd>${record.headers ? Object.entries(record.headers).map(([k, v]) => `${k}: ${v}`).join('\n') : '—'}</dd>
      <dt>body size</dt><dd>${record.size === null ? '—' : `${record.size} bytes`}</dd>
    </dl>
    ${record.state === 'in_progress' && html`<button class="action" id="release" disabled=${!info.allowActions} title=${info.allowActions ? 'Release only this lease token' : 'Read-only console'} onClick=${release}>Release lease ${record.leaseToken.slice(0, 8)}…</button>`}`}
    ${message && html`<p class=${message.ok ? 'message' : 'error'}>${message.text}</p>`}
  </aside>`;
}

function Inbox({ info }) {
  const [data, error, reload] = usePoll(() => api('/api/inbox/dead-letters'), []);
  const [message, setMessage] = useState(undefined);
  const redrive = (l) =>
    api('/api/inbox/redrive', { consumer: l.consumer, messageId: l.messageId }).then(
      () => { setMessage(`Redrive of ${l.messageId} requested; the running consumer applies it.`); void reload(); },
      (e) => setMessage(e.message),
    );
  return html`<main><section class="list">
    ${error && html`<p class="error">${error}</p>`}
    ${message && html`<p class="message">${message}</p>`}
    <table id="inbox">
      <thead><tr><th>consumer</th><th>message id</th><th>attempts</th><th>dead-lettered</th><th>error</th><th></th></tr></thead>
      <tbody>${(data?.deadLetters ?? []).map((l) => html`<tr key=${l.consumer + '\n' + l.messageId}>
        <td>${l.consumer}</td><td>${l.messageId}</td><td>${l.attempts}</td><td>${l.deadLetteredAt ?? 'redrive pending'}</td><td>${l.error ?? ''}</td>
        <td>${l.deadLetteredAt && html`<button class="action" disabled=${!info.allowActions} onClick=${() => redrive(l)}>Redrive</button>`}</td></tr>`)}</tbody>
    </table>
    ${data && data.deadLetters.length === 0 && html`<p>No dead letters.</p>`}
  </section></main>`;
}

function Outbox({ info }) {
  const [data, error, reload] = usePoll(() => api('/api/outbox'), []);
  const redriveRow = (l) => api('/api/outbox/redrive', { id: l.id }).then(() => reload(), () => reload());
  const s = data?.status;
  return html`<main><section class="list">
    ${error && html`<p class="error">${error}</p>`}
    ${s && html`<div class="figures" id="outbox-figures">
      <div class="figure">backlog<b id="backlog">${s.pending}</b></div>
      <div class="figure">oldest unsent<b>${(s.oldestPendingAgeMs / 1000).toFixed(1)} s</b></div>
      <div class="figure">retrying<b>${s.retrying}</b></div>
      <div class="figure">dead letters<b>${s.deadLetters}</b></div>
      <div class="figure">sent (retained)<b>${s.sent}</b></div>
    </div>`}
    <h2>Failed rows (dead letters)</h2>
    <table id="outbox">
      <thead><tr><th>id</th><th>topic</th><th>key</th><th>attempts</th><th>dead-lettered</th><th>error</th><th></th></tr></thead>
      <tbody>${(data?.deadLetters ?? []).map((l) => html`<tr key=${l.id}>
        <td>${l.id}</td><td>${l.topic}</td><td>${l.key ?? ''}</td><td>${l.attempts}</td><td>${l.deadLetteredAt}</td><td>${l.error ?? ''}</td>
        <td><button class="action" disabled=${!info.allowActions} onClick=${() => redriveRow(l)}>Redrive</button></td></tr>`)}</tbody>
    </table>
    ${data && data.deadLetters.length === 0 && html`<p>No failed rows.</p>`}
  </section></main>`;
}

function Sessions({ info }) {
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
        <td>${s.lowWaterMark}</td><td>${s.highestRequestNumber ?? '—'}</td><td>${s.storedResponses}</td><td>${s.inProgress}</td><td>${s.leaseExpiresAt}</td></tr>`)}</tbody>
    </table>
    ${page && page.sessions.length === 0 && html`<p>No sessions.</p>`}
    <p>
      <button disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>previous</button>
      <button disabled=${!page?.next} onClick=${() => setCursors([...cursors, page.next])}>next</button>
    </p>
  </section></main>`;
}

function App() {
  const [info, error] = usePoll(() => api('/api/info'), []);
  const [view, setView] = useState('keys');
  if (error && !info) return html`<p class="error">${error}</p>`;
  if (!info) return html`<p>Loading…</p>`;
  const tabs = [['keys', 'Keys', info.keys], ['inbox', 'Inbox dead letters', info.inbox], ['outbox', 'Outbox', info.outbox], ['sessions', 'Client sessions', info.sessions !== null]];
  return html`<header>
      <h1>retrysafe console</h1>
      <nav>${tabs.filter((t) => t[2]).map(([id, label]) => html`<button class=${view === id ? 'active' : ''} onClick=${() => setView(id)}>${label}</button>`)}</nav>
      <span class="mode">${info.store} · ${info.allowActions ? 'actions allowed' : 'read-only'}</span>
    </header>
    ${view === 'keys' && html`<${Keys} info=${info} />`}
    ${view === 'inbox' && html`<${Inbox} info=${info} />`}
    ${view === 'outbox' && html`<${Outbox} info=${info} />`}
    ${view === 'sessions' && html`<${Sessions} info=${info} />`}`;
}

render(html`<${App} />`, document.getElementById('app'));
