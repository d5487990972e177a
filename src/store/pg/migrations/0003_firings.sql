-- automaton's PostgreSQL store, schema version 3: each scheduled loop's
-- next firing, claimed by one daemon at a time. Applied by the tool
-- (src/store/pg/schema.rs) in one transaction under an advisory lock;
-- never edited once released.

-- Daemons on several hosts serving one root share this row rather than
-- each firing every loop: the first daemon to read a loop's schedule
-- writes its first firing (`nominal`, and `due` with its jitter); a
-- daemon with an idle worker claims the firings due by the server's
-- clock (`owner`, `claim_expires` one lease ahead), skipping rows another
-- is claiming, runs them, and writes the next firing as it lets the claim
-- go. A daemon renews its claims while their ticks run; one that dies
-- stops renewing, and its claims run out by the server's clock for the
-- others to take. `cadence` is the schedule (and the hosts it may run on)
-- the row was written for: a changed schedule writes a new first firing
-- once, whichever daemon reads it first. `released_v` is the state
-- version at which an approval fired the loop early, so it fires once.
CREATE TABLE firings (
    loop          text PRIMARY KEY REFERENCES loops (name) ON DELETE CASCADE,
    cadence       text NOT NULL,
    hosts         text[] NOT NULL DEFAULT '{}',
    nominal       timestamptz NOT NULL,
    due           timestamptz NOT NULL,
    owner         text,
    claim_expires timestamptz,
    released_v    bigint
);
CREATE INDEX firings_due ON firings (due);
