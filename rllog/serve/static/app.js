// rllog serve: the page's own script. Every logged string goes into the page with
// textContent / text nodes (never innerHTML), and into plotly escaped (esc) so plotly's
// own pseudo-HTML labels show it as text.
'use strict';

const state = { runs: [], byId: {}, selected: new Set(JSON.parse(localStorage.getItem('rllog.selected') || '[]')),
  versions: {}, charts: [], keyOrder: [], configCols: JSON.parse(localStorage.getItem('rllog.cols') || '[]'), sort: ['name', 1] };
const EVAL_PREFIXES = ['eval/', 'eval_', 'test/', 'test_'];

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'checked' || k === 'value') e[k] = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) if (kid != null) e.append(kid instanceof Node ? kid : String(kid));
  return e;
}
const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
async function api(path) {
  const r = await fetch(path, { credentials: 'same-origin' });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}
function fmt(v) {
  if (v == null) return '';
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : v.toPrecision(4).replace(/\.?0+$/, '');
}
function dur(s) { if (s == null) return ''; s = Math.round(s); return s >= 3600 ? `${Math.floor(s / 3600)}h${Math.floor(s % 3600 / 60)}m` : s >= 60 ? `${Math.floor(s / 60)}m${s % 60}s` : `${s}s`; }
function saveSel() { localStorage.setItem('rllog.selected', JSON.stringify([...state.selected])); }
function selectedRuns() {
  const sel = state.runs.filter((r) => state.selected.has(r.id));
  return sel.length ? sel : state.runs.slice(0, 1);
}
function statusBadge(st) {
  const extra = st.resumes ? ` · resumed ${st.resumes}×` : '';
  return el('span', { class: `badge s-${st.state}`, title: st.live === true ? 'a live writer holds the lock' : '' }, st.state + extra);
}
const main = () => document.getElementById('main');
function route() { return location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent); }

