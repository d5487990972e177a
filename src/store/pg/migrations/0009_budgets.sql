-- automaton's PostgreSQL store, schema version 9: the budgets' ledger.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- Each budget account's current window and what its settled ticks spent
-- in it (src/budget/mod.rs: `NAME`, `NAME@LOOP` or `LOOP:NAME`).
CREATE TABLE budget_accounts (
    account         text PRIMARY KEY,
    window_start_ms bigint NOT NULL,
    window_end_ms   bigint NOT NULL,
    spent           double precision NOT NULL DEFAULT 0
);

-- The reservations held: a tick's, while its step runs, in each of its
-- accounts' window that starts at the same index of `starts`.
CREATE TABLE budget_holds (
    loop     text NOT NULL,
    tick     bigint NOT NULL,
    amount   double precision NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    accounts text[] NOT NULL,
    starts   bigint[] NOT NULL,
    PRIMARY KEY (loop, tick)
);

-- Reserves p_amount for p_loop's tick p_tick in every account given (each
-- with the window that holds now, and its cap), in one statement: the
-- accounts' rows are made, then locked in one order (two reservations
-- never deadlock, and two hosts never both spend the last dollar); a hold
-- the loop left (a tick that died) is settled at its amount; a window that
-- ended starts over; unless p_force, the first account the amount does not
-- fit in refuses it (its 1-based index, spent and reserved), else the hold
-- is inserted (refused 0). The dead holds settled come back too.
CREATE FUNCTION budget_reserve(p_loop text, p_tick bigint, p_amount double precision, p_force boolean,
                               p_accounts text[], p_starts bigint[], p_ends bigint[], p_caps double precision[])
RETURNS TABLE (refused int, spent double precision, reserved double precision,
               dead_ticks bigint[], dead_amounts double precision[])
LANGUAGE plpgsql AS $$
DECLARE
    i int;
    h record;
    s double precision;
    r double precision;
    d_ticks bigint[] := '{}';
    d_amounts double precision[] := '{}';
BEGIN
    INSERT INTO budget_accounts (account, window_start_ms, window_end_ms, spent)
        SELECT u.a, u.st, u.en, 0 FROM unnest(p_accounts, p_starts, p_ends) AS u(a, st, en)
        ON CONFLICT (account) DO NOTHING;
    PERFORM 1 FROM budget_accounts b WHERE b.account = ANY (p_accounts) ORDER BY b.account FOR UPDATE;
    FOR h IN DELETE FROM budget_holds x WHERE x."loop" = p_loop RETURNING x.tick, x.amount, x.accounts, x.starts LOOP
        UPDATE budget_accounts b SET spent = b.spent + h.amount
            FROM unnest(h.accounts, h.starts) AS u(a, st)
            WHERE b.account = u.a AND b.window_start_ms = u.st;
        d_ticks := d_ticks || h.tick;
        d_amounts := d_amounts || h.amount;
    END LOOP;
    UPDATE budget_accounts b SET window_start_ms = u.st, window_end_ms = u.en, spent = 0
        FROM unnest(p_accounts, p_starts, p_ends) AS u(a, st, en)
        WHERE b.account = u.a AND b.window_start_ms <> u.st;
    IF NOT p_force THEN
        FOR i IN 1 .. coalesce(array_length(p_accounts, 1), 0) LOOP
            SELECT b.spent INTO s FROM budget_accounts b WHERE b.account = p_accounts[i];
            SELECT coalesce(sum(x.amount), 0) INTO r
                FROM budget_holds x, unnest(x.accounts, x.starts) AS u(a, st)
                WHERE u.a = p_accounts[i] AND u.st = p_starts[i];
            IF s + r + p_amount > p_caps[i] OR (p_amount = 0 AND s >= p_caps[i]) THEN
                RETURN QUERY SELECT i, s, r, d_ticks, d_amounts;
                RETURN;
            END IF;
        END LOOP;
    END IF;
    INSERT INTO budget_holds ("loop", tick, amount, accounts, starts)
        VALUES (p_loop, p_tick, p_amount, p_accounts, p_starts);
    RETURN QUERY SELECT 0, 0::double precision, 0::double precision, d_ticks, d_amounts;
END
$$;

-- Settles p_loop's tick p_tick's hold: each of its accounts at the cost
-- given for it in p_costs (by p_accounts' order), else at the hold's
-- amount, added to the window it was taken in. One row an account the hold
-- was in whose window is still current: its spend before and after.
CREATE FUNCTION budget_settle(p_loop text, p_tick bigint, p_accounts text[], p_costs double precision[])
RETURNS TABLE (account text, amount double precision, before double precision, after double precision)
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    i int;
    c double precision;
    b_before double precision;
BEGIN
    DELETE FROM budget_holds x WHERE x."loop" = p_loop AND x.tick = p_tick
        RETURNING x.amount, x.accounts, x.starts INTO h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Locked in the order a reservation locks them: never a deadlock.
    PERFORM 1 FROM budget_accounts b WHERE b.account = ANY (h.accounts) ORDER BY b.account FOR UPDATE;
    FOR i IN 1 .. coalesce(array_length(h.accounts, 1), 0) LOOP
        c := coalesce(p_costs[array_position(p_accounts, h.accounts[i])], h.amount);
        SELECT b.spent INTO b_before FROM budget_accounts b
            WHERE b.account = h.accounts[i] AND b.window_start_ms = h.starts[i] FOR UPDATE;
        IF FOUND THEN
            UPDATE budget_accounts b SET spent = b.spent + c WHERE b.account = h.accounts[i];
            RETURN QUERY SELECT h.accounts[i], h.amount, b_before, b_before + c;
        END IF;
    END LOOP;
END
$$;
