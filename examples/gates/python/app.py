"""office-hours: runs a loop only during office hours, and asks an operator
before running again after a failed run.

- Outside 09:00-17:00 UTC, or on a Saturday or Sunday: skip.
- When the last run failed (non-zero exit, killed, or the verifier said no):
  await approval. `automaton approve LOOP` lets the next tick run.
- Otherwise: proceed.

Params (all optional): {"start_hour": 9, "end_hour": 17}.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "start_hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "end_hour": {"type": "integer", "minimum": 1, "maximum": 24},
        },
        "additionalProperties": False,
    }
)

MS_PER_HOUR = 3_600_000
MS_PER_DAY = 24 * MS_PER_HOUR


def hours(params: str) -> tuple[int, int]:
    """The office hours from the params, or an error message."""
    try:
        p = json.loads(params) if params else {}
    except ValueError as e:
        raise Err(f"params are not JSON: {e}")
    if not isinstance(p, dict):
        raise Err("params must be an object")
    unknown = sorted(set(p) - {"start_hour", "end_hour"})
    if unknown:
        raise Err(f"unknown params: {', '.join(unknown)}")
    start, end = p.get("start_hour", 9), p.get("end_hour", 17)
    for name, v in (("start_hour", start), ("end_hour", end)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 24:
            raise Err(f"{name} must be a whole hour from 0 to 24, not {v!r}")
    if start >= end:
        raise Err(f"start_hour ({start}) must be before end_hour ({end})")
    return start, end


def failed(run: types.RunResult) -> bool:
    return run.exit_code != 0 or run.verifier_passed is False


class WitWorld(wit_world.WitWorld):
    def describe(self) -> types.GateInfo:
        return types.GateInfo(
            name="office-hours",
            version="1.0.0",
            description="Runs only 09:00-17:00 UTC on weekdays, and awaits approval after a failed run.",
            params_schema=SCHEMA,
            # No past runs or windows of history in the context: the last
            # run (ctx.last_run) is all this gate reads.
            history=types.HistoryRequest(runs=0, windows_ms=[]),
        )

    def check_params(self, params: str) -> None:
        hours(params)

    def evaluate(self, ctx: types.Context) -> types.Decision:
        return checked(decide(ctx))


DECISION = (
    "a decision: types.Decision_Proceed() | types.Decision_Skip(reason) | "
    "types.Decision_AwaitApproval(reason) | types.Decision_Halt(reason) | "
    "types.Decision_Complete(reason)"
)


def checked(d: types.Decision) -> types.Decision:
    """A decision of the wrong type would fail in the bindings with a message
    that names neither this file nor the decision: say both here instead."""
    with_reason = (
        types.Decision_Skip,
        types.Decision_AwaitApproval,
        types.Decision_Halt,
        types.Decision_Complete,
    )
    if isinstance(d, types.Decision_Proceed):
        return d
    if isinstance(d, with_reason) and isinstance(d.value, str):
        return d
    raise TypeError(f"app.py: evaluate returned {d!r}; expected {DECISION}")


def decide(ctx: types.Context) -> types.Decision:
    start, end = hours(ctx.params)
    days = ctx.now_ms // MS_PER_DAY
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday; Monday is 0
    hour = ctx.now_ms % MS_PER_DAY // MS_PER_HOUR
    if weekday >= 5:
        return types.Decision_Skip("weekend")
    if not start <= hour < end:
        return types.Decision_Skip(f"outside office hours ({start:02}:00-{end:02}:00 UTC)")
    run = ctx.last_run
    if run is not None and failed(run):
        how = "was killed" if run.exit_code is None else f"exited {run.exit_code}"
        if run.exit_code == 0:
            how = "failed its verifier"
        host.log(types.Level.INFO, f"tick {run.tick} {how}")
        return types.Decision_AwaitApproval(f"the last run (tick {run.tick}) {how}")
    return types.Decision_Proceed()