// ---------------------------------------------------------------- runs table
function runsView() {
  const m = main(); m.replaceChildren();
  const filter = el('input', { type: 'search', placeholder: 'filter by name or config value', id: 'run-filter', oninput: drawRunsTable });
  const allCfg = [...new Set(state.runs.flatMap((r) => Object.keys(r.config)))].sort();
  const colPick = el('select', { id: 'cfg-col', onchange: (e) => { if (e.target.value && !state.configCols.includes(e.target.value)) { state.configCols.push(e.target.value); localStorage.setItem('rllog.cols', JSON.stringify(state.configCols)); drawRunsTable(); } e.target.value = ''; } },
    el('option', { value: '' }, '+ config column'), allCfg.map((k) => el('option', { value: k }, k)));
  m.append(el('div', { class: 'controls' }, filter, colPick,
    el('button', { onclick: () => { location.hash = '#/charts'; } }, 'Compare selected'),
    el('span', { class: 'muted', id: 'run-count' })), el('div', { class: 'scroll' }, el('table', { id: 'runs' })));
  drawRunsTable();
}
// the key metrics these runs have: KEY_METRICS order (rllog/_format/vocab.py), then the most common
function keyMetrics(runs) {
  const count = new Map();
  for (const r of runs) for (const k of Object.keys(r.metrics)) count.set(k, (count.get(k) || 0) + 1);
  const rank = (k) => { const i = state.keyOrder.indexOf(k); return i < 0 ? Infinity : i; };
  return [...count.keys()].sort((a, b) => rank(a) - rank(b) || count.get(b) - count.get(a) || (a < b ? -1 : 1)).slice(0, 6);
}
// a config value as a number when it reads as one (8 < 16 < 128), else its text
function cfgValue(v) { if (v == null) return null; const n = Number(v); return v !== '' && Number.isFinite(n) ? n : String(v); }
function compare(x, y) {
  if ((x == null) !== (y == null)) return x == null ? 1 : -1;
  if (x == null) return 0;
  if (typeof x === 'number' && typeof y === 'number') return x - y;
  if (typeof x === 'number') return -1; if (typeof y === 'number') return 1;
  return x < y ? -1 : x > y ? 1 : 0;
}
function removeCol(k) { state.configCols = state.configCols.filter((c) => c !== k); localStorage.setItem('rllog.cols', JSON.stringify(state.configCols)); drawRunsTable(); }
function drawRunsTable() {
  const table = document.getElementById('runs'); if (!table) return;
  const q = (document.getElementById('run-filter').value || '').toLowerCase();
  let rows = state.runs.filter((r) => !q || r.name.toLowerCase().includes(q) || Object.values(r.config).some((v) => String(v).toLowerCase().includes(q)));
  const keys = keyMetrics(rows);
  const cols = [['', null], ['name', (r) => r.name], ['status', (r) => r.status.state], ['started', (r) => r.status.first_started_at || ''],
    ['duration', (r) => r.duration], ['steps', (r) => r.last_step], ['doctor', (r) => r.doctor.error * 1000 + r.doctor.warning],
    ...keys.map((k) => [k, (r) => (r.metrics[k] || {}).last]), ...state.configCols.map((k) => [k, (r) => cfgValue(r.config[k]), true])];
  const [sk, sd] = state.sort; const sf = (cols.find((c) => c[0] === sk) || cols[1])[1];
  rows = rows.slice().sort((a, b) => { const x = sf(a), y = sf(b); return (x == null || y == null) ? compare(x, y) : sd * compare(x, y); });
  const head = el('tr', {}, cols.map(([name, , cfg], i) => el('th', { class: i === 0 ? 'sel' : i === 1 ? 'name' : '', 'data-col': name, onclick: () => { state.sort = [name, state.sort[0] === name ? -state.sort[1] : 1]; drawRunsTable(); }, title: name },
    name, cfg ? el('button', { class: 'rm', title: `remove column ${name}`, 'aria-label': `remove column ${name}`, onclick: (e) => { e.stopPropagation(); removeCol(name); } }, '×') : null)));
  const body = rows.map((r) => el('tr', { 'data-run': r.id },
    el('td', { class: 'sel' }, el('input', { type: 'checkbox', checked: state.selected.has(r.id), 'aria-label': 'select run', onchange: (e) => { e.target.checked ? state.selected.add(r.id) : state.selected.delete(r.id); saveSel(); } })),
    el('td', { class: 'name', title: r.name }, el('a', { href: `#/run/${encodeURIComponent(r.id)}`, class: 'run-name' }, r.name)),
    el('td', { class: 'status' }, statusBadge(r.status)),
    el('td', {}, (r.status.first_started_at || '').replace('T', ' ').replace('+00:00', 'Z')),
    el('td', {}, dur(r.duration)), el('td', { class: 'steps' }, r.last_step == null ? '' : String(r.last_step)),
    el('td', {}, el('span', { class: 'sev-error' }, r.doctor.error ? `${r.doctor.error} errors ` : ''), el('span', { class: 'sev-warning' }, r.doctor.warning ? `${r.doctor.warning} warnings` : ''), r.doctor.error || r.doctor.warning ? '' : 'ok'),
    keys.map((k) => { const v = r.metrics[k]; return el('td', { title: v ? `min ${fmt(v.min)} max ${fmt(v.max)}` : '' }, v ? fmt(v.last) : ''); }),
    state.configCols.map((k) => el('td', {}, r.config[k] == null ? '' : r.config[k]))));
  table.replaceChildren(el('thead', {}, head), el('tbody', {}, body));
  document.getElementById('run-count').textContent = `${rows.length} of ${state.runs.length} runs`;
}

