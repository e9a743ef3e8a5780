// harness view: the page. Every text from a log is set with textContent (never as HTML):
// commands, outputs, file names and model text are hostile input. The server's policy allows
// no other script than this file.
'use strict';

// ---- helpers ---------------------------------------------------------------------------

/** An element: h('td', {class: 'num', testid: 'x'}, 'text', child, …). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'testid') el.dataset.testid = value;
    else if (key === 'data') Object.assign(el.dataset, value);
    // Through the CSSOM: the page's policy refuses inline style attributes.
    else if (key === 'style') Object.assign(el.style, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

async function api(path) {
  const response = await fetch(path, { credentials: 'same-origin' });
  const type = response.headers.get('content-type') || '';
  const body = type.includes('json') ? await response.json() : await response.text();
  if (!response.ok) throw new Error((body && body.error) || `${response.status} ${path}`);
  return body;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null) q.set(k, v);
  }
  return q.toString();
}

const fmt = {
  cost: (v) => (v === null || v === undefined ? '–' : `$${Number(v).toFixed(4)}`),
  num: (v, d = 2) => (v === null || v === undefined ? '–' : Number(v).toFixed(d)),
  int: (v) => (v === null || v === undefined ? '–' : String(v)),
  ms: (v) => (v === null || v === undefined ? '–' : v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(1)} s`),
  when: (ts) => (ts ? ts.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–'),
};

// A scripted model by its file's name (the whole path is the cell's title).
function shortModel(model) {
  return model.startsWith('script:') ? `script:${model.split('/').pop()}` : model;
}

// `1 run`, `2 runs`.
function plural(n, noun) {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

function badge(text, cls) {
  return h('span', { class: `badge ${cls || text}` }, text);
}

function runLink(id, text) {
  return h('a', { href: `#/run?${query({ id })}` }, text);
}

/** What a route starts that must stop when the page moves on: timers and followed logs. */
const live = {
  stops: [],
  add(stop) { this.stops.push(stop); },
  clear() { this.stops.splice(0).forEach((stop) => stop()); document.getElementById('live').hidden = true; },
};

/** Repeats `work` while `el` is on the page (a view that moved on starts nothing). */
function every(el, ms, work) {
  if (!el.isConnected) return;
  const timer = setInterval(work, ms);
  live.add(() => clearInterval(timer));
}

/** Follows a log from `line`: `onEvents(array)` for each batch of new lines. */
function follow(el, id, line, onEvents, onEnd) {
  if (!el.isConnected) return;
  const source = new EventSource(`/api/follow?${query({ id, line })}`);
  const indicator = document.getElementById('live');
  indicator.hidden = false;
  source.addEventListener('events', (message) => onEvents(JSON.parse(message.data)));
  const end = () => { source.close(); indicator.hidden = true; if (onEnd) onEnd(); };
  source.addEventListener('end', end);
  source.addEventListener('gone', end);
  live.add(() => source.close());
}

/** A log `Text`: its inline text, or its preview and a button that loads the whole blob. */
function textBlock(runId, text, testid) {
  if (!text) return h('pre', { testid }, '');
  if (text.text !== undefined && text.text !== null) return h('pre', { testid }, text.text);
  const pre = h('pre', { testid }, text.preview || '');
  if (text.blob && text.blob.sha256) {
    const more = h('button', {
      onclick: async () => {
        try { pre.textContent = await api(`/api/blob?${query({ id: runId, sha256: text.blob.sha256 })}`); more.remove(); }
        catch (err) { more.replaceWith(h('span', { class: 'error' }, err.message)); }
      },
    }, `show all ${text.size} bytes`);
    return h('div', {}, pre, more);
  }
  return pre;
}

function facts(pairs) {
  const dl = h('dl', { class: 'facts' });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === '') continue;
    dl.append(h('dt', {}, k), h('dd', {}, v));
  }
  return dl;
}

// ---- routing ---------------------------------------------------------------------------

function route() {
  live.clear();
  const hash = location.hash.slice(1) || '/';
  const [path, rest] = hash.split('?');
  const params = new URLSearchParams(rest || '');
  const views = { '/': runsView, '/run': runView, '/compare': compareView, '/trajectories': trajectoriesView, '/search': searchView };
  const view = views[path] || runsView;
  // Each route draws into a container of its own: a view still loading when the address
  // changes draws into one that is no longer on the page.
  const root = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  document.getElementById('main').replaceChildren(root);
  Promise.resolve(view(params, root)).catch((err) => root.replaceChildren(h('p', { class: 'error', testid: 'error' }, err.message)));
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  document.getElementById('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = document.getElementById('search').value.trim();
    if (q) location.hash = `#/search?${query({ q })}`;
  });
  route();
});

// ---- runs ------------------------------------------------------------------------------

