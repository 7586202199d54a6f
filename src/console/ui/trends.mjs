// The trends view: how the store's figures moved over the last hour, sampled by the console process
// itself (GET /api/trends), drawn with uPlot, each chart with its latest value beside it; with --metrics,
// the request rate, replay and 409 ratios and the latency quantiles scraped from the receiver or gateway.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { api, html, usePoll } from './lib.mjs';

/** The charts: a title, the unit, and the sample fields drawn (with their labels and colours). */
const CHARTS = [
  { id: 'store', title: 'store round trip', unit: 'ms', series: [['storeMs', 'get', '#2b6cb0']] },
  { id: 'outbox', title: 'outbox', unit: 'rows', series: [['outboxPending', 'backlog', '#2b6cb0'], ['outboxDeadLetters', 'dead letters', '#b3261e']] },
  { id: 'outbox-age', title: 'oldest unsent', unit: 's', series: [['outboxOldestS', 'age', '#8a5a00']] },
  { id: 'inbox', title: 'inbox dead letters', unit: 'messages', series: [['inboxDeadLetters', 'dead letters and pending redrives', '#b3261e']] },
  { id: 'requests', title: 'requests', unit: 'req/s', series: [['requestsPerSecond', 'requests per second', '#2b6cb0']] },
  { id: 'ratios', title: 'replays and 409s', unit: '%', series: [['replayPercent', 'replayed', '#2f855a'], ['conflictPercent', '409 in flight', '#b3261e']] },
  { id: 'latency', title: 'latency', unit: 'ms', series: [['latencyP50Ms', 'p50', '#2b6cb0'], ['latencyP99Ms', 'p99', '#8a5a00']] },
];

const METRIC_CHARTS = new Set(['requests', 'ratios', 'latency']);
const percent = (ratio) => (ratio === null || ratio === undefined ? null : Math.round(ratio * 1000) / 10);

/** A sample with the figures the charts draw at its top level. */
function flat(s) {
  const m = s.metrics ?? {};
  return {
    ...s,
    outboxOldestS: s.outboxOldestMs === null ? null : Math.round(s.outboxOldestMs / 100) / 10,
    requestsPerSecond: m.requestsPerSecond ?? null,
    replayPercent: percent(m.replayRatio),
    conflictPercent: percent(m.conflictRatio),
    latencyP50Ms: m.latencyP50Ms ?? null,
    latencyP99Ms: m.latencyP99Ms ?? null,
  };
}

function Chart({ chart, samples }) {
  const box = useRef(null);
  const plot = useRef(null);
  const data = [samples.map((s) => s.at / 1000), ...chart.series.map(([field]) => samples.map((s) => s[field]))];
  useEffect(() => {
    plot.current = new uPlot(
      {
        width: 520,
        height: 140,
        legend: { show: true },
        scales: { y: { range: (_u, min, max) => [0, Math.max(1, max * 1.1)] } },
        axes: [{}, { label: chart.unit, size: 56 }],
        series: [{}, ...chart.series.map(([, label, stroke]) => ({ label, stroke, width: 2, spanGaps: false }))],
      },
      data,
      box.current,
    );
    return () => plot.current.destroy();
  }, []);
  useEffect(() => plot.current?.setData(data), [samples]);
  const last = samples[samples.length - 1];
  return html`<div class="chart" id=${`chart-${chart.id}`}>
    <h3>${chart.title}</h3>
    <div class="now">${chart.series.map(([field, label]) => html`<span>${label} now <b id=${`now-${field}`}>${last?.[field] ?? '—'}</b></span>`)}</div>
    <div ref=${box}></div>
  </div>`;
}

export function Trends({ info }) {
  const [data, error] = usePoll(() => api('/api/trends'), []);
  const samples = (data?.samples ?? []).map(flat);
  const latencyOf = [...samples].reverse().find((s) => s.metrics?.latencyOf)?.metrics.latencyOf;
  const shown = CHARTS.filter((c) => (c.id.startsWith('outbox') ? info.outbox : c.id === 'inbox' ? info.inbox : METRIC_CHARTS.has(c.id) ? info.metrics : true)).map((c) =>
    c.id === 'latency' && latencyOf ? { ...c, title: `${latencyOf === 'store' ? 'store operation' : 'upstream'} latency` } : c,
  );
  return html`<main><section class="list">
    <p class="where">Sampled by this console every ${data ? data.intervalMs / 1000 : '…'} s from the store's own queries${info.metrics ? ' and the metrics endpoint' : ''}, for the last hour (${samples.length} samples since it started).</p>
    ${error && html`<p class="error">${error}</p>`}
    <div class="charts">${data && shown.map((chart) => html`<${Chart} key=${chart.id} chart=${chart} samples=${samples} />`)}</div>
  </section></main>`;
}