// ---------------------------------------------------------------- charts
const ctl = { filter: localStorage.getItem('rllog.filter') || '', smooth: Number(localStorage.getItem('rllog.smooth') || 0.6), x: 'step', log: false, clip: false };
function canonical(k) { for (const p of EVAL_PREFIXES) if (k.startsWith(p)) return k.slice(p.length); return k.replace(/^train\//, ''); }
async function chartsView() {
  const m = main(); m.replaceChildren();
  const runs = selectedRuns();
  if (!runs.length) { m.append(el('p', { class: 'muted' }, 'no runs found')); return; }
  const metas = await Promise.all(runs.map((r) => api(`/api/runs/${r.id}/metrics`)));
  const xs = [...new Set(metas.flatMap((mt) => mt.x))];
  if (!xs.includes(ctl.x)) ctl.x = xs[0];
  const controls = el('div', { class: 'controls' },
    el('input', { type: 'search', id: 'metric-filter', placeholder: 'regex filter', value: ctl.filter, oninput: (e) => { ctl.filter = e.target.value; localStorage.setItem('rllog.filter', ctl.filter); layoutCharts(runs, metas); } }),
    el('label', {}, 'smoothing ', el('input', { type: 'range', id: 'smooth', min: 0, max: 0.99, step: 0.01, value: ctl.smooth, oninput: (e) => { ctl.smooth = Number(e.target.value); localStorage.setItem('rllog.smooth', ctl.smooth); document.getElementById('smooth-v').textContent = ctl.smooth.toFixed(2); clearTimeout(ctl.timer); ctl.timer = setTimeout(() => redrawAll(true), 150); } }), el('span', { id: 'smooth-v' }, ctl.smooth.toFixed(2))),
    el('label', {}, 'x ', el('select', { id: 'xaxis', onchange: (e) => { ctl.x = e.target.value; state.charts.forEach((c) => { c.range = null; }); redrawAll(true); } }, xs.map((x) => el('option', { value: x, selected: x === ctl.x }, x)))),
    el('label', {}, el('input', { type: 'checkbox', id: 'logy', checked: ctl.log, onchange: (e) => { ctl.log = e.target.checked; redrawAll(false); } }), ' log y'),
    el('label', {}, el('input', { type: 'checkbox', id: 'clip', checked: ctl.clip, onchange: (e) => { ctl.clip = e.target.checked; redrawAll(false); } }), ' clip outliers'),
    runs.length > 1 ? null : el('span', { class: 'muted' }, runs.map((r) => r.name).join(' · ')));
  // one colour per run on every chart: the legend says which
  const legend = runs.length > 1 ? el('div', { class: 'legend', id: 'legend' }, runs.map((r, i) => el('span', { class: 'legend-item', title: r.name, 'data-color': PALETTE[i % PALETTE.length] },
    el('span', { class: 'swatch', style: `background:${PALETTE[i % PALETTE.length]}` }), r.name))) : null;
  m.append(controls, legend || '', el('div', { id: 'chart-groups' }));
  layoutCharts(runs, metas);
}
function layoutCharts(runs, metas) {
  const box = document.getElementById('chart-groups'); box.replaceChildren();
  let re = null; try { re = ctl.filter ? new RegExp(ctl.filter, 'i') : null; } catch (e) { box.append(el('p', { class: 'error' }, `bad regex: ${e.message}`)); return; }
  const charts = new Map();
  metas.forEach((mt, i) => mt.metrics.forEach((k) => {
    const c = canonical(k);
    if (re && !re.test(c) && !re.test(k)) return; if (!charts.has(c)) charts.set(c, []);
    charts.get(c).push({ run: runs[i], key: k, color: i });
  }));
  const groups = new Map();
  for (const [c, traces] of charts) { const g = c.includes('/') ? c.split('/')[0] + '/' : 'other'; if (!groups.has(g)) groups.set(g, []); groups.get(g).push([c, traces]); }
  state.charts = [];
  const obs = new IntersectionObserver((ents) => ents.forEach((en) => { if (en.isIntersecting) { obs.unobserve(en.target); const ch = state.charts.find((c) => c.div === en.target); if (ch) drawChart(ch, true); } }), { rootMargin: '300px' });
  for (const [g, list] of [...groups].sort()) {
    const grid = el('div', { class: 'grid' });
    box.append(el('details', { open: true, class: 'chart-group' }, el('summary', {}, el('h2', { style: null }, `${g} (${list.length})`)), grid));
    for (const [c, traces] of list) {
      const div = el('div', { class: 'chart', 'data-metric': c });
      grid.append(div);
      const ch = { div, title: c, traces, data: null, range: null };
      state.charts.push(ch); obs.observe(div);
    }
  }
  if (!charts.size) box.append(el('p', { class: 'muted' }, 'no metric matches'));
}
function redrawAll(refetch) { state.charts.filter((c) => c.data).forEach((c) => drawChart(c, refetch)); }
const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
// a y range for a flat series (7.0 and 6.9999999): plotly would label ticks 6.99999991...
function flatRange(ys) {
  const f = ys.filter(Number.isFinite); if (!f.length) return null;
  const lo = Math.min(...f), hi = Math.max(...f), mid = (lo + hi) / 2, scale = Math.max(Math.abs(lo), Math.abs(hi));
  if (hi - lo > 1e-6 * scale && hi - lo > 1e-12) return null;
  const d = Math.max(Math.abs(mid) * 0.05, 1e-3); return [mid - d, mid + d];
}
async function drawChart(ch, refetch) {
  if (refetch || !ch.data) {
    // the EMA is computed by the server on the full-resolution series, then downsampled
    const q = (t) => { const p = new URLSearchParams({ key: t.key, x: ctl.x, points: 2000, smooth: ctl.smooth }); if (ch.range) { p.set('x0', ch.range[0]); p.set('x1', ch.range[1]); } return api(`/api/runs/${t.run.id}/series?${p}`); };
    try { ch.data = await Promise.all(ch.traces.map(q)); } catch (e) { ch.div.replaceChildren(el('p', { class: 'error' }, String(e.message))); return; }
  }
  const palette = PALETTE;
  const data = [], shapes = [], bad = { x: [], y: [], text: [], color: [] };
  ch.traces.forEach((t, i) => {
    const s = ch.data[i], color = palette[t.color % palette.length];
    const isEval = t.key !== ch.title && canonical(t.key) === ch.title && t.key !== 'train/' + ch.title;
    const name = esc(`${t.run.name}${isEval ? ' · ' + t.key : ''}`);
    const smooth = ctl.smooth > 0 && s.smoothed.x.length > 0;
    data.push({ x: s.x, y: s.y, customdata: s.y.map(String), type: 'scatter', mode: s.x.length < 60 || isEval ? 'lines+markers' : 'lines', name,
      line: { color, width: 1, dash: isEval ? 'dot' : 'solid' }, opacity: smooth ? 0.35 : 1, hovertemplate: '%{customdata}', meta: { run: t.run.id, key: t.key, raw: true } });
    if (smooth) data.push({ x: s.smoothed.x, y: s.smoothed.y, type: 'scatter', mode: 'lines', name: name + ' (smoothed)', line: { color, width: 2, dash: isEval ? 'dot' : 'solid' }, hovertemplate: '%{y:.4g}', showlegend: false });
    if (s.superseded.x.length) data.push({ x: s.superseded.x, y: s.superseded.y, type: 'scatter', mode: 'markers', name: name + ' (superseded)', marker: { color: '#aaa', size: 4 }, hovertemplate: 'superseded %{y}' });
    // NaN / Infinity: a symbol at the top (NaN, +Inf) or bottom (-Inf) edge, the hover says which
    for (const [x, what] of s.nonfinite) { bad.x.push(x); bad.y.push(what === '-Infinity' ? 0.03 : 0.97); bad.text.push(esc(`${t.run.name}: ${what} at ${ctl.x} ${x}`)); bad.color.push(color); }
    for (const r of s.resumes) shapes.push({ type: 'line', xref: 'x', yref: 'paper', x0: r, x1: r, y0: 0, y1: 1, line: { color, dash: 'dash', width: 1 } });
    for (const f of s.findings) {
      for (const [a, b] of f.steps) shapes.push({ type: 'rect', xref: 'x', yref: 'paper', x0: a - 0.5, x1: b + 0.5, y0: 0, y1: 1, fillcolor: f.severity === 'error' ? 'rgba(192,57,43,0.15)' : 'rgba(183,149,11,0.15)', line: { width: 0 } });
      if (f.threshold_value != null) shapes.push({ type: 'line', xref: 'paper', yref: 'y', x0: 0, x1: 1, y0: f.threshold_value, y1: f.threshold_value, line: { color: '#c0392b', dash: 'dot', width: 1 } });
    }
  });
  if (bad.x.length) data.push({ x: bad.x, y: bad.y, yaxis: 'y2', type: 'scatter', mode: 'markers', name: 'NaN/Inf', text: bad.text, hovertemplate: '%{text}<extra></extra>',
    marker: { symbol: bad.y.map((y) => (y > 0.5 ? 'triangle-up' : 'triangle-down')), color: bad.color, size: 9, line: { color: '#c0392b', width: 1 } }, meta: { nonfinite: true } });
  const layout = { title: { text: esc(ch.title), font: { size: 13 } }, margin: { l: 50, r: 10, t: 30, b: 35 }, hovermode: 'x unified', showlegend: false,
    xaxis: { title: { text: esc(ctl.x), font: { size: 11 } } }, yaxis: { type: ctl.log ? 'log' : 'linear', tickformat: '~g' },
    yaxis2: { overlaying: 'y', range: [0, 1], visible: false, fixedrange: true }, shapes, uirevision: ctl.x };
  const flat = ctl.log ? null : flatRange(ch.data.flatMap((s) => s.y));
  if (flat) { layout.yaxis.range = flat; layout.yaxis.autorange = false; }
  if (ch.range) layout.xaxis.range = ch.range;
  if (ctl.clip) {
    const ys = ch.data.flatMap((s) => s.y).filter(Number.isFinite).sort((a, b) => a - b);
    if (ys.length > 10) { const lo = ys[Math.floor(ys.length * 0.02)], hi = ys[Math.ceil(ys.length * 0.98) - 1], pad = (hi - lo) * 0.05 || 1; layout.yaxis.range = [lo - pad, hi + pad]; layout.yaxis.autorange = false; }
  }
  const down = ch.data.some((s) => s.downsampled);
  if (down) layout.title.text += ' <span style="font-size:10px">(downsampled; zoom to refine)</span>';
  await Plotly.react(ch.div, data, layout, { displaylogo: false, responsive: true, modeBarButtonsToRemove: ['toImage'] });
  ch.div.dataset.points = ch.data.map((s) => s.x.length).join(',');
  ch.div.dataset.version = ch.traces.map((t) => t.run.version).join(',');
  if (!ch.listening) {
    ch.listening = true;
    ch.div.on('plotly_relayout', (ev) => {
      if (ev['xaxis.range[0]'] != null) { ch.range = [ev['xaxis.range[0]'], ev['xaxis.range[1]']]; drawChart(ch, true); }
      else if (ev['xaxis.autorange']) { ch.range = null; drawChart(ch, true); }
    });
  }
}

// ---------------------------------------------------------------- run detail
async function detailView(id) {
  const m = main(); m.replaceChildren();
  id = id || (selectedRuns()[0] || {}).id;
  if (!id) { m.append(el('p', { class: 'muted' }, 'no run')); return; }
  const d = await api(`/api/runs/${encodeURIComponent(id)}/detail`);
  const st = d.status;
  m.append(el('h2', {}, d.name, ' ', statusBadge(st)), el('p', { class: 'muted' }, d.url),
    el('table', { class: 'meta' }, [['started', st.first_started_at], ['last start', st.started_at], ['ended', st.ended_at], ['host', st.host], ['steps', `${d.first_step ?? ''} – ${d.last_step ?? ''} (${d.rows} rows)`], ['iterations', d.iterations],
      ['rollouts', el('a', { href: `#/rollouts/${encodeURIComponent(id)}` }, 'browse')]].map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v ?? '')))));
  m.append(el('h2', {}, `Doctor (${d.findings.length})`), d.findings.length ? el('ul', {}, d.findings.map((f) => el('li', { class: `sev-${f.severity}` }, `[${f.severity}] ${f.message}`, el('div', { class: 'muted' }, f.advice)))) : el('p', {}, 'no findings'));
  const others = state.runs.filter((r) => state.selected.has(r.id) && r.id !== id);
  const keys = [...new Set([...Object.keys(d.config), ...others.flatMap((r) => Object.keys(r.config))])].sort();
  const differs = (k) => others.some((r) => r.config[k] !== d.config[k]);
  m.append(el('h2', {}, 'Config', others.length ? ` (differences with ${others.length} selected run(s) first)` : ''),
    el('div', { class: 'scroll' }, el('table', { id: 'config' }, el('tr', {}, el('th', {}, 'key'), el('th', {}, d.name), others.map((r) => el('th', {}, r.name))),
      keys.sort((a, b) => differs(b) - differs(a)).map((k) => el('tr', { class: differs(k) ? 'diff' : '' }, el('td', {}, k), el('td', { class: 'wrap' }, d.config[k] ?? ''), others.map((r) => el('td', { class: 'wrap' }, r.config[k] ?? '')))))));
  const ck = [...new Set(d.checkpoints.flatMap((c) => Object.keys(c)))];
  m.append(el('h2', {}, `Checkpoints (${d.checkpoints.length})`), el('div', { class: 'scroll' }, el('table', {}, el('tr', {}, ck.map((k) => el('th', {}, k))), d.checkpoints.map((c) => el('tr', {}, ck.map((k) => el('td', {}, c[k] == null ? '' : typeof c[k] === 'object' ? JSON.stringify(c[k]) : c[k])))))));
  m.append(el('h2', {}, `Warnings (${d.warnings.length})`), el('ul', {}, d.warnings.map((w) => el('li', {}, w))));
  m.append(el('h2', {}, 'code.diff'), d.code_diff == null ? el('p', { class: 'muted' }, 'none') : el('pre', { id: 'code-diff' }, d.code_diff));
}