async function runsView(params, root) {
  const state = { kind: params.get('kind') || '', status: params.get('status') || '', failure: params.get('failure') || '', q: params.get('q') || '', all: params.get('all') === '1', generation: null };
  const selected = new Set();
  const table = h('table', { testid: 'runs' });
  const count = h('span', { class: 'muted' });
  const select = (name, options) => {
    const el = h('select', { 'aria-label': name, onchange: () => { state[name] = el.value; refresh(true); } },
      options.map(([value, label]) => h('option', { value }, label)));
    el.value = state[name];
    return el;
  };
  const filter = h('input', { type: 'text', placeholder: 'filter by name, task, model', value: state.q, testid: 'filter' });
  filter.addEventListener('input', () => { state.q = filter.value; refresh(true); });
  const trials = h('input', { type: 'checkbox', checked: state.all });
  trials.addEventListener('change', () => { state.all = trials.checked; refresh(true); });
  const compare = h('button', { testid: 'compare-selected', onclick: () => compareSelected(selected) }, 'Compare selected');
  root.replaceChildren(
    h('h1', {}, 'Runs'),
    h('div', { class: 'toolbar' }, filter,
      select('kind', [['', 'sessions and batches'], ['session', 'sessions'], ['batch', 'batches']]),
      select('status', [['', 'any status'], ['running', 'running'], ['completed', 'completed'], ['failed', 'failed'], ['unfinished', 'unfinished']]),
      select('failure', [['', 'any failure class'], ...['check', 'verifier', 'limit', 'model', 'infrastructure', 'interrupted', 'error'].map((c) => [c, c])]),
      h('label', {}, trials, ' trials of batches'), compare, count),
    table);

  // Only the answer to the latest request is drawn (a filter typed fast sends many).
  let ticket = 0;
  async function refresh(force) {
    const mine = ++ticket;
    // A changed filter: the next poll must fetch the whole list too.
    if (force) state.generation = null;
    const data = await api(`/api/runs?${query({ kind: state.kind || undefined, status: state.status || undefined, failure: state.failure || undefined, q: state.q || undefined, all: state.all ? 'true' : undefined, since: force ? undefined : state.generation })}`);
    if (mine !== ticket || data.unchanged) return;
    state.generation = data.generation;
    count.textContent = `${plural(data.total, 'run')}${data.total > data.runs.length ? ` (first ${data.runs.length} shown)` : ''}${data.cut ? '; more than the index holds' : ''}`;
    table.replaceChildren(h('tr', {}, h('th', {}, ''), h('th', {}, 'run'), h('th', {}, 'kind'), h('th', {}, 'status'), h('th', {}, 'task'),
      h('th', {}, 'model'), h('th', {}, 'outcome'), h('th', { class: 'num' }, 'reward'), h('th', { class: 'num' }, 'cost'),
      h('th', { class: 'num' }, 'duration'), h('th', {}, 'started')));
    for (const run of data.runs) {
      const box = h('input', { type: 'checkbox', checked: selected.has(run.id), 'aria-label': `select ${run.name}` });
      box.addEventListener('change', () => (box.checked ? selected.add(run.id) : selected.delete(run.id)));
      table.append(h('tr', { testid: 'run-row', data: { id: run.id, kind: run.kind || '', status: run.status || '' } },
        h('td', {}, box),
        h('td', { class: 'wrap' }, runLink(run.id, run.name), h('div', { class: 'muted path' }, run.path)),
        h('td', {}, run.kind || '?'),
        h('td', {}, badge(run.status || '?')),
        h('td', { class: 'task-cell', title: run.task }, run.task),
        h('td', { class: 'wrap', title: run.model || run.agent || '' }, shortModel(run.model || run.agent || '')),
        h('td', {}, run.kind === 'batch' ? batchWords(run) : [run.outcome || '', run.failure ? ` (${run.failure})` : '']),
        h('td', { class: 'num' }, fmt.num(run.reward)),
        h('td', { class: 'num' }, fmt.cost(run.cost)),
        h('td', { class: 'num' }, fmt.ms(run.duration_ms)),
        h('td', {}, fmt.when(run.started))));
    }
  }
  await refresh(true);
  every(root, 1000, () => refresh(false).catch(() => {}));
}

function batchWords(run) {
  const c = run.batch_counts;
  if (!c) return '';
  return `${c.passed} passed, ${c.failed} failed of ${c.tasks}${c.finished < c.tasks ? ` (${c.tasks - c.finished} to go)` : ''}`;
}

async function compareSelected(selected) {
  const ids = [...selected];
  if (ids.length < 2) { alert('Select two runs or more: batches to compare, or two sessions to align.'); return; }
  const runs = await Promise.all(ids.map((id) => api(`/api/run?${query({ id })}`)));
  if (runs.every((r) => r.kind === 'batch')) location.hash = `#/compare?${query({ id: ids })}`;
  else if (ids.length === 2 && runs.every((r) => r.kind === 'session')) location.hash = `#/trajectories?${query({ a: ids[0], b: ids[1] })}`;
  else alert('Compare batches with batches, or exactly two sessions.');
}

