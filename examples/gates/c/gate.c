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
// The shapes wit-bindgen's C bindings (bindings/gate.h) give WIT types:
// records are structs with snake_case fields, strings are gate_string_t
// (UTF-8 bytes and a length, not NUL-terminated), option<T> is a struct
// with is_some and val, a variant has a tag and a union, and a function
// that returns result<T, string> returns true for ok and fills `err` for
// an error.
//
// Ownership: the arguments an export receives are the export's to free
// (gate_context_free, gate_string_free); every string it returns must be
// allocated (gate_string_dup), because the bindings free it after the host
// has copied it.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"

#define MS_PER_HOUR 3600000ull
#define MS_PER_DAY (24ull * MS_PER_HOUR)

static const char SCHEMA[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": "
    "{\"start_hour\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 23}, "
    "\"end_hour\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 24}}}";

// A reader of the params object: a flat JSON object whose values are whole
// numbers. Anything else is an error, written into `err`.
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

// Reads a key without escapes into `key`; false when it is not one.
static bool read_key(reader_t *r, char *key, size_t size) {
  if (!eat(r, '"'))
    return false;
  size_t n = 0;
  while (r->p < r->end && *r->p != '"') {
    if (*r->p == '\\' || n + 1 >= size)
      return false;
    key[n++] = (char)*r->p++;
  }
  key[n] = 0;
  return eat(r, '"');
}

// Reads a whole number of at most four digits; false when it is not one.
static bool read_hour(reader_t *r, long *out) {
  skip_space(r);
  long v = 0;
  int digits = 0;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && digits < 4) {
    v = v * 10 + (*r->p++ - '0');
    digits++;
  }
  if (digits == 0 || (r->p < r->end && ((*r->p >= '0' && *r->p <= '9') || *r->p == '.' ||
                                         *r->p == 'e' || *r->p == 'E')))
    return false;
  *out = v;
  return true;
}

// The office hours from the params; on an error, false and a message.
static bool hours(const gate_string_t *params, long *start, long *end, char *err, size_t size) {
  reader_t r = {params->ptr, params->ptr + params->len};
  *start = 9;
  *end = 17;
  skip_space(&r);
  if (r.p == r.end)
    return true; // no params at all
  if (!eat(&r, '{')) {
    snprintf(err, size, "params must be an object");
    return false;
  }
  if (!eat(&r, '}')) {
    do {
      char key[32];
      if (!read_key(&r, key, sizeof key) || !eat(&r, ':')) {
        snprintf(err, size, "invalid params: expected \"start_hour\" or \"end_hour\"");
        return false;
      }
      long *slot = strcmp(key, "start_hour") == 0 ? start : strcmp(key, "end_hour") == 0 ? end : NULL;
      if (slot == NULL) {
        snprintf(err, size, "invalid params: unknown field `%s`", key);
        return false;
      }
      if (!read_hour(&r, slot) || *slot > 24) {
        snprintf(err, size, "%s must be a whole hour from 0 to 24", key);
        return false;
      }
    } while (eat(&r, ','));
    if (!eat(&r, '}')) {
      snprintf(err, size, "invalid params: expected `,` or `}`");
      return false;
    }
  }
  skip_space(&r);
  if (r.p != r.end) {
    snprintf(err, size, "invalid params: trailing characters");
    return false;
  }
  if (*start >= *end) {
    snprintf(err, size, "start_hour (%ld) must be before end_hour (%ld)", *start, *end);
    return false;
  }
  return true;
}

// How the run failed, or NULL when it did not; `buf` holds an exit code.
static const char *failure(const automaton_gate_types_run_result_t *run, char *buf, size_t size) {
  if (!run->exit_code.is_some)
    return "was killed";
  if (run->exit_code.val != 0) {
    snprintf(buf, size, "exited %d", (int)run->exit_code.val);
    return buf;
  }
  if (run->verifier_passed.is_some && !run->verifier_passed.val)
    return "failed its verifier";
  return NULL;
}

static void decide(gate_decision_t *ret, uint8_t tag, const char *reason) {
  ret->tag = tag;
  gate_string_dup(&ret->val.skip, reason); // every case with a reason holds a string here
}

void exports_gate_describe(gate_gate_info_t *ret) {
  gate_string_dup(&ret->name, "office-hours");
  gate_string_dup(&ret->version, "1.0.0");
  gate_string_dup(&ret->description,
                  "Runs only 09:00-17:00 UTC on weekdays, and awaits approval after a failed run.");
  gate_string_dup(&ret->params_schema, SCHEMA);
  // No past runs or windows of history in the context: the last run
  // (ctx->last_run) is all this gate reads.
  ret->history.runs = 0;
  ret->history.windows_ms.ptr = NULL;
  ret->history.windows_ms.len = 0;
}

bool exports_gate_check_params(gate_string_t *params, gate_string_t *err) {
  long start, end;
  char msg[128];
  bool ok = hours(params, &start, &end, msg, sizeof msg);
  gate_string_free(params);
  if (!ok)
    gate_string_dup(err, msg);
  return ok;
}

// The decision: true with `*ret` set, or false with `*err` set to refuse.
static bool evaluate(gate_context_t *ctx, gate_decision_t *ret, gate_string_t *err) {
  long start, end;
  char msg[128];
  bool ok = hours(&ctx->params, &start, &end, msg, sizeof msg);
  if (!ok) {
    gate_string_dup(err, msg);
    gate_context_free(ctx);
    return false;
  }
  uint64_t weekday = (ctx->now_ms / MS_PER_DAY + 3) % 7; // 1970-01-01 was a Thursday; Monday is 0
  uint64_t hour = ctx->now_ms % MS_PER_DAY / MS_PER_HOUR;
  char code[32];
  const char *how = ctx->last_run.is_some ? failure(&ctx->last_run.val, code, sizeof code) : NULL;
  if (weekday >= 5) {
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_SKIP, "weekend");
  } else if ((long)hour < start || (long)hour >= end) {
    snprintf(msg, sizeof msg, "outside office hours (%02ld:00-%02ld:00 UTC)", start, end);
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_SKIP, msg);
  } else if (how != NULL) {
    unsigned long long tick = (unsigned long long)ctx->last_run.val.tick;
    gate_string_t line;
    snprintf(msg, sizeof msg, "tick %llu %s", tick, how);
    gate_string_set(&line, msg);
    automaton_gate_host_log(AUTOMATON_GATE_TYPES_LEVEL_INFO, &line);
    snprintf(msg, sizeof msg, "the last run (tick %llu) %s", tick, how);
    decide(ret, AUTOMATON_GATE_TYPES_DECISION_AWAIT_APPROVAL, msg);
  } else {
    ret->tag = AUTOMATON_GATE_TYPES_DECISION_PROCEED;
  }
  gate_context_free(ctx);
  return true;
}

// The bindings copy only the decision tags they know to the host, so an
// unknown tag would reach it as `proceed`: stop here instead (the host
// reports the trap with this line, and the loop's on_error applies).
bool exports_gate_evaluate(gate_context_t *ctx, gate_decision_t *ret, gate_string_t *err) {
  ret->tag = AUTOMATON_GATE_TYPES_DECISION_PROCEED;
  if (!evaluate(ctx, ret, err))
    return false;
  if (ret->tag > AUTOMATON_GATE_TYPES_DECISION_COMPLETE) {
    fprintf(stderr,
            "gate.c: evaluate returned decision tag %d; expected a decision: proceed | "
            "skip(reason) | await-approval(reason) | halt(reason) | complete(reason)\n",
            (int)ret->tag);
    abort();
  }
  return true;
}
