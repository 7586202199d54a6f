/* global document */
// The console's web UI: Preact components written with htm's tagged templates, so no build step is needed.
// Every view polls the JSON API every 1.5 seconds; the token, when the console needs one, comes from the
// page's fragment (#token=…), which the browser never sends to the server in the URL.
import { render } from 'preact';
import { useState } from 'preact/hooks';
import { Indeterminate } from './indeterminate.mjs';
import { Keys } from './keys.mjs';
import { api, html, usePoll } from './lib.mjs';
import { Inbox, Outbox } from './messaging.mjs';
import { Sessions } from './sessions.mjs';
import { Trends } from './trends.mjs';

function App() {
  const [info, error] = usePoll(() => api('/api/info'), []);
  const [view, setView] = useState('keys');
  if (error && !info) return html`<p class="error">${error}</p>`;
  if (!info) return html`<p>Loading…</p>`;
  const tabs = [
    ['keys', 'Keys', info.keys],
    ['trends', 'Trends', true],
    ['indeterminate', 'Indeterminate', info.keys],
    ['inbox', 'Inbox dead letters', info.inbox],
    ['outbox', 'Outbox', info.outbox],
    ['sessions', 'Client sessions', info.sessions !== null],
  ];
  return html`<header>
      <h1>retrysafe console</h1>
      <nav>${tabs.filter((t) => t[2]).map(([id, label]) => html`<button class=${view === id ? 'active' : ''} onClick=${() => setView(id)}>${label}</button>`)}</nav>
      <span class="mode">${info.store} · ${info.allowActions ? 'actions allowed' : 'read-only'}</span>
    </header>
    ${view === 'keys' && html`<${Keys} info=${info} />`}
    ${view === 'trends' && html`<${Trends} info=${info} />`}
    ${view === 'indeterminate' && html`<${Indeterminate} info=${info} />`}
    ${view === 'inbox' && html`<${Inbox} info=${info} />`}
    ${view === 'outbox' && html`<${Outbox} info=${info} />`}
    ${view === 'sessions' && html`<${Sessions} info=${info} />`}`;
}

render(html`<${App} />`, document.getElementById('app'));
