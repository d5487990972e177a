"""windowed: business hours in a time zone, a cap on spending over the last
24 hours, and a halt after failures in a row (automaton:gate@0.3.0).
The same policy as ../rust/src/lib.rs, with the same cases.json:

- After `max_failures` failed runs in a row (3): halt.
- Before the step, outside Monday to Friday start_hour-end_hour (09-17) in
  `timezone`: skip. The local time comes from the host (in-zone).
- When `metric` (cost_usd) summed over the last 24 hours, as the host
  computed it from the loop's history, exceeds `cap`: await approval.
- Otherwise: proceed.

Params: {"timezone": "Europe/Paris", "cap": 5}; optional "metric",
"start_hour", "end_hour", "max_failures".
"""

import json
from dataclasses import dataclass

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

DAY_MS = 86_400_000

SCHEMA = json.dumps(
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["timezone", "cap"],
        "properties": {
            "timezone": {"type": "string", "minLength": 1},
            "cap": {"type": "number", "minimum": 0},
            "metric": {"type": "string", "minLength": 1},
            "start_hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "end_hour": {"type": "integer", "minimum": 1, "maximum": 24},
            "max_failures": {"type": "integer", "minimum": 1},
        },
    }
)

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass
class Params:
    timezone: str
    cap: float
    metric: str = "cost_usd"
    start_hour: int = 9
    end_hour: int = 17
    max_failures: int = 3


def whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def params(text: str) -> Params:
    """The params, or an error naming the param."""
    try:
        p = json.loads(text)
    except ValueError as e:
        raise Err(f"invalid params: {e}")
    if not isinstance(p, dict):
        raise Err("invalid params: expected an object")
    for name in p:
        if name not in Params.__dataclass_fields__:
            raise Err(f"invalid params: unknown field `{name}`")
    for name in ("timezone", "cap"):
        if name not in p:
            raise Err(f"invalid params: missing field `{name}`")
    for name, ok in (
        ("timezone", isinstance(p["timezone"], str)),
        ("metric", isinstance(p.get("metric", ""), str)),
        ("cap", whole(p["cap"]) or isinstance(p["cap"], float)),
        ("start_hour", whole(p.get("start_hour", 0))),
        ("end_hour", whole(p.get("end_hour", 0))),
        ("max_failures", whole(p.get("max_failures", 0))),
    ):
        if not ok:
            raise Err(f"invalid params: {name}: not a value of its type")
    p = Params(**p)
    if not 0 <= p.start_hour < p.end_hour <= 24:
        raise Err(
            "start_hour: must be before end_hour, both from 0 to 24 "
            f"({p.start_hour} to {p.end_hour})"
        )
    if not p.cap >= 0:
        raise Err(f"cap: must be a number of at least 0, got {shown(p.cap)}")
    if p.max_failures < 1:
        raise Err("max_failures: must be at least 1")
    return p


def shown(v: float) -> str:
    """A number as the Rust version prints it: 6, 5.01, 1200."""
    return str(int(v)) if v == int(v) else repr(v)


class WitWorld(wit_world.WitWorld):
    def describe(self) -> types.GateInfo:
        return types.GateInfo(
            name="windowed",
            version="1.0.0",
            description="Runs Mon-Fri 09-17 in a time zone, awaits approval when a metric's sum "
            "over the last 24 h exceeds a cap, halts after 3 failures in a row.",
            params_schema=SCHEMA,
            # The sums over the last 24 hours, in every context.
            history=types.HistoryRequest(runs=0, windows_ms=[DAY_MS]),
        )

    def check_params(self, params_: str) -> None:
        params(params_)

    def evaluate(self, ctx: types.Context) -> types.Decision:
        return decide(ctx)


def decide(ctx: types.Context) -> types.Decision:
    p = params(ctx.params)
    if ctx.consecutive_failures >= p.max_failures:
        return types.Decision_Halt(
            f"{ctx.consecutive_failures} failed runs in a row (at most {p.max_failures})"
        )
    if ctx.phase == types.Phase.AFTER_STEP:
        return types.Decision_Proceed()
    try:
        local = host.in_zone(ctx.now_ms, p.timezone)
    except Err as e:
        raise Err(f"timezone: {e.value}")
    if not (local.weekday <= 5 and p.start_hour <= local.hour < p.end_hour):
        return types.Decision_Skip(
            f"outside Mon-Fri {p.start_hour:02}:00-{p.end_hour:02}:00 {p.timezone}: "
            f"it is {WEEKDAYS[local.weekday - 1]} {local.hour:02}:{local.minute:02}"
        )
    spent = 0.0
    for w in ctx.history.windows:
        if w.window_ms == DAY_MS:
            spent = float(json.loads(w.sums).get(p.metric, 0))
    over = f"{p.metric} over the last 24 h"
    host.log(types.Level.INFO, f"{over}: {shown(spent)} of {shown(p.cap)}")
    if spent > p.cap:
        return types.Decision_AwaitApproval(
            f"{over} is {shown(spent)}, over the cap of {shown(p.cap)}"
        )
    return types.Decision_Proceed()