// ---- one run ---------------------------------------------------------------------------

async function runView(params, root) {
  const id = params.get('id');
  const run = await api(`/api/run?${query({ id })}`);
  if (run.kind === 'batch') return batchView(run, root);
  return sessionView(run, params, root);
}

function runHeader(run) {
  return [
    h('h1', {}, run.name, ' ', badge(run.status || '?')),
    facts([
      ['folder', run.path], ['task', run.task], ['model', run.model], ['agent', run.agent],
      ['outcome', run.outcome ? `${run.outcome}${run.failure ? ` (${run.failure})` : ''}` : null],
      ['reward', run.reward === null ? null : fmt.num(run.reward)], ['cost', run.cost === null ? null : fmt.cost(run.cost)],
      ['turns', run.turns], ['tool calls', run.tool_calls], ['tokens', run.tokens], ['duration', run.duration_ms === null ? null : fmt.ms(run.duration_ms)],
      ['started', fmt.when(run.started)], ['forked from', run.forked_from],
      ['batch', run.batch ? runLink(run.batch, run.batch) : null],
      ['parent session', run.parent ? runLink(run.parent, run.parent) : null],
      ['bad lines', run.bad_lines ? String(run.bad_lines) : null],
    ]),
  ];
}

async function sessionView(run, params, root) {
  const tab = params.get('tab') || 'transcript';
  const tabs = h('div', { class: 'toolbar' },
    ['transcript', 'workspace', 'steps'].map((name) => h('button', {
      class: name === tab ? 'active' : '', testid: `tab-${name}`,
      onclick: () => { location.hash = `#/run?${query({ id: run.id, tab: name })}`; },
    }, name)));
  const body = h('div', {});
  const children = (run.children || []).length === 0 ? '' : h('div', {},
    h('h2', {}, 'Subagents and forks'),
    h('table', { testid: 'children' }, h('tr', {}, h('th', {}, 'run'), h('th', {}, 'kind'), h('th', {}, 'status'), h('th', {}, 'forked from'), h('th', {}, 'task'), h('th', {}, 'outcome'), h('th', { class: 'num' }, 'reward'), h('th', { class: 'num' }, 'cost')),
      run.children.map((c) => h('tr', { testid: 'child', data: { id: c.id } },
        h('td', {}, runLink(c.id, c.path)), h('td', {}, c.kind === 'batch' ? 'fork' : c.path.includes('/agents/') ? 'subagent' : 'session'), h('td', {}, badge(c.status || '?')), h('td', {}, c.forked_from || ''),
        h('td', { class: 'task-cell', title: c.task }, c.task), h('td', {}, c.outcome || ''),
        h('td', { class: 'num' }, fmt.num(c.reward)), h('td', { class: 'num' }, fmt.cost(c.cost))))));
  root.replaceChildren(...runHeader(run), children, tabs, body);
  if (tab === 'workspace') return workspaceView(run, body, params);
  return transcriptView(run, body, tab === 'steps', params);
}

/** Events a steps tab loads at most (the bars of a longer session are of its start). */
const MAX_BAR_EVENTS = 10000;

async function transcriptView(run, body, bars, params) {
  const list = h('div', { testid: 'transcript' });
  const more = h('button', { testid: 'more' }, 'load more');
  // A running session's new events, after the pages loaded from its start.
  const tail = h('div', { testid: 'transcript-live' });
  const barBox = h('div', { class: 'bars', testid: 'bars' });
  body.replaceChildren(bars ? barBox : list, bars ? '' : more, bars ? '' : tail);
  const target = params.get('line') ? Number(params.get('line')) : null;
  let next = target !== null ? Math.max(0, target - 20) : 0;
  let total = 0;
  let stop = Infinity;
  const loaded = [];
  const show = (events, into) => {
    for (const event of events) {
      loaded.push(event);
      const el = safeRender(run.id, event);
      if (event.line === target) { el.classList.add('target'); setTimeout(() => el.scrollIntoView({ block: 'center' }), 0); }
      into.append(el);
    }
    if (bars) {
      try { drawBars(barBox, loaded); } catch (err) { barBox.replaceChildren(h('p', { class: 'error' }, `the steps cannot be drawn: ${err.message}`)); }
    }
  };
  async function page() {
    const limit = Math.max(1, Math.min(500, stop - next));
    const data = await api(`/api/events?${query({ id: run.id, from: next, limit })}`);
    const events = data.events.filter((e) => e.line < stop);
    show(events, list);
    next = data.from + events.length;
    total = data.total;
    more.hidden = next >= Math.min(total, stop);
    if (!more.hidden) more.textContent = `load more (${Math.min(total, stop) - next} events not shown yet)`;
    return data;
  }
  more.addEventListener('click', () => page().catch((err) => more.replaceWith(h('p', { class: 'error' }, err.message))));
  await page();
  if (bars) {
    while (next < total && loaded.length < MAX_BAR_EVENTS) await page();
    if (next < total) barBox.prepend(h('p', { class: 'muted' }, `the first ${loaded.length} of ${total} events`));
    return;
  }
  if (run.status === 'running') {
    // New events appear below; the ones between are paged in with "load more".
    stop = total;
    more.hidden = next >= stop;
    follow(body, run.id, total, (events) => show(events, tail));
  }
}

