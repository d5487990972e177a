// office-hours: runs a loop only during office hours, and asks an operator
// before running again after a failed run.
//
// - Outside 09:00-17:00 UTC, or on a Saturday or Sunday: skip.
// - When the last run failed (non-zero exit, killed, or the verifier said
//   no): await approval. `automaton approve LOOP` lets the next tick run.
// - Otherwise: proceed.
//
// Params (all optional): {"start_hour": 9, "end_hour": 17}.
//
// The shapes componentize-js gives WIT types: records are objects with
// camelCase fields, u64 is a BigInt, option<T> is T or undefined, a variant
// is {tag, val}, and a result's error is a thrown string.
import { log } from 'automaton:gate/host@0.3.0';

const SCHEMA = JSON.stringify({
  type: 'object',
  properties: {
    start_hour: { type: 'integer', minimum: 0, maximum: 23 },
    end_hour: { type: 'integer', minimum: 1, maximum: 24 },
  },
  additionalProperties: false,
});

const MS_PER_HOUR = 3_600_000n;
const MS_PER_DAY = 24n * MS_PER_HOUR;

function hours(params) {
  let p;
  try {
    p = params ? JSON.parse(params) : {};
  } catch (e) {
    throw `params are not JSON: ${e.message}`;
  }
  if (p === null || typeof p !== 'object' || Array.isArray(p)) throw 'params must be an object';
  const unknown = Object.keys(p).filter((k) => k !== 'start_hour' && k !== 'end_hour').sort();
  if (unknown.length) throw `unknown params: ${unknown.join(', ')}`;
  const start = p.start_hour ?? 9;
  const end = p.end_hour ?? 17;
  for (const [name, v] of [['start_hour', start], ['end_hour', end]]) {
    if (!Number.isInteger(v) || v < 0 || v > 24) {
      throw `${name} must be a whole hour from 0 to 24, not ${JSON.stringify(v)}`;
    }
  }
  if (start >= end) throw `start_hour (${start}) must be before end_hour (${end})`;
  return [start, end];
}

const pad = (h) => String(h).padStart(2, '0');

export function describe() {
  return {
    name: 'office-hours',
    version: '1.0.0',
    description: 'Runs only 09:00-17:00 UTC on weekdays, and awaits approval after a failed run.',
    paramsSchema: SCHEMA,
    // No past runs or windows of history in the context: the last run
    // (ctx.lastRun) is all this gate reads.
    history: { runs: 0, windowsMs: [] },
  };
}

// A thrown string is the gate's refusal. Anything else thrown (a bug, or
// `throw 42`) traps, and componentize-js says only its type: this prints
// the value first, so the host's error reads `threw TypeError: ...
// (at gate.js:12:5, in evaluate)`.
function reportingThrows(f) {
  return (...args) => {
    try {
      return f(...args);
    } catch (e) {
      if (typeof e !== 'string') console.error(`Uncaught ${shown(e)}`);
      throw e;
    }
  };
}

function shown(e) {
  if (e instanceof Error) return `${e.name}: ${e.message}\nStack:\n${e.stack}`;
  if (typeof e === 'bigint') return `${e}n`;
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return String(e);
  }
}

export const checkParams = reportingThrows((params) => {
  hours(params);
});

export const evaluate = reportingThrows((ctx) => checked(decide(ctx)));

const DECISION =
  "a decision: {tag: 'proceed'} | {tag: 'skip' | 'await-approval' | 'halt' | 'complete', val: reason}";

// A decision of the wrong shape would fail in the bindings with a message
// that names neither this file nor the decision: say both here instead.
function checked(d) {
  const tags = ['proceed', 'skip', 'await-approval', 'halt', 'complete'];
  const ok =
    d !== null &&
    typeof d === 'object' &&
    tags.includes(d.tag) &&
    (d.tag === 'proceed' || typeof d.val === 'string');
  if (!ok) throw new TypeError(`gate.js: evaluate returned ${shown(d)}; expected ${DECISION}`);
  return d;
}

function decide(ctx) {
  const [start, end] = hours(ctx.params);
  const days = ctx.nowMs / MS_PER_DAY;
  const weekday = Number((days + 3n) % 7n); // 1970-01-01 was a Thursday; Monday is 0
  const hour = Number((ctx.nowMs % MS_PER_DAY) / MS_PER_HOUR);
  if (weekday >= 5) return { tag: 'skip', val: 'weekend' };
  if (hour < start || hour >= end) {
    return { tag: 'skip', val: `outside office hours (${pad(start)}:00-${pad(end)}:00 UTC)` };
  }
  const run = ctx.lastRun;
  if (run !== undefined && (run.exitCode !== 0 || run.verifierPassed === false)) {
    let how = run.exitCode === undefined ? 'was killed' : `exited ${run.exitCode}`;
    if (run.exitCode === 0) how = 'failed its verifier';
    log('info', `tick ${run.tick} ${how}`);
    return { tag: 'await-approval', val: `the last run (tick ${run.tick}) ${how}` };
  }
  return { tag: 'proceed' };
}
