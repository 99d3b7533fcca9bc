"""Change capture: triggers that log the first before-image of every touched row.

The log `_gs_log(tbl, pk, old)` keeps one entry per (table, primary key): the row's JSON image at the
template (`old`), or NULL when the row did not exist there. Later writes to the same row are ignored
by the log, so reading it back gives the exact before-state of every changed row.
"""

from __future__ import annotations

from groundstate.state.db import check_identifier

LOG_TABLE = "_gs_log"
LOG_DDL = f"CREATE TABLE {LOG_TABLE} (tbl TEXT NOT NULL, pk TEXT NOT NULL, old TEXT, PRIMARY KEY (tbl, pk))"


def sqlite_triggers(table: str, columns: list[str], pk: list[str]) -> list[str]:
    check_identifier(table)
    for c in columns:
        check_identifier(c)

    def key(ref: str) -> str:
        return "json_array(" + ", ".join(f"{ref}.{c}" for c in pk) + ")"

    image = "json_object(" + ", ".join(f"'{c}', OLD.{c}" for c in columns) + ")"
    log_old = f"INSERT OR IGNORE INTO {LOG_TABLE} VALUES ('{table}', {key('OLD')}, {image});"
    log_new = f"INSERT OR IGNORE INTO {LOG_TABLE} VALUES ('{table}', {key('NEW')}, NULL);"
    return [
        f"CREATE TRIGGER _gs_{table}_ins AFTER INSERT ON {table} BEGIN {log_new} END",
        f"CREATE TRIGGER _gs_{table}_upd AFTER UPDATE ON {table} BEGIN {log_old} {log_new} END",
        f"CREATE TRIGGER _gs_{table}_del AFTER DELETE ON {table} BEGIN {log_old} END",
    ]


def postgres_triggers(table: str, columns: list[str], pk: list[str]) -> list[str]:
    check_identifier(table)
    for c in columns:
        check_identifier(c)

    def key(ref: str) -> str:
        return "jsonb_build_array(" + ", ".join(f"{ref}.{c}" for c in pk) + ")::text"

    return [
        f"""CREATE FUNCTION _gs_{table}_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    INSERT INTO {LOG_TABLE} VALUES ('{table}', {key("OLD")}, to_jsonb(OLD)::text) ON CONFLICT DO NOTHING;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO {LOG_TABLE} VALUES ('{table}', {key("NEW")}, NULL) ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END $$""",
        f"CREATE TRIGGER _gs_{table}_trg AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION _gs_{table}_fn()",
    ]
