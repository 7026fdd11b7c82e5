// breakerd's status page. It reads the fleet through the daemon's HTTP API
// with the bearer token typed in above, held in this script's memory only
// (no cookie, no storage): GET /v1/watch, read as a stream by fetch so
// that it carries the Authorization header, each event with its breaker's
// state, and the RPCs (List, Get, BatchGet, Events, Savings, Force) as
// JSON. docs/operations.md#status-page says
// what it shows; docs/security.md#the-status-page why it works so.
//
// Breaker names, reasons and actors come from workers: they are only ever
// set as text (textContent), never parsed as markup.
'use strict';

(() => {
  const RPC = '/breakerd.v1.BreakerService/';
  // A deny_until_ms of the largest int64: until an operator acts.
  const FOREVER = '9223372036854775807';
  // How far back the recent transitions and suspects reach on connecting.
  const LOOK_BACK_MS = 60 * 60 * 1000;
  const MAX_TRANSITIONS = 100;
  const MAX_TIMELINE = 200;

  const $ = (id) => document.getElementById(id);

  let token = '';
  let session = null; // the AbortController of the signed-in session
  let heardFleet = false; // a snapshot arrived: the tables say what the fleet is, not what was never heard
  let skewMs = 0; // the Redis clock less this browser's, from as_of_ms
  const breakers = new Map(); // name -> BreakerState, every one not closed
  const generations = new Map(); // name -> the newest generation applied
  const entered = new Map(); // name -> the newest event {to, at_ms, actor}
  const suspects = new Map(); // breaker -> BreakerState naming a suspect worker
  const suspectSince = new Map(); // breaker -> at_ms of its suspect event
  let transitions = []; // Events, newest first
  let savings = null; // the last SavingsResponse
  let savingsTimer = 0;
  let timelineName = '';
  let timeline = []; // the selected breaker's Events, oldest first
  let snapshot = []; // the states of the snapshot parts read so far

  // APIError is an answer of the API that is not a success: its HTTP
  // status and the error body's code and message.
  class APIError extends Error {
    constructor(status, code, message) {
      super(code + ': ' + message);
      this.status = status;
      this.code = code;
    }
  }

  function headers(extra) {
    const h = Object.assign({}, extra);
    if (token !== '') h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function failure(res) {
    const text = await res.text();
    try {
      const b = JSON.parse(text);
      return new APIError(res.status, b.code || String(res.status), b.message || text);
    } catch (e) {
      return new APIError(res.status, String(res.status), text.slice(0, 200));
    }
  }

  // call sends one RPC and returns its answer's JSON.
  async function call(method, body, signal) {
    const res = await fetch(RPC + method, {
      method: 'POST', body: JSON.stringify(body), signal, cache: 'no-store', credentials: 'omit',
      headers: headers({ 'Content-Type': 'application/json' }),
    });
    if (!res.ok) throw await failure(res);
    return res.json();
  }

  // ---- the event stream ----

  // parseEvent reads one Server-Sent Events block: its type and data.
  function parseEvent(block) {
    let type = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let v = i < 0 ? '' : line.slice(i + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') type = v;
      else if (field === 'data') data.push(v);
    }
    return { type, data: data.join('\n') };
  }

  // watch reads GET /v1/watch until it ends, handing each event on.
  async function watch(signal) {
    const res = await fetch('/v1/watch', {
      signal, cache: 'no-store', credentials: 'omit', headers: headers({ Accept: 'text/event-stream' }),
    });
    if (!res.ok) throw await failure(res);
    snapshot = [];
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value.replace(/\r/g, '');
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        const ev = parseEvent(buf.slice(0, i));
        buf = buf.slice(i + 2);
        if (ev.type !== 'message' || ev.data !== '') await onEvent(ev, signal);
      }
    }
  }

  async function onEvent(ev, signal) {
    if (ev.type === 'snapshot') {
      // The snapshot comes in parts: the view is replaced once the last
      // (more false) has come.
      const part = JSON.parse(ev.data);
      snapshot.push(...(part.states || []));
      if (part.more) return;
      heardFleet = true;
      breakers.clear();
      generations.clear();
      for (const s of snapshot) apply(s);
      snapshot = [];
      loadSavings();
      try {
        await seed(signal);
        setStatus('live', 'live');
      } catch (e) {
        if (signal.aborted) throw e;
        // A read refused (the token's read cap, say) leaves the live part
        // working.
        setStatus('live', 'live (without the last hour: ' + e.message + ')');
      }
    } else if (ev.type === 'event') {
      const e = JSON.parse(ev.data);
      heard(e);
      if (e.state) {
        // The breaker's state just after the event: no read of its own.
        apply(e.state);
        suspect(e.state);
      } else {
        // The daemon could not read it in time: ask.
        render();
        await refresh(e.breaker, signal);
        if (e.kind === 'EVENT_KIND_SUSPECT_WORKER') await refreshSuspects([e.breaker], signal);
      }
    } else if (ev.type === 'resync') {
      setStatus('connecting', 'resyncing: ' + JSON.parse(ev.data).reason);
    }
    render();
  }

  // seed reads, after a snapshot, what the stream does not carry: the
  // forced-closed breakers (they deny nothing), the last hour's events,
  // and the suspects those name.
  async function seed(signal) {
    const fc = await call('List', { states: ['STATE_FORCED_CLOSED'] }, signal);
    for (const s of fc.states || []) apply(s);
    const evs = await call('Events', { since_ms: LOOK_BACK_MS, limit: MAX_TRANSITIONS }, signal);
    transitions = [];
    const named = new Set();
    for (const e of evs.events || []) {
      heard(e);
      if (e.kind === 'EVENT_KIND_SUSPECT_WORKER') named.add(e.breaker);
    }
    await refreshSuspects([...named], signal);
  }

  // SAVINGS_EVERY is how often the savings are read again while signed
  // in: they change with every refused call, which is no event.
  const SAVINGS_EVERY = 30 * 1000;

  // loadSavings reads what the breakers saved over the chosen window.
  async function loadSavings() {
    clearTimeout(savingsTimer);
    const signal = session && session.signal;
    if (!signal) return;
    try {
      savings = await call('Savings', { window_ms: $('savings-window').value }, signal);
      $('savings-total').textContent = '';
    } catch (e) {
      if (signal.aborted) return;
      savings = null;
      $('savings-total').textContent = e.message;
    }
    savingsTimer = setTimeout(loadSavings, SAVINGS_EVERY);
    render();
  }

  // heard records an event: a recent transition, when its breaker
  // entered its state, a line of the open timeline.
  function heard(e) {
    transitions.unshift(e);
    transitions.sort((a, b) => Number(b.at_ms) - Number(a.at_ms));
    transitions.length = Math.min(transitions.length, MAX_TRANSITIONS);
    const prev = entered.get(e.breaker);
    if (!prev || Number(e.at_ms) >= Number(prev.at_ms)) entered.set(e.breaker, e);
    if (e.kind === 'EVENT_KIND_SUSPECT_WORKER') suspectSince.set(e.breaker, Number(e.at_ms));
    if (e.breaker === timelineName && !timeline.some((x) => x.id === e.id)) {
      timeline.push(e);
      timeline = timeline.slice(-MAX_TIMELINE);
    }
  }

  // apply takes a breaker's state, unless a newer one was applied.
  function apply(s) {
    const gen = Number(s.generation || 0);
    if ((generations.get(s.breaker) ?? -1) > gen) return;
    generations.set(s.breaker, gen);
    if (Number(s.as_of_ms) > 0) skewMs = Number(s.as_of_ms) - Date.now();
    const closed = (s.state === 'STATE_CLOSED' || s.state === 'STATE_UNSPECIFIED') && !(Number(s.deny_until_ms) > 0);
    if (closed) breakers.delete(s.breaker);
    else breakers.set(s.breaker, s);
  }

  async function refresh(name, signal) {
    const r = await call('Get', { breaker: name }, signal);
    apply(r.state);
  }

  async function refreshSuspects(names, signal) {
    if (names.length === 0) return;
    const r = await call('BatchGet', { breakers: names }, signal);
    for (const s of r.states || []) suspect(s);
  }

  // suspect lists a breaker's suspect worker, or drops it when it has none.
  function suspect(s) {
    if (s.suspect_worker) suspects.set(s.breaker, s);
    else suspects.delete(s.breaker);
  }

  // run keeps the session's stream open, reconnecting with a growing
  // pause (a fresh snapshot each time), until sign-out or a refused token.
  // auto: the page connected by itself, with no token; a daemon that
  // wants one refuses it, and the page waits for one to be typed.
  async function run(signal, auto) {
    let pause = 1000;
    while (!signal.aborted) {
      setStatus('connecting', 'connecting');
      try {
        await watch(signal);
        pause = 1000;
        setStatus('connecting', 'the stream ended; reconnecting');
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof APIError && (e.status === 401 || e.status === 403)) {
          if (auto) {
            session = null;
            setStatus('signed-out', 'this daemon wants a token: enter one and Connect');
            return;
          }
          setStatus('error', e.message);
          return;
        }
        setStatus('error', 'disconnected (' + e.message + '); reconnecting');
      }
      await new Promise((done) => {
        const t = setTimeout(done, pause);
        signal.addEventListener('abort', () => { clearTimeout(t); done(); }, { once: true });
      });
      pause = Math.min(pause * 2, 30000);
    }
  }

  // ---- rendering: text only ----

  function setStatus(state, text) {
    const s = $('status');
    s.dataset.state = state;
    s.textContent = text;
  }

  const now = () => Date.now() + skewMs;

  function when(ms) {
    ms = Number(ms);
    if (!(ms > 0)) return '';
    const d = Math.round((ms - now()) / 1000);
    const a = Math.abs(d);
    const span = a < 60 ? a + 's' : a < 3600 ? Math.round(a / 60) + 'm' : a < 86400 ? Math.round(a / 3600) + 'h' : Math.round(a / 86400) + 'd';
    const iso = new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
    if (d === 0) return iso + ' (now)';
    return iso + (d > 0 ? ' (in ' + span + ')' : ' (' + span + ' ago)');
  }

  const words = (v, prefix) => String(v || '').replace(prefix, '').toLowerCase().replace(/_/g, ' ');
  const stateWords = (v) => words(v, 'STATE_');
  const kindWords = (v) => words(v, 'EVENT_KIND_');

  function cell(text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function nameCell(name) {
    const td = document.createElement('td');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'name';
    b.dataset.breaker = name;
    b.textContent = name;
    td.append(b);
    return td;
  }

  function fill(table, rows, empty) {
    const body = $(table).tBodies[0];
    if (rows.length > 0) {
      body.replaceChildren(...rows);
      return;
    }
    const tr = document.createElement('tr');
    const td = cell(empty, 'empty');
    td.colSpan = $(table).tHead.rows[0].cells.length;
    tr.append(td);
    body.replaceChildren(tr);
  }

  // since is when a breaker entered its state: the circuit's opening for
  // an open or half-open one, else its newest event moving it there.
  function since(s) {
    if ((s.state === 'STATE_OPEN' || s.state === 'STATE_HALF_OPEN') && Number(s.opened_at_ms) > 0) return s.opened_at_ms;
    const e = entered.get(s.breaker);
    return e && e.to === s.state ? e.at_ms : 0;
  }

  function until(s) {
    if (String(s.deny_until_ms) === FOREVER) return 'until an operator acts';
    if (Number(s.deny_until_ms) > 0) return when(s.deny_until_ms);
    if (Number(s.forced_until_ms) > 0) return when(s.forced_until_ms);
    if (s.state === 'STATE_FORCED_CLOSED') return 'until auto';
    if (s.state === 'STATE_OPEN') return 'probe due';
    return '';
  }

  function who(s) {
    if (s.forced_by) return s.forced_by;
    const e = entered.get(s.breaker);
    return e && e.to === s.state ? e.actor || '' : '';
  }

  function breakerRow(s) {
    const tr = document.createElement('tr');
    tr.dataset.breaker = s.breaker;
    tr.dataset.state = s.state;
    const shown = s.probe_in_flight ? stateWords(s.state) + ', probing' : stateWords(s.state);
    tr.append(nameCell(s.breaker), cell(shown), cell(s.reason || ''), cell(when(since(s))), cell(until(s)), cell(who(s)),
      cell(Number(s.failures || 0) + ' from ' + Number(s.distinct_workers || 0) + ' workers'));
    return tr;
  }

  const count = (v) => Number(v || 0).toLocaleString('en');

  function spend(amount, currency) {
    if (!currency) return '';
    return '≈ ' + Number(amount || 0).toLocaleString('en', { maximumFractionDigits: 2 }) + ' ' + currency;
  }

  function renderSavings() {
    const rows = savings ? savings.breakers || [] : [];
    if (savings) {
      const spent = (savings.spend || []).map((x) => spend(x.spend_avoided_estimate, x.currency)).join(', ');
      $('savings-total').textContent = count(savings.calls_avoided) + ' calls avoided' + (spent ? ', ' + spent + ' (estimate)' : '');
    }
    fill('savings', rows.map((b) => {
      const tr = document.createElement('tr');
      tr.dataset.breaker = b.breaker;
      tr.append(nameCell(b.breaker), cell(count(b.calls_avoided), 'num'), cell(count(b.daemon_denials), 'num'),
        cell(count(b.client_denials), 'num'), cell(count(b.tools_removed), 'num'), cell(spend(b.spend_avoided_estimate, b.currency), 'num'));
      return tr;
    }), savings ? 'nothing saved in this window' : '');
  }

  function eventCells(e) {
    return [cell(kindWords(e.kind) + (e.shadow ? ' (shadow)' : '')), cell(stateWords(e.from) + ' → ' + stateWords(e.to)),
      cell(e.reason || ''), cell(e.actor || '')];
  }

  // unheard is what a table says before the page heard the fleet: never
  // "none", which would claim every breaker is closed.
  function unheard() {
    return session ? 'nothing heard yet: connecting' : 'nothing heard yet: not connected';
  }

  function render() {
    const list = [...breakers.values()].sort((a, b) => a.breaker.localeCompare(b.breaker));
    $('breakers-count').textContent = heardFleet ? '(' + list.length + ')' : '';
    fill('breakers', list.map(breakerRow), heardFleet ? 'none: every breaker is closed' : unheard());
    const live = [...suspects.values()].filter((s) => Number(s.suspect_until_ms) > now());
    fill('suspects', live.map((s) => {
      const tr = document.createElement('tr');
      tr.append(cell(s.suspect_worker), nameCell(s.breaker), cell(when(suspectSince.get(s.breaker))), cell(when(s.suspect_until_ms)));
      return tr;
    }), heardFleet ? 'none' : unheard());
    fill('transitions', transitions.map((e) => {
      const tr = document.createElement('tr');
      tr.append(cell(when(e.at_ms)), nameCell(e.breaker), ...eventCells(e));
      return tr;
    }), heardFleet ? 'none in the last hour' : unheard());
    renderSavings();
    $('timeline-name').textContent = timelineName;
    fill('timeline', timeline.slice().reverse().map((e) => {
      const tr = document.createElement('tr');
      tr.append(cell(when(e.at_ms)), ...eventCells(e));
      return tr;
    }), timelineName === '' ? 'select a breaker' : 'no events in its log');
  }

  async function showTimeline(name) {
    timelineName = name;
    timeline = [];
    $('force-breaker').value = name;
    render();
    try {
      const r = await call('Events', { breaker: name, limit: MAX_TIMELINE }, session && session.signal);
      if (timelineName === name) timeline = r.events || [];
    } catch (e) {
      $('timeline-name').textContent = name + ': ' + e.message;
      return;
    }
    render();
  }

  async function force(ev) {
    ev.preventDefault();
    const out = $('force-result');
    const req = { breaker: $('force-breaker').value.trim(), mode: $('force-mode').value };
    const reason = $('force-reason').value.trim();
    if (reason !== '') req.reason = reason;
    const ttl = Number($('force-ttl').value);
    if (ttl > 0) req.ttl_ms = String(Math.round(ttl * 60000));
    try {
      const r = await call('Force', req);
      apply(r.state);
      out.dataset.ok = 'true';
      out.textContent = 'forced: ' + r.state.breaker + ' is ' + stateWords(r.state.state);
    } catch (e) {
      out.dataset.ok = 'false';
      out.textContent = 'refused: ' + e.message;
    }
    render();
  }

  function signIn(ev) {
    ev.preventDefault();
    signOut();
    token = $('token').value;
    $('token').value = '';
    $('signin').hidden = true;
    $('signout').hidden = false;
    session = new AbortController();
    run(session.signal);
  }

  function signOut() {
    if (session) session.abort();
    session = null;
    token = '';
    heardFleet = false;
    for (const m of [breakers, generations, entered, suspects, suspectSince]) m.clear();
    transitions = [];
    timelineName = '';
    timeline = [];
    savings = null;
    clearTimeout(savingsTimer);
    $('savings-total').textContent = '';
    $('signin').hidden = false;
    $('signout').hidden = true;
    $('force-result').textContent = '';
    setStatus('signed-out', 'signed out');
    render();
  }

  function select(ev) {
    const b = ev.target.closest('button.name');
    if (b) showTimeline(b.dataset.breaker);
  }

  $('signin').addEventListener('submit', signIn);
  $('signout').addEventListener('click', signOut);
  $('force').addEventListener('submit', force);
  $('savings-form').addEventListener('submit', (ev) => { ev.preventDefault(); loadSavings(); });
  $('savings-window').addEventListener('change', loadSavings);
  for (const t of ['breakers', 'suspects', 'transitions', 'savings']) $(t).addEventListener('click', select);
  setInterval(render, 5000);
  // Connect at once with no token: a daemon without --tokens needs none
  // (one with tokens refuses it, and the page asks for one).
  session = new AbortController();
  run(session.signal, true);
  render();
})();