function drawBars(box, events) {
  const rows = [];
  const calls = new Map(events.filter((e) => e.type === 'tool_call').map((e) => [e.data.call_id, e.data]));
  for (const e of events) {
    if (e.type === 'model_response') rows.push([`model turn ${e.data.turn}`, e.data.latency_ms, e.seq]);
    if (e.type === 'tool_result') {
      const call = calls.get(e.data.call_id);
      rows.push([`${e.data.name} ${call ? call.arguments : ''}`, e.data.duration_ms, e.seq]);
    }
  }
  const max = Math.max(1, ...rows.map((r) => r[1] || 0));
  box.replaceChildren(h('p', { class: 'muted' }, `${rows.length} steps; the longest took ${fmt.ms(max)}`),
    ...rows.map(([label, ms, seq]) => h('div', { class: 'bar', testid: 'bar' },
      h('span', { class: 'label', title: label }, `#${seq} ${label}`),
      h('span', { class: 'fill', style: { width: `${Math.max(1, Math.round(400 * (ms || 0) / max))}px` } }),
      h('span', {}, fmt.ms(ms)))));
}

/** An event as renderEvent shows it, or, when a crafted line's fields are not of the types the
 * log's schema gives them, as its JSON text: one bad line never blanks the transcript. */
function safeRender(runId, event) {
  try {
    return renderEvent(runId, event);
  } catch (err) {
    return h('div', { class: 'event invalid', testid: 'event', data: { type: 'unreadable', seq: '' } },
      h('div', { class: 'head' }, `line ${Number(event && event.line)} · not shown as an event (${err.message})`),
      h('pre', {}, JSON.stringify(event).slice(0, 4000)));
  }
}

