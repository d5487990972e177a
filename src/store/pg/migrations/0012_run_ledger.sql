-- automaton's PostgreSQL store, schema version 12: the run ledger, what a
-- gate's `history` (the last runs, each metric's sum over windows) is
-- read from. Applied by the tool (src/store/pg/schema.rs) in one
-- transaction under an advisory lock; never edited once released.

-- One row a run (a `tick` event whose step ran), in the loop's history
-- order, as the file store's `ledger.jsonl` has it (src/ledger.rs): `n` is
-- the number of runs up to and including it, `f` the failed ones; `at_ms`
-- when it ended (ms since the epoch, never before the run before it);
-- `sums` each metric's running sum up to and including it, exact
-- (numeric). A window's sums are the newest row's less those of the last
-- row that ended at or before the window's start: two index look-ups,
-- whatever the length of the history. Written by a trigger on `events`,
-- so in the transaction of the commit that records the run, as the
-- tables' owner: a role that may write the history needs only to read it.
CREATE TABLE runs (
    loop    text NOT NULL REFERENCES loops (name) ON DELETE CASCADE,
    n       bigint NOT NULL,
    tick    bigint NOT NULL,
    at_ms   bigint NOT NULL,
    failed  boolean NOT NULL,
    f       bigint NOT NULL,
    metrics jsonb NOT NULL,
    sums    jsonb NOT NULL,
    PRIMARY KEY (loop, n)
);
CREATE INDEX runs_by_end ON runs (loop, at_ms, n);

-- Whether a process outcome (`step`, `verifier` of a tick event) is a
-- success: exit code 0 and not timed out (ProcessOutcome::success).
CREATE FUNCTION run_outcome_ok(p json) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p->>'exit_code' = '0', false)
        AND NOT coalesce((p->>'timed_out')::boolean, false)
$$;

-- Adds the run `p_event` records (a tick event, as JSON) to p_loop's
-- ledger; nothing when it is not a run.
CREATE FUNCTION run_record(p_loop text, p_event json) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    prev runs%ROWTYPE;
    at_text text;
    ended bigint;
    ok boolean;
    m jsonb;
BEGIN
    -- An event's text may hold \u0000 (a gate's reason), which json's
    -- operators refuse to read (text cannot hold NUL): read with it replaced.
    p_event := replace(p_event::text, '\u0000', '\ufffd')::json;
    IF p_event->>'kind' IS DISTINCT FROM 'tick' OR json_typeof(p_event->'step') IS DISTINCT FROM 'object' THEN
        RETURN;
    END IF;
    -- The end in whole milliseconds, as the event's own timestamp has it
    -- (truncated: a timestamptz would round the nanoseconds).
    at_text := p_event->>'at';
    ended := (extract(epoch FROM regexp_replace(at_text, '\.[0-9]+', '')::timestamptz) * 1000)::bigint
        + coalesce(rpad(substring(at_text FROM '\.([0-9]{1,3})'), 3, '0')::bigint, 0);
    ok := run_outcome_ok(p_event->'step')
        AND (json_typeof(p_event->'verifier') IS DISTINCT FROM 'object' OR run_outcome_ok(p_event->'verifier'));
    -- Numbers only (what the history's metrics are).
    SELECT coalesce(jsonb_object_agg(k, v), '{}') INTO m
        FROM jsonb_each(coalesce(p_event->'metrics', '{}')::jsonb) AS e(k, v)
        WHERE jsonb_typeof(v) = 'number';
    SELECT * INTO prev FROM runs r WHERE r."loop" = p_loop ORDER BY n DESC LIMIT 1;
    INSERT INTO runs ("loop", n, tick, at_ms, failed, f, metrics, sums)
    VALUES (
        p_loop,
        coalesce(prev.n, 0) + 1,
        (p_event->>'tick')::bigint,
        greatest(ended, coalesce(prev.at_ms, 0)),
        NOT ok,
        coalesce(prev.f, 0) + CASE WHEN ok THEN 0 ELSE 1 END,
        m,
        (SELECT coalesce(jsonb_object_agg(k, coalesce((coalesce(prev.sums, '{}') -> k)::numeric, 0)
                                             + coalesce((m -> k)::numeric, 0)), '{}')
           FROM (SELECT jsonb_object_keys(coalesce(prev.sums, '{}')) UNION SELECT jsonb_object_keys(m)) AS keys(k)));
END
$$;

CREATE FUNCTION runs_record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM run_record(NEW."loop", NEW.event);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_record AFTER INSERT ON events
    FOR EACH ROW WHEN (replace(NEW.event::text, '\u0000', '\ufffd')::json->>'kind' = 'tick')
    EXECUTE FUNCTION runs_record_event();

-- The runs of the history written before this version, in its order.
DO $$
DECLARE
    e record;
BEGIN
    FOR e IN SELECT x."loop" AS l, x.event FROM events x
             WHERE replace(x.event::text, '\u0000', '\ufffd')::json->>'kind' = 'tick'
             ORDER BY x."loop", x.v, x.n LOOP
        PERFORM run_record(e.l, e.event);
    END LOOP;
END
$$;
-- Statistics of it from the start, so the look-ups are planned on its index
-- before autovacuum first comes by.
ANALYZE runs;