// ---------------------------------------------------------------- rollouts
// a split in page URLs: "train", or "eval:<name>" (an evaluator may be named "train")
const splitName = (ev) => (ev == null ? 'train' : `eval:${ev}`);
const splitEval = (split) => (!split || split === 'train' ? null : split.startsWith('eval:') ? split.slice(5) : split);
async function rolloutsView(id, iter, split, group, traj) {
  const m = main(); m.replaceChildren();
  id = id || (selectedRuns()[0] || {}).id;
  if (!id) { m.append(el('p', { class: 'muted' }, 'no run')); return; }
  const runName = (state.byId[id] || {}).name || id;
  const its = (await api(`/api/runs/${encodeURIComponent(id)}/iterations`)).iterations;
  const side = el('div', { class: 'side', id: 'iterations' });
  const body = el('div', { class: 'grow', id: 'rollout-body' });
  m.append(el('h2', {}, `Rollouts · ${runName}`), el('div', { class: 'cols' }, side, body));
  if (!its.length) { body.append(el('p', { class: 'muted' }, 'this run has no iteration reports or rollout summaries')); return; }
  for (const it of its) for (const s of it.splits) {
    const href = `#/rollouts/${encodeURIComponent(id)}/${it.iteration}/${encodeURIComponent(splitName(s.eval))}`;
    const on = String(it.iteration) === iter && splitName(s.eval) === (split || 'train');
    side.append(el('a', { href, class: on ? 'on' : '' }, `#${it.iteration} ${s.eval == null ? 'train' : 'eval: ' + s.label}`, el('span', { class: 'muted' }, s.reward_mean != null ? `  r=${fmt(s.reward_mean)}` : '', s.accuracy != null ? ` acc=${fmt(s.accuracy)}` : '')));
  }
  const train = its.map((it) => [it.iteration, it.splits.find((s) => s.eval == null)]).filter(([, s]) => s && s.rewards);
  if (iter == null) {
    const div = el('div', { class: 'chart', id: 'reward-over-iterations' }); body.append(el('h3', {}, 'Reward by iteration (train)'), div);
    if (train.length) Plotly.newPlot(div, train.map(([i, s]) => ({ y: s.rewards, type: 'box', name: String(i), boxpoints: false })), { margin: { l: 40, r: 10, t: 10, b: 30 }, showlegend: false, xaxis: { title: { text: 'iteration' } } }, { displaylogo: false, responsive: true });
    return;
  }
  const ev = splitEval(split);
  const q = new URLSearchParams({ iteration: iter }); if (ev) q.set('eval', ev);
  const meta = its.find((it) => String(it.iteration) === iter);
  const sp = meta && meta.splits.find((s) => (s.eval || null) === ev);
  body.append(el('h3', {}, `Iteration ${iter} · ${ev == null ? 'train' : 'eval: ' + (sp ? sp.label : ev)}`));
  // the report at files/<its name>: its links (run index, previous/next iteration) open the run's pages in the frame
  // opened when the page came from a search hit in the report (route .../report/<anchor>): the
  // frame's URL names the hit's element (#lt-...), which the report scrolls to and marks (:target) without a script
  const fromHit = group === 'report';
  if (sp && sp.report) {
    const frag = fromHit && traj ? `#${encodeURIComponent(traj)}` : '';
    const box = el('details', { id: 'report', open: fromHit }, el('summary', {}, 'iteration report'), el('iframe', { class: 'report', sandbox: '', src: `/api/runs/${encodeURIComponent(id)}/files/${sp.report.split('/').map(encodeURIComponent).join('/')}${frag}`, title: 'iteration report' }));
    body.append(box);
    if (fromHit) box.scrollIntoView({ block: 'start' });
  }
  if (!sp || !sp.kinds.includes('rollout_summaries')) { body.append(el('p', { class: 'muted' }, 'no rollout summaries for this iteration')); return; }
  const r = await api(`/api/runs/${encodeURIComponent(id)}/rollouts?${q}`);
  const hist = el('div', { class: 'chart', id: 'reward-hist' });
  const flat = r.groups.filter((g) => g.same_reward).length;
  body.append(el('p', {}, `${r.n} trajectories in ${r.groups.length} groups · mean reward ${fmt(r.reward_mean)}`, r.accuracy != null ? ` · accuracy ${fmt(r.accuracy)}` : '', ` · ${flat} group(s) with one reward for all samples (no learning signal)`), hist);
  Plotly.newPlot(hist, [{ x: r.rewards, type: 'histogram', name: 'reward' }], { margin: { l: 40, r: 10, t: 10, b: 30 }, xaxis: { title: { text: 'reward' } }, bargap: 0.05 }, { displaylogo: false, responsive: true });
  for (const g of r.groups) {
    const box = el('div', { class: 'group' + (g.same_reward ? ' flat' : ''), id: `g${g.group}` },
      el('h3', {}, `Group ${g.group}`, g.tags.length ? ` · ${g.tags.join(', ')}` : '', g.same_reward ? ' · same reward for all samples: no learning signal' : ''),
      g.prompt != null ? el('pre', { class: 'prompt' }, g.prompt) : null,
      el('div', { class: 'samples' }, g.samples.map((s) => el('div', { class: 'sample' + (String(g.group) === group && String(s.traj) === traj ? ' hit' : ''), id: `g${g.group}-t${s.traj}` },
        el('div', { class: 'muted' }, `traj ${s.traj} · reward ${fmt(s.reward)} · adv ${fmt(s.advantage)} · ${s.ac_len} tokens`),
        Object.entries(s.logs).map(([k, v]) => el('div', {}, el('b', {}, k + ': '), typeof v === 'string' ? v : JSON.stringify(v)))))));
    body.append(box);
  }
  const target = document.getElementById(`g${group}-t${traj}`);
  if (target) target.scrollIntoView({ block: 'center' });
}