function renderEvent(runId, event) {
  const d = event.data || {};
  const kind = event.type;
  const cls = kind === 'tool_result' && d.status && d.status !== 'ok' ? 'blocked' : kind;
  const head = h('div', { class: 'head' }, `#${event.seq ?? '?'} · ${kind} · ${fmt.when(event.ts)}`);
  const box = h('div', { class: `event ${cls}`, testid: 'event', data: { type: kind || '', seq: String(event.seq ?? '') } }, head);
  switch (kind) {
    case 'session_started':
      box.append(facts([['task', d.task], ['model', d.config && d.config.model], ['tools', d.config && (d.config.tool_names || []).join(', ')], ['policy', d.config && d.config.policy]]));
      break;
    case 'model_request':
      box.append(h('div', {}, `turn ${d.turn} (${d.purpose}): ${d.n_messages} messages, ~${d.estimated_tokens} tokens`));
      break;
    case 'model_response':
      box.append(textBlock(runId, d.text, 'model-text'));
      for (const call of d.tool_calls || []) box.append(h('div', { class: 'muted' }, `→ ${call.name} ${call.arguments}`));
      box.append(h('div', { class: 'muted' }, `${d.usage ? d.usage.input_tokens + d.usage.output_tokens : '?'} tokens · ${fmt.ms(d.latency_ms)}${d.cost !== null && d.cost !== undefined ? ` · ${fmt.cost(d.cost)}` : ''}`));
      break;
    case 'policy_decision':
      box.append(h('div', {}, badge(d.decision || '?', d.allowed ? 'passed' : 'failed'), ` ${d.tool}: ${d.reason}`),
        h('div', { class: 'muted' }, `by ${d.source}${d.rule ? `, rule ${d.rule}` : ''}${d.risk !== null && d.risk !== undefined ? `, risk ${d.risk}` : ''}${d.classifier_model ? `, classifier ${d.classifier_model}` : ''}${d.settled_by ? `, settled by ${d.settled_by}` : ''}`));
      break;
    case 'tool_call':
      box.append(h('div', {}, h('b', {}, d.name)), h('pre', { testid: 'call' }, prettyArguments(d.arguments)));
      break;
    case 'tool_result':
      box.append(h('div', {}, badge(d.status || '?', d.status === 'ok' ? 'passed' : 'failed'), ` ${d.name} · exit ${d.exit_code ?? '–'} · ${fmt.ms(d.duration_ms)}${d.timed_out ? ' · timed out' : ''}`),
        textBlock(runId, d.output, 'output'));
      break;
    case 'workspace_changed':
      box.append(h('div', {}, h('a', { href: `#/run?${query({ id: runId, tab: 'workspace', step: event.seq })}`, testid: 'workspace-link' }, 'workspace at this step')),
        h('ul', {}, (d.changes || []).slice(0, 200).map((c) => h('li', {}, `${c.change} ${c.path}`))));
      break;
    case 'check_result':
      box.append(h('div', {}, badge(d.passed ? 'passed' : 'failed'), ` ${d.command} · exit ${d.exit_code}`), textBlock(runId, d.output, 'check-output'));
      break;
    case 'verifier_finished':
      box.append(h('div', {}, badge(d.passed ? 'passed' : 'failed'), ` reward ${d.reward ?? '–'}${d.failure ? ` · ${d.failure}` : ''}${d.message ? ` · ${d.message}` : ''}`));
      break;
    case 'error':
      box.append(h('div', { class: 'error' }, `${d.class}: ${d.message}`));
      break;
    case 'session_finished':
      box.append(facts([['outcome', d.outcome], ['failure', d.failure], ['turns', d.turns], ['tool calls', d.tool_calls], ['cost', fmt.cost(d.cost)], ['duration', fmt.ms(d.duration_ms)]]),
        textBlock(runId, d.answer, 'answer'));
      break;
    case 'workspace_snapshot':
      box.append(h('div', {}, `the workspace as the agent found it: ${d.n_files} files, ${d.n_bytes} bytes `,
        h('a', { href: `#/run?${query({ id: runId, tab: 'workspace', step: event.seq })}` }, 'browse')));
      break;
    case 'state_fingerprint':
      box.append(h('div', { class: 'muted' }, `${(d.processes || []).length} processes, ${(d.listening || []).length} listening sockets, ${(d.watched || []).length} watched paths`));
      break;
    case 'compaction':
      box.append(h('div', {}, `the conversation compacted: ${d.n_replaced} messages replaced by a summary (${d.n_before} → ${d.n_after})`), textBlock(runId, d.summary, 'summary'));
      break;
    case 'hook_run':
      box.append(h('div', {}, `hook ${d.hook} (${d.event}${d.tool ? `, ${d.tool}` : ''}): ${d.outcome}${d.decision ? ` · ${d.decision}` : ''}${d.reason ? ` · ${d.reason}` : ''}`));
      break;
    case 'subagent_started':
      box.append(h('div', {}, `subagent (depth ${d.depth}, ${d.workspace} workspace) `,
        typeof d.log_dir === 'string' && !d.log_dir.split('/').includes('..') ? runLink(`${runId}/${d.log_dir}`, d.log_dir) : ''),
        textBlock(runId, d.task, 'subagent-task'));
      break;
    case 'subagent_finished':
      box.append(h('div', {}, `subagent ${d.session_id} finished`), h('pre', {}, JSON.stringify(d).slice(0, 2000)));
      break;
    case 'task_started': case 'task_finished': case 'task_retried': case 'task_skipped': case 'task_not_runnable':
      box.append(h('div', {}, `${d.task}${d.passed !== undefined ? (d.passed ? ' passed' : ' failed') : ''}${d.reason ? `: ${d.reason}` : ''}`));
      break;
    default: {
      const json = JSON.stringify(d);
      box.append(h('pre', {}, json.length > 2000 ? `${json.slice(0, 2000)}…` : json));
    }
  }
  return box;
}

function prettyArguments(text) {
  try {
    const value = JSON.parse(text);
    const command = value && (typeof value.cmd === 'string' ? value.cmd : value.command);
    if (typeof command === 'string' && Object.keys(value).length <= 2) return command;
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return text;
  }
}

// ---- the workspace at a step -----------------------------------------------------------

