"""A reproducible user side: every reply of an LLM user stored under what it answered, and served again.

`groundstate run --user-cache DIR` keeps one SQLite file, `DIR/user-replies.sqlite`. A reply's key (`reply_key`) is the
SHA-256 of a canonical JSON of: the task id and what the user is told of the task (instruction, persona, context); the
user model as `model@url` and its sampling settings; the attempt index; and the conversation as the user model sees it
(`openai_compat.user_view`: its prompt and the text turns, never tool calls). So a rerun, another agent or another
checkpoint that says the same to the customer of attempt i meets the same customer, and gets the same reply without
calling the model; once the agent says something else the key differs and the model is asked, as it must be. The
attempt index is in the key so that the k attempts of a task keep a sampled user's variety (attempt 0 and attempt 1
are different customers) while attempt i is the same customer in every run that shares the cache.

A hit never calls the model. A miss calls it and stores the reply; None (the user ended the conversation) is stored
too. When two writers generate one key at once (two runs sharing a cache), the first reply stored wins and both go on
with it, so each run's transcript is what a rerun replays. With the user-turn audit (`user_audit`), every reply, from
the model or the cache, is checked first: a rejected one is never stored, and a stored one that is rejected (written
by a run with `--no-user-audit`) is deleted, so `--repair` asks the model again. A reply longer than
`types.MAX_REPLY_CHARS`, or cut by the user model's token budget, is never stored: a fault, unless the audit finds the
agent provoked it (`user_audit.UserAudit.excuses`; then the conversation ends there).

A row no reply can be (`BadCacheRow`: a reply stored as a BLOB, text that is not UTF-8, one longer than a reply may be;
written by another tool, an older groundstate or a damaged disk) would otherwise fail every attempt that meets it, in
every run: it is evicted where it is met, a warning names the file, task, attempt and what is wrong, the attempt's
`user_replies` counts it (`evicted`), and the model is asked, as for a reply never stored.

The cache is not part of a run's identity: a cached reply is the reply the model gave to that very conversation, so a
run with or without it is the same experiment and resumes either way. The manifest records the folder (its config's
`user_cache`), so a reader can tell a replayed user side from a fresh one. The model is known by its name and URL
only: serve another model under the same name, and it needs a cache folder of its own.

The file is SQLite in WAL mode (writers in several processes of one machine, e.g. Ray actors, wait for each other;
not for a network file system), marked as a groundstate user cache (`APPLICATION_ID`, `SCHEMA_VERSION`). A folder
that is a file or is read-only, a file that is not SQLite or is another schema's, is refused with `UserCacheError`
naming the path, before the file is changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from groundstate.agents.base import valid_text
from groundstate.agents.user_audit import AuditedUser, Fault, UserAudit, UserSimulatorFault, refuse_overlong
from groundstate.records import UserReplies, refuse_read_only
from groundstate.tasks import Task
from groundstate.types import MAX_REPLY_CHARS, UserSimulator, UserTools

log = logging.getLogger(__name__)

CACHE_FILE = "user-replies.sqlite"
APPLICATION_ID = 0x67735563  # "gsUc": what marks an SQLite file as a groundstate user cache
SCHEMA_VERSION = 1
KEY_VERSION = 1  # bumped when what goes into a key changes: old replies are then never served
BUSY_TIMEOUT_S = 30.0
_MAX_BYTES = 4 * MAX_REPLY_CHARS  # UTF-8 spends at most 4 bytes on a character: a longer row is too long, unread
_TABLE = "user_replies"
_COLUMNS = ("key", "task_id", "user_model", "attempt", "created", "reply")
_SCHEMA = f"""CREATE TABLE IF NOT EXISTS {_TABLE} (
    key TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    user_model TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    created TEXT NOT NULL,
    reply TEXT
)"""


class UserCacheError(ValueError):
    """The user cache cannot be used (a folder that is a file or read-only, a corrupt file, another schema): names the path."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"user cache {path}: {reason}")
        self.path = path


class BadCacheRow(ValueError):
    """A stored row holds what no user reply can be (the message says what): `CachedUser` evicts it."""


def reply_key(task: Task, user_model: str, sampling: dict[str, Any], attempt: int, view: list[dict[str, Any]]) -> str:
    """The key of the user's reply to `view` (the conversation as the user model sees it), for this task's customer at
    this attempt, played by `user_model` (`model@url`) with `sampling`."""
    body = {
        "v": KEY_VERSION,
        "task": {"id": task.id, "instruction": task.instruction, "persona": task.user.persona, "context": task.user.context},
        "user": user_model,
        "sampling": sampling,
        "attempt": attempt,
        "view": [{"role": m["role"], "content": m["content"]} for m in view],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()).hexdigest()


