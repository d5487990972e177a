// windowed: business hours in a time zone, a cap on spending over the last
// 24 hours, and a halt after failures in a row (automaton:gate@0.3.0).
// The same policy as ../rust/src/lib.rs, with the same cases.json:
//
// - After `max_failures` failed runs in a row (3): halt.
// - Before the step, outside Monday to Friday start_hour-end_hour (09-17)
//   in `timezone`: skip. The local time comes from the host (inZone):
//   componentize-js has no Intl, and the gate carries no zone data.
// - When `metric` (cost_usd) summed over the last 24 hours, as the host
//   computed it from the loop's history, exceeds `cap`: await approval.
// - Otherwise: proceed.
//
// Params: {"timezone": "Europe/Paris", "cap": 5}; optional "metric",
// "start_hour", "end_hour", "max_failures".
//
// u64 and s64 are BigInts; a variant is {tag, val}; a result's error is a
// thrown string (an import's error arrives as a thrown error whose payload
// is the string).
import { inZone, log } from 'automaton:gate/host@0.3.0';

const DAY_MS = 86_400_000n;

const SCHEMA = JSON.stringify({
  type: 'object',
  additionalProperties: false,
  required: ['timezone', 'cap'],
  properties: {
    timezone: { type: 'string', minLength: 1 },
    cap: { type: 'number', minimum: 0 },
    metric: { type: 'string', minLength: 1 },
    start_hour: { type: 'integer', minimum: 0, maximum: 23 },
    end_hour: { type: 'integer', minimum: 1, maximum: 24 },
    max_failures: { type: 'integer', minimum: 1 },
  },
});

const DEFAULTS = { metric: 'cost_usd', start_hour: 9, end_hour: 17, max_failures: 3 };
const TYPES = {
  timezone: 'string',
  cap: 'number',
  metric: 'string',
  start_hour: 'integer',
  end_hour: 'integer',
  max_failures: 'integer',
};
const WEEKDAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'];

// The params, or a thrown message naming the param.
function params(text) {
  let p;
  try {
    p = JSON.parse(text);
  } catch (e) {
    throw `invalid params: ${e.message}`;
  }
  if (p === null || typeof p !== 'object' || Array.isArray(p)) {
    throw 'invalid params: expected an object';
  }
  for (const name of Object.keys(p)) {
    if (!(name in TYPES)) throw `invalid params: unknown field \`${name}\``;
  }
  for (const name of ['timezone', 'cap']) {
    if (!(name in p)) throw `invalid params: missing field \`${name}\``;
  }
  p = { ...DEFAULTS, ...p };
  for (const [name, type] of Object.entries(TYPES)) {
    const ok = type === 'integer' ? Number.isInteger(p[name]) : typeof p[name] === type;
    if (!ok) throw `invalid params: ${name}: not a value of its type`;
  }
  if (p.start_hour < 0 || p.start_hour >= p.end_hour || p.end_hour > 24) {
    throw `start_hour: must be before end_hour, both from 0 to 24 (${p.start_hour} to ${p.end_hour})`;
  }
  if (!(p.cap >= 0)) throw `cap: must be a number of at least 0, got ${p.cap}`;
  if (p.max_failures < 1) throw 'max_failures: must be at least 1';
  return p;
}

const pad = (n) => String(n).padStart(2, '0');

export function describe() {
  return {
    name: 'windowed',
    version: '1.0.0',
    description:
      "Runs Mon-Fri 09-17 in a time zone, awaits approval when a metric's sum over the last 24 h exceeds a cap, halts after 3 failures in a row.",
    paramsSchema: SCHEMA,
    // The sums over the last 24 hours, in every context.
    history: { runs: 0, windowsMs: [DAY_MS] },
  };
}

// A thrown string is the gate's refusal. Anything else thrown (a bug) traps,
// and componentize-js says only its type: this prints it first.
function reportingThrows(f) {
  return (...args) => {
    try {
      return f(...args);
    } catch (e) {
      if (typeof e !== 'string') console.error(`Uncaught ${e instanceof Error ? e.stack : e}`);
      throw e;
    }
  };
}

export const checkParams = reportingThrows((text) => {
  params(text);
});

export const evaluate = reportingThrows((ctx) => {
  const p = params(ctx.params);
  if (ctx.consecutiveFailures >= p.max_failures) {
    return {
      tag: 'halt',
      val: `${ctx.consecutiveFailures} failed runs in a row (at most ${p.max_failures})`,
    };
  }
  if (ctx.phase === 'after-step') return { tag: 'proceed' };
  let local;
  try {
    local = inZone(ctx.nowMs, p.timezone);
  } catch (e) {
    throw `timezone: ${e.payload ?? e}`;
  }
  if (local.weekday > 5 || local.hour < p.start_hour || local.hour >= p.end_hour) {
    return {
      tag: 'skip',
      val:
        `outside Mon-Fri ${pad(p.start_hour)}:00-${pad(p.end_hour)}:00 ${p.timezone}: ` +
        `it is ${WEEKDAYS[local.weekday - 1]} ${pad(local.hour)}:${pad(local.minute)}`,
    };
  }
  let spent = 0;
  for (const w of ctx.history.windows) {
    if (w.windowMs === DAY_MS) spent = JSON.parse(w.sums)[p.metric] ?? 0;
  }
  const over = `${p.metric} over the last 24 h`;
  log('info', `${over}: ${spent} of ${p.cap}`);
  if (spent > p.cap) {
    return { tag: 'await-approval', val: `${over} is ${spent}, over the cap of ${p.cap}` };
  }
  return { tag: 'proceed' };
});
