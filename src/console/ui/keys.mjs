/* global URLSearchParams, confirm, navigator */
// The keys view: the records by state (stuck and indeterminate included), searched by scope and key
// prefix, the fenced release of the stuck keys shown (all at once, after a confirmation), and one record in
// full with the fenced release of an in-progress key and a link to it.
import { useEffect, useState } from 'preact/hooks';
import { api, each, html, keyLink, linkedKey, orGone, Outcome, short, Time, usePoll } from './lib.mjs';

/** The state a record is shown in: stuck and indeterminate are in progress to the store. */
function stateOf(r) {
  if (r.indeterminate) return 'indeterminate';
  return r.stuck ? 'stuck' : r.state.replace('_', ' ');
}

export function Keys({ info }) {
  // A copied link opens its key: the list searched for it, its detail shown.
  const [filter, setFilter] = useState({ state: '', scope: linkedKey?.scope ?? '', key: linkedKey?.key ?? '' });
  const [cursors, setCursors] = useState([]);
  const [selected, setSelected] = useState(linkedKey);
  const [bulk, setBulk] = useState(undefined);
  const after = cursors[cursors.length - 1];
  const query = new URLSearchParams({ ...filter, limit: '25', ...(after && { afterScope: after.scope, afterKey: after.key }) });
  const [page, error, reload] = usePoll(() => api(`/api/keys?${query}`), [query.toString()]);
  const change = (name) => (event) => {
    setFilter({ ...filter, [name]: event.target.value });
    setCursors([]);
    setBulk(undefined);
  };
  // The stuck keys on this page; each release is fenced by the lease token the page showed.
  const stuck = (page?.records ?? []).filter((r) => r.stuck && !r.indeterminate);
  const releaseAll = async () => {
    const shown = stuck;
    if (!confirm(`Release ${shown.length} stuck key${shown.length === 1 ? '' : 's'}? Each one's next retry runs its request again.`)) return;
    const outcome = await each(shown, (r) => api('/api/key/release', { scope: r.scope, key: r.key, leaseToken: r.leaseToken }), 'stuck keys', 'Released');
    await reload();
    setBulk(outcome);
  };
  return html`<main>
    <section class="list">
      <form class="search" onSubmit=${(e) => e.preventDefault()}>
        <select name="state" value=${filter.state} onChange=${change('state')}>
          <option value="">all states</option><option value="in_progress">in progress</option><option value="stuck">stuck (lease expired)</option>
          <option value="indeterminate">indeterminate</option><option value="completed">completed</option>
        </select>
        <input name="scope" placeholder="scope" value=${filter.scope} onInput=${change('scope')} />
        <input name="key" placeholder="key starts with" value=${filter.key} onInput=${change('key')} />
      </form>
      ${error && html`<p class="error">${error}</p>`}
      ${filter.state === 'stuck' && stuck.length > 0 && html`<p><button class="action" id="release-all" disabled=${!info.allowActions} title=${info.allowActions ? 'Release each stuck key shown, fenced by its lease token' : 'Read-only console'} onClick=${releaseAll}>Release the ${stuck.length} stuck key${stuck.length === 1 ? '' : 's'} shown…</button></p>`}
      <${Outcome} outcome=${bulk} />
      <table id="keys">
        <thead><tr><th>scope</th><th>key</th><th>state</th><th>created</th><th>lease expires</th><th>status</th></tr></thead>
        <tbody>${(page?.records ?? []).map((r) => html`<tr key=${r.scope + '\n' + r.key} class=${selected?.key === r.key && selected?.scope === r.scope ? 'selected' : ''} onClick=${() => setSelected({ scope: r.scope, key: r.key })}>
          <td>${r.scope}</td><td>${r.key}</td>
          <td class=${r.stuck || r.indeterminate ? 'stuck' : ''}>${stateOf(r)}</td>
          <td><${Time} iso=${r.createdAt} /></td><td><${Time} iso=${r.leaseExpiresAt} /></td><td>${r.status ?? ''}</td></tr>`)}</tbody>
      </table>
      ${page && page.records.length === 0 && html`<p>No records${filter.state === '' ? '' : ` in state ${filter.state.replace('_', ' ')}`}.</p>`}
      <p>
        <button disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>previous</button>
        <button disabled=${!page?.next} onClick=${() => setCursors([...cursors, page.next])}>next</button>
      </p>
    </section>
    ${selected && html`<${KeyDetail} info=${info} which=${selected} onChange=${reload} />`}
  </main>`;
}