// ---------------------------------------------------------------- search
function searchView(q0) {
  const m = main(); m.replaceChildren();
  const input = el('input', { type: 'search', id: 'search-q', placeholder: 'text in prompts, completions and reports', value: q0 || '' });
  const regex = el('input', { type: 'checkbox', id: 'search-regex' });
  const out = el('div', { id: 'search-results' });
  const go = async (e) => {
    if (e) e.preventDefault();
    const p = new URLSearchParams({ q: input.value }); if (regex.checked) p.set('regex', '1');
    if (state.selected.size) p.set('runs', [...state.selected].join(','));
    out.replaceChildren(el('p', { class: 'muted' }, 'searching…'));
    try {
      const r = await api(`/api/search?${p}`);
      out.replaceChildren(el('p', { class: 'muted' }, `${r.hits.length}${r.truncated ? '+' : ''} hits in ${r.files} files`),
        ...r.hits.map((h) => el('div', { class: 'hit-row' },
          // a rollout hit opens its trajectory; a logtree hit opens its iteration's report
          h.kind === 'logtree'
            ? el('a', { href: `#/rollouts/${encodeURIComponent(h.run)}/${h.iteration}/${encodeURIComponent(splitName(h.eval_name))}/report/${encodeURIComponent(h.anchor || '')}`, class: 'hit-link' },
              `${h.run_name} · iteration ${h.iteration} · ${h.split} · report${h.group != null ? ' · group ' + h.group : ''} · ${h.field}`)
            : el('a', { href: `#/rollouts/${encodeURIComponent(h.run)}/${h.iteration}/${encodeURIComponent(splitName(h.eval_name))}/${h.group}/${h.traj}`, class: 'hit-link' },
              `${h.run_name} · iteration ${h.iteration} · ${h.split} · group ${h.group} · traj ${h.traj} · ${h.field}`),
          el('div', {}, h.before, el('mark', {}, h.match), h.after))));
    } catch (err) { out.replaceChildren(el('p', { class: 'error' }, err.message)); }
  };
  m.append(el('form', { class: 'controls', onsubmit: go }, input, el('label', {}, regex, ' regex'), el('button', { type: 'submit', id: 'search-go' }, 'Search'),
    el('span', { class: 'muted' }, state.selected.size ? 'in the selected runs' : 'in all runs')), out);
  if (q0) go();
}

