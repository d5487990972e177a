-- automaton's PostgreSQL store, schema version 6: the admin record.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- One row an admin's act (a console user added, rotated or removed, a
-- delegate added or removed), in the order they were made, its entry as
-- JSON text as src/admin.rs writes it. Rows are only ever inserted, in the
-- transaction of the change they record.
CREATE TABLE admin_log (
    n      bigserial PRIMARY KEY,
    kind   text NOT NULL,
    record json NOT NULL
);
