/* global confirm */
// The inbox and outbox views: dead letters (and pending redrives) with redrive, one or all shown at once
// after a confirmation, and the outbox backlog with why its oldest rows are stuck.
import { useState } from 'preact/hooks';
import { api, each, ErrorCell, html, Outcome, Time, usePoll } from './lib.mjs';

/** Runs an action, then reloads the view, and resolves to its outcome for {@link Outcome}. */
async function attempt(action, success, reload) {
  let outcome;
  try {
    await action();
    outcome = { ok: true, text: success };
  } catch (e) {
    outcome = { ok: false, text: e.message };
  }
  await reload();
  return outcome;
}

export function Inbox({ info }) {
  const [data, error, reload] = usePoll(() => api('/api/inbox/dead-letters'), []);
  const [outcome, setOutcome] = useState(undefined);
  const redrive = async (l) =>
    setOutcome(
      await attempt(
        () => api('/api/inbox/redrive', { consumer: l.consumer, messageId: l.messageId }),
        `Redrive of ${l.messageId} requested: it reads "redrive pending" until the running consumer processes it.`,
        reload,
      ).then((o) => (o.ok ? o : { ...o, text: `Redrive of ${l.messageId} refused: ${o.text}` })),
    );
  const dead = (data?.deadLetters ?? []).filter((l) => l.deadLetteredAt);
  const redriveAll = async () => {
    const shown = dead;
    if (!confirm(`Redrive ${shown.length} dead letter${shown.length === 1 ? '' : 's'}? The running consumers process each one again.`)) return;
    const result = await each(shown, (l) => api('/api/inbox/redrive', { consumer: l.consumer, messageId: l.messageId }), 'dead letters', 'Redrive requested for');
    await reload();
    setOutcome(result);
  };
  return html`<main><section class="list">
    ${error && html`<p class="error">${error}</p>`}
    ${dead.length > 1 && html`<p><button class="action" id="redrive-all" disabled=${!info.allowActions} title=${info.allowActions ? 'Redrive every dead letter shown' : 'Read-only console'} onClick=${redriveAll}>Redrive the ${dead.length} dead letters shown…</button></p>`}
    <${Outcome} outcome=${outcome} />
    <table id="inbox">
      <thead><tr><th>consumer</th><th>message id</th><th>attempts</th><th>state</th><th>since</th><th>last error</th><th></th></tr></thead>
      <tbody>${(data?.deadLetters ?? []).map((l) => html`<tr key=${l.consumer + '\n' + l.messageId}>
        <td>${l.consumer}</td><td>${l.messageId}</td><td>${l.attempts}</td>
        <td class=${l.deadLetteredAt ? 'stuck' : ''}>${l.deadLetteredAt ? 'dead-lettered' : 'redrive pending'}</td>
        <td><${Time} iso=${l.deadLetteredAt ?? l.redriveRequestedAt} /></td><${ErrorCell} text=${l.error} />
        <td>${l.deadLetteredAt && html`<button class="action" disabled=${!info.allowActions} onClick=${() => redrive(l)}>Redrive</button>`}</td></tr>`)}</tbody>
    </table>
    ${data && data.deadLetters.length === 0 && html`<p>No dead letters.</p>`}
  </section></main>`;
}

export function Outbox({ info }) {
  const [data, error, reload] = usePoll(() => api('/api/outbox'), []);
  const [outcome, setOutcome] = useState(undefined);
  const redrive = async (l) =>
    setOutcome(
      await attempt(() => api('/api/outbox/redrive', { id: l.id }), `Redrive of ${l.id} done: the row is pending again and the relay sends it next.`, reload).then((o) =>
        o.ok ? o : { ...o, text: `Redrive of ${l.id} refused: ${o.text}` },
      ),
    );
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
    ${s?.oldestPendingError && html`<p class="stuck-why" id="stuck-why">Why the oldest retrying row is not sent yet (its last publish error): <span class="error-full">${s.oldestPendingError}</span></p>`}
    <${Outcome} outcome=${outcome} />
    <h2>Failed rows (dead letters)</h2>
    <table id="outbox">
      <thead><tr><th>id</th><th>topic</th><th>key</th><th>attempts</th><th>dead-lettered</th><th>last error</th><th></th></tr></thead>
      <tbody>${(data?.deadLetters ?? []).map((l) => html`<tr key=${l.id}>
        <td>${l.id}</td><td>${l.topic}</td><td>${l.key ?? ''}</td><td>${l.attempts}</td><td><${Time} iso=${l.deadLetteredAt} /></td><${ErrorCell} text=${l.error} />
        <td><button class="action" disabled=${!info.allowActions} onClick=${() => redrive(l)}>Redrive</button></td></tr>`)}</tbody>
    </table>
    ${data && data.deadLetters.length === 0 && html`<p>No failed rows.</p>`}
  </section></main>`;
}