class UserCache:
    """The store of one cache folder (`CACHE_FILE` in it, created with the folder where missing). One instance per
    process, used by one thread at a time (an event loop); instances in many processes may use one folder at once."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self.path = self.folder / CACHE_FILE
        self._check_paths()
        try:
            # one event loop uses it at a time; Ray may close an actor's cache from another thread than the loop's
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise UserCacheError(self.path, f"cannot open it: {e}") from None
        try:
            self._check_schema()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise UserCacheError(self.path, f"is not a usable SQLite file ({e}); move it away or use another --user-cache folder") from None
        except BaseException:
            self._conn.close()
            raise

    def _check_paths(self) -> None:
        if self.folder.exists() and not self.folder.is_dir():
            raise UserCacheError(self.folder, "is not a folder")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserCacheError(self.folder, f"cannot create the folder: {e.strerror or e}") from None
        # the write bits bind root too, whom permissions do not stop (as for results files: `results.refuse_read_only`)
        if not os.access(self.folder, os.W_OK | os.X_OK) or not self.folder.stat().st_mode & 0o222:
            raise UserCacheError(self.folder, "the folder is not writable (SQLite writes its journal beside the file)")
        if self.path.exists() or self.path.is_symlink():
            if not self.path.is_file():
                raise UserCacheError(self.path, "is not a file")
            try:
                refuse_read_only(self.path)
            except PermissionError:
                raise UserCacheError(self.path, "is read-only") from None

    def _check_schema(self) -> None:
        conn = self._conn
        if not self._ours():
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._ours():  # another process may have made it since: then it is checked as any other
                    conn.execute(_SCHEMA)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")  # fails now, not mid-run, if the file cannot be written
        conn.execute("ROLLBACK")

    def _ours(self) -> bool:
        """True for a groundstate user cache of this schema, False for an empty file; `UserCacheError` for anything else."""
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        objects = [r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")]
        if app_id == 0 and not objects:
            return False
        if app_id != APPLICATION_ID:
            shown = ", ".join(objects[:5]) or "none"
            raise UserCacheError(
                self.path,
                f"is an SQLite file of another application (tables: {shown}), not a groundstate user cache: use another --user-cache folder",
            )
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        columns = tuple(r[1] for r in self._conn.execute(f"PRAGMA table_info({_TABLE})"))
        if version != SCHEMA_VERSION or columns != _COLUMNS:
            raise UserCacheError(
                self.path, f"holds a user cache of another schema (version {version}, columns {list(columns)}): use another --user-cache folder"
            )
        return True

    def get(self, key: str) -> tuple[str | None] | None:
        """(reply,) when `key` is stored (reply None: the user ended the conversation), else None. `BadCacheRow` when the
        row holds what no reply can be: not text, not UTF-8, or longer than `MAX_REPLY_CHARS` (read no further)."""
        # read as bytes: sqlite3 decoding a text that is not UTF-8 would raise for the row, and a flood is read only that far
        row = self._conn.execute(
            f"SELECT typeof(reply), length(CAST(reply AS BLOB)), substr(CAST(reply AS BLOB), 1, ?) FROM {_TABLE} WHERE key = ?", (_MAX_BYTES, key)
        ).fetchone()
        if row is None:
            return None
        kind, size, head = row
        if kind == "null":
            return (None,)
        if kind != "text":
            raise BadCacheRow(f"its reply is stored as {kind}, not text")
        if size > _MAX_BYTES:
            raise BadCacheRow(f"its reply is {size:,} bytes, longer than a reply may be ({MAX_REPLY_CHARS:,} characters)")
        try:
            reply = bytes(head).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadCacheRow(f"its reply is not UTF-8 text ({e.reason} at byte {e.start})") from None
        if len(reply) > MAX_REPLY_CHARS:
            raise BadCacheRow(f"its reply is {len(reply):,} characters, longer than a reply may be ({MAX_REPLY_CHARS:,})")
        return (reply,)

    def put(self, key: str, task_id: str, user_model: str, attempt: int, reply: str | None) -> tuple[str | None, bool]:
        """Store `reply` under `key` unless a reply is stored there already: (the stored reply, the first writer's, and
        whether it is this one). A bad row found there (`BadCacheRow`) is replaced by this reply."""
        created = datetime.now(UTC).isoformat(timespec="seconds")
        row = (key, task_id, user_model, attempt, created, reply)
        cur = self._conn.execute(f"INSERT OR IGNORE INTO {_TABLE} ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)", row)
        if cur.rowcount == 1:
            return reply, True
        try:
            stored = self.get(key)
        except BadCacheRow:
            self._conn.execute(f"INSERT OR REPLACE INTO {_TABLE} ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)", row)
            return reply, True
        return (reply if stored is None else stored[0]), False

    def delete(self, key: str) -> None:
        self._conn.execute(f"DELETE FROM {_TABLE} WHERE key = ?", (key,))

    def __len__(self) -> int:
        return self._conn.execute(f"SELECT count(*) FROM {_TABLE}").fetchone()[0]

    def close(self) -> None:
        self._conn.close()


@dataclass
class CachedUser:
    """An LLM user (`inner`) behind a `UserCache`: a reply stored for this key is served, anything else is generated
    and stored (see the module docstring). `view` is the conversation as the user model sees it; `audit`, when given,
    checks every reply before it is stored or served. `count` (the record's `UserReplies`) says how this attempt's
    replies were made."""

    def __init__(
        self,
        inner: UserSimulator,
        cache: UserCache,
        *,
        task: Task,
        user_model: str,
        sampling: dict[str, Any],
        attempt: int,
        view: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        audit: UserAudit | None = None,
        count: UserReplies | None = None,
    ):
        self.inner, self.cache, self.task, self.user_model = inner, cache, task, user_model
        self.sampling, self.attempt, self.view, self.audit = dict(sampling), attempt, view, audit
        self.count = count if count is not None else UserReplies()

    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        """The stored reply for this conversation, or the model's (stored). A user with tools of its own (`tools`) is
        never served from the cache nor stored: its calls change the final state, and a stored reply would be served
        without them; it is audited all the same."""
        if tools is not None:
            return await self._uncached(conversation, tools)
        key = reply_key(self.task, self.user_model, self.sampling, self.attempt, self.view(conversation))
        try:
            stored = self.cache.get(key)
        except BadCacheRow as e:  # served, it would fail this attempt and every one after it: gone, and the model asked
            self.cache.delete(key)
            self.count.evicted += 1
            log.warning(
                "user cache %s: evicted the reply stored for task %s, attempt %d (key %s…): %s; the user model is asked again",
                self.cache.path, self.task.id, self.attempt, key[:12], e,
            )  # fmt: skip
            stored = None
        if stored is not None:
            try:
                if self.audit is not None:
                    self.audit.check(conversation, stored[0])
            except UserSimulatorFault:
                self.cache.delete(key)  # so that --repair asks the model again
                raise
            self.count.cached += 1
            return stored[0]
        try:
            reply = await self.inner.reply(conversation, tools)
            refuse_overlong(reply)  # never stored, never audited
        except UserSimulatorFault as e:
            if self.audit is None or not self.audit.excuses(conversation, e):
                raise
            self.count.generated += 1
            return None  # a flood the agent provoked ends the conversation; not stored, so a rerun asks the model again
        reply = valid_text(reply) if reply is not None else None  # what the episode keeps of it (a lone surrogate cannot be stored)
        if self.audit is not None:
            stopped_early = self.audit.early_stop
            self.audit.check(conversation, reply)  # a fault raises here: the reply is never stored
            if self.audit.early_stop is not stopped_early:  # an early stop may become a fault: not stored, so --repair asks again
                self.count.generated += 1
                return reply
        stored, won = self.cache.put(key, self.task.id, self.user_model, self.attempt, reply)
        if won:
            self.count.generated += 1
        else:  # another run stored a reply for this key first: that one is served, as a replay
            self.count.cached += 1
        return stored

    async def _uncached(self, conversation: list[dict[str, Any]], tools: UserTools) -> str | None:
        try:
            reply = await self.inner.reply(conversation, tools)
            refuse_overlong(reply)
        except UserSimulatorFault as e:
            if self.audit is None or not self.audit.excuses(conversation, e):
                raise
            self.count.generated += 1
            return None  # a flood the agent provoked ends the conversation
        reply = valid_text(reply) if reply is not None else None
        if self.audit is not None:
            self.audit.check(conversation, reply)
        self.count.generated += 1
        return reply


def provoked_findings(user: UserSimulator | None) -> list[str]:
    """What the audit of an LLM user found in this attempt and did not count, because the agent's own message provoked
    it (`UserAudit.provoked`), one sentence each for the verdict's reasons; [] for any other user."""
    audit = user.audit if isinstance(user, (AuditedUser, CachedUser)) else None
    found: list[Fault] = audit.provoked if audit is not None else []
    return [f"user-turn audit: {f.kind} the agent provoked, not a user-simulator fault: {f.detail}; {f.provoked}" for f in found]


def early_stop_fault(user: UserSimulator | None) -> UserSimulatorFault | None:
    """The premature stop an audited LLM user made in this attempt (`UserAudit.early_stop`), as the fault it is when the
    task was left undone; None for any other user, or one that did not stop early."""
    audit = user.audit if isinstance(user, (AuditedUser, CachedUser)) else None
    if audit is None or audit.early_stop is None:
        return None
    return UserSimulatorFault(audit.early_stop.kind, audit.early_stop.detail)
