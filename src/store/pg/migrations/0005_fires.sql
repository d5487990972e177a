-- automaton's PostgreSQL store, schema version 5: the ledger of firings.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- What became of each firing a scheduled loop's schedule called for: one
-- row a record, as src/fires.rs writes it (JSON text: when it fell due,
-- ran / skipped / missed and why, the count and window of a folded run,
-- the tick, the daemon). `last_at` is when the record's last firing fell
-- due, for `automaton fires --since`. Written by the daemon holding the
-- loop's claim; a loop keeps its newest 5,000 rows.
CREATE TABLE fires (
    loop    text NOT NULL REFERENCES loops (name) ON DELETE CASCADE,
    seq     bigint GENERATED ALWAYS AS IDENTITY,
    last_at timestamptz NOT NULL,
    record  json NOT NULL,
    PRIMARY KEY (loop, seq)
);