/** What the key is now, after the operator released `released` (a lease token). */
function afterRelease(released, record) {
  if (record === null) return `Released lease ${short(released)}: the key is gone, and the next retry runs the request again.`;
  if (record.leaseToken === released) return `Released lease ${short(released)}, yet the record is still there: look at it again.`;
  return `Released lease ${short(released)}. The key has been claimed again since (lease ${short(record.leaseToken)}, ${stateOf(record)}).`;
}

function KeyDetail({ info, which, onChange }) {
  const [record, error, reload] = usePoll(() => orGone(`/api/key?${new URLSearchParams(which)}`), [which.scope, which.key]);
  const [outcome, setOutcome] = useState(undefined);
  const [busy, setBusy] = useState(false);
  const [link, setLink] = useState(undefined);
  useEffect(() => {
    setOutcome(undefined);
    setLink(undefined);
  }, [which.scope, which.key]);
  const copyLink = async () => {
    const text = keyLink(which);
    // The clipboard needs a secure context (https, or localhost); elsewhere the link is shown to copy by hand.
    const copied = await navigator.clipboard?.writeText(text).then(() => true, () => false);
    setLink({ text, copied: copied === true });
  };
  const release = async () => {
    const leaseToken = record.leaseToken;
    setBusy(true);
    let result;
    try {
      await api('/api/key/release', { scope: record.scope, key: record.key, leaseToken });
      result = { ok: true, released: leaseToken };
    } catch (e) {
      result = { ok: false, text: `Not released: ${e.message}.` };
    }
    // Show what the key is now, not what it was: the outcome appears with the record as the store has it
    // after the action.
    await reload();
    onChange();
    setOutcome(result);
    setBusy(false);
  };
  const shown = outcome?.released === undefined ? outcome : { ok: true, text: afterRelease(outcome.released, record) };
  return html`<aside class="detail" id="detail">
    <h2>${which.key} <button id="copy-link" title="A link to this key, without the console's token" onClick=${copyLink}>Copy link</button></h2>
    ${link && html`<p class="message" role="status">${link.copied ? 'Link copied (without the token):' : 'Copy this link (without the token):'} <input id="key-link" readonly value=${link.text} onFocus=${(e) => e.target.select()} /></p>`}
    ${error && html`<p class="error">${error}</p>`}
    ${record === null && html`<p class="gone" id="gone">No record for this key now (released, expired, or never written): the next request with it runs as new.</p>`}
    ${record && html`<dl>
      <dt>scope</dt><dd>${record.scope || '(none)'}</dd>
      <dt>state</dt><dd id="state" class=${record.stuck || record.indeterminate ? 'stuck' : ''}>${
        record.indeterminate
          ? `indeterminate (${record.indeterminate.cause}): retries get ${record.indeterminate.status} until it is resolved`
          : record.stuck ? 'in progress, lease expired (stuck)' : record.state.replace('_', ' ')}</dd>
      <dt>fingerprint</dt><dd>${record.fingerprint}</dd>
      <dt>fencing token</dt><dd>${record.leaseToken}</dd>
      ${record.state === 'in_progress' && html`<dt>lease expires</dt><dd><${Time} iso=${record.leaseExpiresAt} /></dd>`}
      <dt>created</dt><dd><${Time} iso=${record.createdAt} /></dd>
      ${record.completedAt !== null && html`<dt>completed</dt><dd><${Time} iso=${record.completedAt} /></dd>`}
      <dt>retained until</dt><dd><${Time} iso=${record.expiresAt} /></dd>
      ${record.recoveryPoint !== null && html`<dt>recovery point</dt><dd>${record.recoveryPoint}</dd>`}
      <dt>saved status</dt><dd>${record.status ?? '—'}</dd>
      <dt>headers</dt><dd>${record.headers ? Object.entries(record.headers).map(([k, v]) => `${k}: ${v}`).join('\n') : '—'}</dd>
      <dt>body size</dt><dd>${record.size === null ? '—' : `${record.size} bytes`}</dd>
    </dl>
    ${record.state === 'in_progress' && html`<button class="action" id="release" disabled=${!info.allowActions || busy} title=${info.allowActions ? 'Release only this lease token' : 'Read-only console'} onClick=${release}>Release lease ${short(record.leaseToken)}</button>`}`}
    <${Outcome} outcome=${shown} />
  </aside>`;
}
