-- automaton's PostgreSQL store, schema version 8: refusals kept apart.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- The refusals of a loop's viewers (a `refused` event each, as JSON text
-- as src/history.rs writes it), kept apart from `events`: a refusal is no
-- commit (it takes no lock and moves no version; `v` is the version it
-- saw), and history's readers merge them in after the events of that
-- version. A loop keeps its newest 10,000 rows, so a flood of refusals
-- never grows without bound, and never touches `events`.
CREATE TABLE refusals (
    loop  text NOT NULL REFERENCES loops (name) ON DELETE CASCADE,
    seq   bigint GENERATED ALWAYS AS IDENTITY,
    v     bigint NOT NULL,
    event json NOT NULL,
    PRIMARY KEY (loop, seq)
);