async function workspaceView(run, body, params) {
  const steps = await api(`/api/workspace/steps?${query({ id: run.id })}`);
  if (steps.length === 0) { body.replaceChildren(h('p', { class: 'muted' }, 'This log recorded no workspace.')); return; }
  const step = params.has('step') ? Number(params.get('step')) : steps[steps.length - 1].seq;
  const stepBar = h('div', { class: 'steps', testid: 'ws-steps' }, steps.map((s) => h('button', {
    class: s.seq === step ? 'active' : '', testid: 'ws-step', data: { seq: String(s.seq) },
    title: s.kind === 'snapshot' ? 'as the agent found it' : `${s.changes} changes by call ${s.call_id}`,
    onclick: () => { location.hash = `#/run?${query({ id: run.id, tab: 'workspace', step: s.seq })}`; },
  }, s.kind === 'snapshot' ? `#${s.seq} start` : `#${s.seq}`)));
  const changedOnly = params.get('changed') === '1';
  const page = (after) => api(`/api/workspace/tree?${query({ id: run.id, step, after, changed: changedOnly ? 'true' : undefined })}`);
  const tree = await page(undefined);
  const list = h('div', { class: 'tree', testid: 'ws-tree', data: { step: String(tree.step) } });
  const viewer = h('div', { testid: 'ws-file' }, h('p', { class: 'muted' }, 'Open a file.'));
  const more = h('button', { testid: 'ws-more' });
  // A large workspace comes a page at a time; the next is asked for only when wanted.
  const show = (part) => {
    for (const entry of part.entries) list.append(treeRow(run.id, part.step, entry, list, viewer));
    more.replaceChildren(`Show more (${list.childElementCount} of ${tree.listed} shown)`);
    more.hidden = part.next === null;
    more.onclick = async () => { more.disabled = true; show(await page(part.next)); more.disabled = false; };
  };
  show(tree);
  const toggle = h('a', {
    href: `#/run?${query({ id: run.id, tab: 'workspace', step, changed: changedOnly ? undefined : '1' })}`, testid: 'ws-changed',
  }, changedOnly ? 'show every entry' : `show only the ${tree.changed} changed`);
  body.replaceChildren(stepBar,
    h('p', { class: 'muted' }, `After event #${tree.step}: ${tree.total} entries${tree.base !== null ? `, ${tree.changed} changed against #${tree.base}` : ''}. `, tree.base !== null ? toggle : null),
    h('div', { class: 'split' }, h('div', {}, list, more), viewer));
  const path = params.get('path');
  if (path) openFile(run.id, tree.step, path, viewer);
}

/** One entry of a workspace tree, which opens its file when clicked. */
function treeRow(id, step, entry, list, viewer) {
  const depth = entry.path.split('/').length - 1;
  const name = entry.path.split('/').pop();
  const suffix = entry.kind === 'dir' ? '/' : entry.kind === 'symlink' ? ` → ${entry.target || ''}` : '';
  const row = h('div', {
    class: entry.change || '', testid: 'ws-entry',
    data: { path: entry.path, kind: entry.kind, change: entry.change || '', sha256: entry.sha256 || '' },
    style: { paddingLeft: `${depth * 14 + 4}px` }, title: `${entry.path} · ${entry.size} bytes · mode ${entry.mode.toString(8)}`,
  }, name + suffix, entry.change ? ` (${entry.change})` : '');
  if (entry.kind === 'file' || entry.change === 'deleted') {
    row.addEventListener('click', () => {
      list.querySelectorAll('.selected').forEach((el) => el.classList.remove('selected'));
      row.classList.add('selected');
      openFile(id, step, entry.path, viewer);
    });
  }
  return row;
}

async function openFile(id, step, path, viewer) {
  viewer.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  try {
    const file = await api(`/api/workspace/file?${query({ id, step, path })}`);
    const parts = [h('h2', { testid: 'ws-path' }, file.path),
      h('p', { class: 'muted' }, file.version ? `${file.version.size} bytes · sha256 ${file.version.sha256 || '–'}${file.verified ? ' · content verified' : ''}` : 'not in the workspace at this step')];
    if (file.note) parts.push(h('p', { class: 'muted', testid: 'ws-note' }, file.note));
    if (file.text !== null && file.text !== undefined) parts.push(h('pre', { testid: 'ws-content' }, file.text));
    if (file.diff) {
      parts.push(h('h2', {}, `Changes against #${file.base}`));
      parts.push(h('pre', { class: 'diff', testid: 'ws-diff' }, file.diff.split('\n').map((line) => h('div', {
        class: line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : '',
      }, line))));
    }
    viewer.replaceChildren(...parts);
  } catch (err) {
    viewer.replaceChildren(h('p', { class: 'error' }, err.message));
  }
}

// ---- a batch ---------------------------------------------------------------------------

async function batchView(run, root) {
  const summary = h('div', {});
  const grid = h('table', { class: 'grid', testid: 'grid' });
  const charts = h('div', { class: 'charts' });
  const others = await api(`/api/runs?${query({ kind: 'batch' })}`);
  const pick = h('select', { 'aria-label': 'batch to compare with' },
    h('option', { value: '' }, 'compare with…'),
    others.runs.filter((r) => r.id !== run.id).map((r) => h('option', { value: r.id }, `${r.name} (${r.path})`)));
  pick.addEventListener('change', () => { if (pick.value) location.hash = `#/compare?${query({ id: [run.id, pick.value] })}`; });
  root.replaceChildren(...runHeader(run), h('div', { class: 'toolbar' }, pick), summary, h('h2', {}, 'Trials'), grid, h('h2', {}, 'Charts'), charts);
  let version = 0;
  let chartKey = null;
  async function draw() {
    const data = await api(`/api/batch?${query({ id: run.id })}`);
    version += 1;
    summary.replaceChildren(facts([
      ['trials', `${data.finished} of ${data.trials} finished, ${data.passed} passed`],
      ['pass@k', data.pass_at_k.map(([k, v]) => `pass@${k} ${(100 * v).toFixed(1)}%`).join(' · ')],
      ['failures', Object.entries(data.failures).map(([k, n]) => `${k}: ${n}`).join(' · ') || 'none'],
      ['cost', fmt.cost(data.cost)], ['tokens', String(data.tokens)],
    ]));
    const most = Math.max(1, ...data.rows.map((r) => r.cells.length));
    const headRow = h('tr', {}, h('th', {}, 'task'), Array.from({ length: most }, (_, i) => h('th', {}, `trial ${i + 1}`)),
      h('th', { class: 'num' }, 'passed'), h('th', { class: 'num' }, 'mean reward'), h('th', {}, 'health'));
    grid.replaceChildren(headRow, ...data.rows.map((row) => h('tr', { testid: 'grid-row', data: { task: row.task } },
      h('td', {}, row.task),
      Array.from({ length: most }, (_, i) => {
        const c = row.cells[i];
        if (!c) return h('td', {});
        const label = c.state === 'passed' || c.state === 'failed' ? (c.reward !== null && c.reward !== undefined ? fmt.num(c.reward) : c.state === 'passed' ? '✓' : '✗') : c.state.replace('_', ' ');
        const title = [c.task_id, c.outcome, c.failure, c.note, c.cost !== null ? fmt.cost(c.cost) : null, c.duration_ms !== null ? fmt.ms(c.duration_ms) : null].filter(Boolean).join(' · ');
        const inner = c.run ? h('a', { href: `#/run?${query({ id: c.run })}`, class: c.state, title }, label) : h('span', { class: c.state, title }, label);
        return h('td', { class: 'cell', testid: 'cell', data: { task: c.task_id, state: c.state } }, inner);
      }),
      h('td', { class: 'num' }, `${row.passed}/${row.finished}`),
      h('td', { class: 'num' }, fmt.num(row.mean_reward)),
      h('td', {}, row.health || ''))));
    // The charts are drawn again only when a trial started or finished.
    const key = `${data.trials}:${data.finished}:${data.passed}:${data.rows.reduce((n, r) => n + r.cells.filter((c) => c.run).length, 0)}`;
    if (key !== chartKey) {
      chartKey = key;
      charts.replaceChildren(...['outcomes', 'per-task', 'cost', 'duration', 'tool-latency', 'turns'].map((name) => h('img', {
        src: `/api/chart?${query({ id: run.id, name, v: version })}`, alt: `${name} chart`, testid: 'chart',
      })));
    }
  }
  await draw();
  const counted = await api(`/api/events?${query({ id: run.id, from: 1e15, limit: 1 })}`);
  let pending = null;
  if (run.status === 'running') {
    // The batch log says a trial started or finished: the grid is drawn again at once; its
    // trials' own logs are summarised by the index within its refresh.
    follow(root, run.id, counted.total, () => {
      if (pending) return;
      pending = setTimeout(() => { pending = null; draw().catch(() => {}); }, 50);
    }, () => draw().catch(() => {}));
    every(root, 1000, () => draw().catch(() => {}));
  }
}

// ---- compare ---------------------------------------------------------------------------

async function compareView(params, root) {
  const ids = params.getAll('id');
  const data = await api(`/api/compare?${query({ id: ids })}`);
  const stats = h('table', { testid: 'paired' }, h('tr', {}, h('th', {}, 'against the first'), h('th', { class: 'num' }, 'tasks in both'),
    h('th', { class: 'num' }, 'mean difference'), h('th', {}, '95% interval (bootstrap)'), h('th', { class: 'num' }, 'fixed'),
    h('th', { class: 'num' }, 'broke'), h('th', { class: 'num' }, 'sign test p')),
    data.paired.map((p) => h('tr', {}, h('td', {}, data.sides[p.side].name), h('td', { class: 'num' }, p.n),
      h('td', { class: 'num' }, fmt.num(p.mean_difference, 3)), h('td', {}, `[${fmt.num(p.interval[0], 3)}, ${fmt.num(p.interval[1], 3)}]`),
      h('td', { class: 'num' }, p.fixed), h('td', { class: 'num' }, p.broke), h('td', { class: 'num' }, fmt.num(p.sign_test_p, 3)))));
  const grid = h('table', { class: 'grid', testid: 'compare-grid' }, h('tr', {}, h('th', {}, 'task'),
    data.sides.map((s) => h('th', {}, runLink(s.id, s.name), h('div', { class: 'muted' }, `${s.passed}/${s.tasks} pass`))), h('th', {}, 'flips'), h('th', {}, '')));
  for (const line of data.tasks) {
    const flips = line.flips.filter(Boolean);
    const first = line.scores[0];
    const other = line.scores.slice(1).find((s) => s && s.run);
    grid.append(h('tr', { class: flips.length ? `flip-${flips[0]}` : '', testid: 'compare-row', data: { task: line.task, flip: flips[0] || '' } },
      h('td', {}, line.task),
      line.scores.map((s, i) => h('td', { class: 'cell' },
        s ? h('a', { href: s.run ? `#/run?${query({ id: s.run })}` : undefined, class: s.passes ? 'passed' : 'failed', title: `${s.passed}/${s.trials} passed` }, fmt.num(s.score)) : '–',
        i > 0 && s && first ? h('span', { class: 'muted', testid: 'difference' }, ` ${s.score - first.score >= 0 ? '+' : ''}${fmt.num(s.score - first.score)}`) : '')),
      h('td', {}, flips.map((f) => badge(f))),
      h('td', {}, first && first.run && other ? h('a', { href: `#/trajectories?${query({ a: first.run, b: other.run })}`, testid: 'align' }, 'step by step') : '')));
  }
  root.replaceChildren(h('h1', {}, `Compare ${data.sides.length} batches`),
    h('p', { class: 'muted' }, 'A task passes in a batch when at least half of its finished trials passed; its score is its mean reward, or its pass rate without rewards. A flip is a task that passes on one side only.'),
    stats, h('h2', {}, 'Tasks'), grid);
}

const DIFFERS = {
  tool: 'a different tool was called', arguments: 'the arguments differ', status: 'the status or exit code differs',
  output: 'the output differs', length: 'one session made more calls than the other',
};

async function trajectoriesView(params, root) {
  const data = await api(`/api/trajectories?${query({ a: params.get('a'), b: params.get('b') })}`);
  const div = data.divergence;
  const n = Math.max(data.a.steps.length, data.b.steps.length);
  const cell = (side, i, step, cls) => {
    if (!step) return h('div', { class: cls }, h('span', { class: 'muted' }, '(no step)'));
    return h('div', { class: cls, testid: `step-${side}` },
      h('div', {}, h('b', {}, step.tool), h('span', { class: 'muted' }, ` #${step.seq} · ${step.status || '?'} · exit ${step.exit_code ?? '–'}`)),
      h('pre', {}, prettyArguments(step.arguments)),
      step.output ? h('pre', {}, step.output) : '');
  };
  const rows = [];
  for (let i = 0; i < n; i += 1) {
    const cls = div && i === div.step ? 'diverged' : div && i > div.step ? 'after' : '';
    rows.push(h('div', { class: cls, testid: cls === 'diverged' ? 'divergence' : undefined }, String(i + 1)),
      cell('a', i, data.a.steps[i], cls), cell('b', i, data.b.steps[i], cls));
  }
  root.replaceChildren(h('h1', {}, 'Two sessions, step by step'),
    h('p', { testid: 'divergence-summary' }, div ? `First divergence at step ${div.step + 1}: ${DIFFERS[div.field] || div.field}.`
      : data.a.truncated || data.b.truncated ? `No divergence in the first ${data.a.steps.length} calls (only those are compared).`
        : 'No divergence: the same calls with the same results.'),
    h('div', { class: 'pair' }, h('div', {}, ''),
      h('div', {}, runLink(data.a.run, data.a.run), h('div', { class: 'muted' }, `${data.a.outcome || 'unfinished'} · ${data.a.steps.length} calls`)),
      h('div', {}, runLink(data.b.run, data.b.run), h('div', { class: 'muted' }, `${data.b.outcome || 'unfinished'} · ${data.b.steps.length} calls`)),
      rows));
}

// ---- search ----------------------------------------------------------------------------

async function searchView(params, root) {
  const q = params.get('q') || '';
  document.getElementById('search').value = q;
  const data = await api(`/api/search?${query({ q })}`);
  root.replaceChildren(h('h1', {}, `Search: ${q}`),
    h('p', { class: 'muted' }, `${plural(data.hits.length, 'hit')} in ${plural(data.runs_searched, 'run')}${data.complete ? '' : ' (stopped early: refine the search)'}`),
    h('div', { testid: 'hits' }, data.hits.map((hit) => h('div', { class: 'hit', testid: 'hit', data: { what: hit.what, run: hit.run } },
      h('div', { class: 'what' }, `${hit.what} · `, runLink(hit.run, hit.name), hit.seq !== null ? ` · #${hit.seq}` : ''),
      h('a', { href: `#/run?${query({ id: hit.run, line: hit.line === null ? undefined : hit.line })}` }, h('pre', {}, hit.text))))));
}