// ---------------------------------------------------------------- routing and live updates
async function render() {
  const [view, ...rest] = route();
  document.querySelectorAll('header a').forEach((a) => a.classList.toggle('on', a.dataset.view === (view || 'runs')));
  try {
    if (view === 'charts') await chartsView();
    else if (view === 'run') await detailView(rest[0]);
    else if (view === 'rollouts') await rolloutsView(...rest);
    else if (view === 'search') searchView(rest[0]);
    else runsView();
  } catch (e) { main().replaceChildren(el('p', { class: 'error' }, String(e.message || e))); }
}
async function poll() {
  try {
    const r = await api('/api/runs');
    const changed = r.runs.filter((x) => state.versions[x.id] != null && state.versions[x.id] !== x.version).map((x) => x.id);
    const added = r.runs.length !== state.runs.length;
    state.keyOrder = r.key_metrics || []; state.runs = r.runs; state.byId = Object.fromEntries(r.runs.map((x) => [x.id, x]));
    r.runs.forEach((x) => { state.versions[x.id] = x.version; });
    document.getElementById('live').textContent = `${r.runs.length} runs · updated ${new Date().toLocaleTimeString()}`;
    const [view] = route();
    if ((view || 'runs') === 'runs') drawRunsTable();
    if (view === 'charts') {
      if (added && !document.getElementById('chart-groups')) await chartsView();
      state.charts.filter((c) => c.data && c.traces.some((t) => changed.includes(t.run.id))).forEach((c) => { c.traces.forEach((t) => { t.run = state.byId[t.run.id] || t.run; }); drawChart(c, true); });
    }
  } catch (e) { document.getElementById('live').textContent = `not updated: ${e.message}`; }
}
window.addEventListener('hashchange', render);
window.addEventListener('DOMContentLoaded', async () => { await poll(); await render(); setInterval(poll, 1000); });
