// windowed: business hours in a time zone, a cap on spending over the last
// 24 hours, and a halt after failures in a row (automaton:gate@0.3.0).
// The same policy as ../rust/src/lib.rs, with the same cases.json:
//
// - After `max_failures` failed runs in a row (3): halt.
// - Before the step, outside Monday to Friday start_hour-end_hour (09-17)
//   in `timezone`: skip. The local time comes from the host (in-zone).
// - When `metric` (cost_usd) summed over the last 24 hours, as the host
//   computed it from the loop's history, exceeds `cap`: await approval.
// - Otherwise: proceed.
//
// Params: {"timezone": "Europe/Paris", "cap": 5}; optional "metric",
// "start_hour", "end_hour", "max_failures".

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"

#define DAY_MS 86400000ull

static const char SCHEMA[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"timezone\", \"cap\"], "
    "\"properties\": {\"timezone\": {\"type\": \"string\", \"minLength\": 1}, "
    "\"cap\": {\"type\": \"number\", \"minimum\": 0}, \"metric\": {\"type\": \"string\", \"minLength\": 1}, "
    "\"start_hour\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 23}, "
    "\"end_hour\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 24}, "
    "\"max_failures\": {\"type\": \"integer\", \"minimum\": 1}}}";

typedef struct {
  char timezone[64];
  bool has_cap;
  double cap;
  char metric[64];
  long start_hour, end_hour, max_failures;
} params_t;

typedef struct {
  const uint8_t *p, *end;
} reader_t;

static void skip_space(reader_t *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

static bool eat(reader_t *r, char c) {
  skip_space(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return true;
  }
  return false;
}

// A string without escapes into `out`; false when it is not one.
static bool read_string(reader_t *r, char *out, size_t size) {
  if (!eat(r, '"'))
    return false;
  size_t n = 0;
  while (r->p < r->end && *r->p != '"') {
    if (*r->p == '\\' || n + 1 >= size)
      return false;
    out[n++] = (char)*r->p++;
  }
  out[n] = 0;
  return eat(r, '"');
}

// A JSON number; false when it is not one.
static bool read_number(reader_t *r, double *out) {
  skip_space(r);
  char buf[40];
  size_t n = 0;
  while (r->p < r->end && n + 1 < sizeof buf && strchr("+-0123456789.eE", *r->p) != NULL)
    buf[n++] = (char)*r->p++;
  buf[n] = 0;
  char *end;
  *out = strtod(buf, &end);
  return n > 0 && *end == 0;
}

static bool read_whole(reader_t *r, long *out) {
  double v;
  if (!read_number(r, &v) || v != (double)(long)v)
    return false;
  *out = (long)v;
  return true;
}

// The params; on an error, false and a message naming the param.
static bool params(const gate_string_t *text, params_t *p, char *err, size_t size) {
  reader_t r = {text->ptr, text->ptr + text->len};
  memset(p, 0, sizeof *p);
  strcpy(p->metric, "cost_usd");
  p->start_hour = 9;
  p->end_hour = 17;
  p->max_failures = 3;
  if (!eat(&r, '{')) {
    snprintf(err, size, "invalid params: expected an object");
    return false;
  }
  if (!eat(&r, '}')) {
    do {
      char key[32];
      if (!read_string(&r, key, sizeof key) || !eat(&r, ':')) {
        snprintf(err, size, "invalid params: expected a key");
        return false;
      }
      bool ok;
      if (strcmp(key, "timezone") == 0)
        ok = read_string(&r, p->timezone, sizeof p->timezone);
      else if (strcmp(key, "metric") == 0)
        ok = read_string(&r, p->metric, sizeof p->metric);
      else if (strcmp(key, "cap") == 0)
        ok = p->has_cap = read_number(&r, &p->cap);
      else if (strcmp(key, "start_hour") == 0)
        ok = read_whole(&r, &p->start_hour);
      else if (strcmp(key, "end_hour") == 0)
        ok = read_whole(&r, &p->end_hour);
      else if (strcmp(key, "max_failures") == 0)
        ok = read_whole(&r, &p->max_failures);
      else {
        snprintf(err, size, "invalid params: unknown field `%s`", key);
        return false;
      }
      if (!ok) {
        snprintf(err, size, "invalid params: %s: not a value of its type", key);
        return false;
      }
    } while (eat(&r, ','));
    if (!eat(&r, '}')) {
      snprintf(err, size, "invalid params: expected `,` or `}`");
      return false;
    }
  }
  if (p->timezone[0] == 0) {
    snprintf(err, size, "invalid params: missing field `timezone`");
    return false;
  }
  if (!p->has_cap) {
    snprintf(err, size, "invalid params: missing field `cap`");
    return false;
  }
  if (p->start_hour < 0 || p->start_hour >= p->end_hour || p->end_hour > 24) {
    snprintf(err, size, "start_hour: must be before end_hour, both from 0 to 24 (%ld to %ld)",
             p->start_hour, p->end_hour);
    return false;
  }
  if (!(p->cap >= 0)) {
    snprintf(err, size, "cap: must be a number of at least 0");
    return false;
  }
  if (p->max_failures < 1) {
    snprintf(err, size, "max_failures: must be at least 1");
    return false;
  }
  return true;
}

// `metric` in a JSON object of numbers the host wrote (`{"cost_usd":6.0}`).
static double sum_of(const gate_string_t *sums, const char *metric) {
  char key[80];
  snprintf(key, sizeof key, "\"%s\":", metric);
  size_t k = strlen(key);
  for (size_t i = 0; i + k <= sums->len; i++) {
    if (memcmp(sums->ptr + i, key, k) == 0) {
      reader_t r = {sums->ptr + i + k, sums->ptr + sums->len};
      double v;
      return read_number(&r, &v) ? v : 0;
    }
  }
  return 0;
}

// A number as serde_json and Rust print it: 6, 5.01, 1200.
static void show(char *buf, size_t size, double v) {
  if (v == (double)(long long)v)
    snprintf(buf, size, "%lld", (long long)v);
  else
    snprintf(buf, size, "%.15g", v);
}

static void decide(gate_decision_t *ret, uint8_t tag, const char *reason) {
  ret->tag = tag;
  gate_string_dup(&ret->val.skip, reason);
}

void exports_gate_describe(gate_gate_info_t *ret) {
  gate_string_dup(&ret->name, "windowed");
  gate_string_dup(&ret->version, "1.0.0");
  gate_string_dup(&ret->description,
                  "Runs Mon-Fri 09-17 in a time zone, awaits approval when a metric's sum over the "
                  "last 24 h exceeds a cap, halts after 3 failures in a row.");
  gate_string_dup(&ret->params_schema, SCHEMA);
  // The sums over the last 24 hours, in every context.
  ret->history.runs = 0;
  ret->history.windows_ms.len = 1;
  ret->history.windows_ms.ptr = malloc(sizeof(uint64_t));
  ret->history.windows_ms.ptr[0] = DAY_MS;
}

bool exports_gate_check_params(gate_string_t *text, gate_string_t *err) {
  params_t p;
  char msg[160];
  bool ok = params(text, &p, msg, sizeof msg);
  gate_string_free(text);
  if (!ok)
    gate_string_dup(err, msg);
  return ok;
}

static const char *const WEEKDAYS[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};

static bool evaluate(gate_context_t *ctx, gate_decision_t *ret, gate_string_t *err) {
  params_t p;
  char msg[200];
  if (!params(&ctx->params, &p, msg, sizeof msg)) {
    gate_string_dup(err, msg);
    return false;
  }
  if (ctx->consecutive_failures >= (uint32_t)p.max_failures) {
    snprintf(msg, sizeof msg, "%u failed runs in a row (at most %ld)",
             (unsigned)ctx->consecutive_failures, p.max_failures);
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_HALT, msg);
    return true;
  }
  if (ctx->phase == AUTOMATON_GATE_TYPES_PHASE_AFTER_STEP) {
    ret->tag = AUTOMATON_GATE_TYPES_DECISION_PROCEED;
    return true;
  }
  gate_string_t zone, zone_err;
  automaton_gate_host_local_time_t local;
  gate_string_set(&zone, p.timezone);
  if (!automaton_gate_host_in_zone((int64_t)ctx->now_ms, &zone, &local, &zone_err)) {
    snprintf(msg, sizeof msg, "timezone: %.*s", (int)zone_err.len, (const char *)zone_err.ptr);
    gate_string_free(&zone_err);
    gate_string_dup(err, msg);
    return false;
  }
  bool open = local.weekday <= 5 && local.hour >= p.start_hour && local.hour < p.end_hour;
  gate_string_free(&local.abbreviation);
  if (!open) {
    int day = local.weekday >= 1 && local.weekday <= 7 ? local.weekday - 1 : 0;
    snprintf(msg, sizeof msg, "outside Mon-Fri %02ld:00-%02ld:00 %s: it is %s %02u:%02u",
             p.start_hour, p.end_hour, p.timezone, WEEKDAYS[day], (unsigned)local.hour,
             (unsigned)local.minute);
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_SKIP, msg);
    return true;
  }
  double spent = 0;
  for (size_t i = 0; i < ctx->history.windows.len; i++)
    if (ctx->history.windows.ptr[i].window_ms == DAY_MS)
      spent = sum_of(&ctx->history.windows.ptr[i].sums, p.metric);
  char spent_s[40], cap_s[40];
  show(spent_s, sizeof spent_s, spent);
  show(cap_s, sizeof cap_s, p.cap);
  gate_string_t line;
  snprintf(msg, sizeof msg, "%s over the last 24 h: %s of %s", p.metric, spent_s, cap_s);
  gate_string_set(&line, msg);
  automaton_gate_host_log(AUTOMATON_GATE_TYPES_LEVEL_INFO, &line);
  if (spent > p.cap) {
    snprintf(msg, sizeof msg, "%s over the last 24 h is %s, over the cap of %s", p.metric, spent_s,
             cap_s);
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_AWAIT_APPROVAL, msg);
    return true;
  }
  ret->tag = AUTOMATON_GATE_TYPES_DECISION_PROCEED;
  return true;
}

// An unknown tag would reach the host as `proceed`: stop here instead.
bool exports_gate_evaluate(gate_context_t *ctx, gate_decision_t *ret, gate_string_t *err) {
  ret->tag = AUTOMATON_GATE_TYPES_DECISION_PROCEED;
  bool ok = evaluate(ctx, ret, err);
  gate_context_free(ctx);
  if (ok && ret->tag > AUTOMATON_GATE_TYPES_DECISION_COMPLETE) {
    fprintf(stderr, "gate.c: evaluate returned decision tag %d\n", (int)ret->tag);
    abort();
  }
  return ok;
}
