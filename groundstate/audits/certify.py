"""`tasks certify`: a task's evidence that its reward is right both ways, in one certificate.

For each task and backend the certificate gathers what the other audits find, each from production attempts
(`attempt.play`):

- against false positives, `groundstate.audits.lint` (the gold passes, a no-op fails, every counted mutant of the gold is
  killed) and `groundstate.audits.hacks` (no reward-hacking agent passes);
- against false negatives, `groundstate.audits.alternatives` (every valid alternative solution passes);
- determinism: with a second backend, every one of those attempts gets the same reward on both (SQLite = PostgreSQL).
  A world that does not live in the backend (ThinkingBox servers, which show no change set) is certified once;
- for a task with reply rubrics and a judge: the gold with the task's `gold_reply` passes, and the gold with a reply
  that states nothing (`SILENT_REPLY`) fails. Without a judge the reply is `unjudged`: the certificate covers the
  final state only, and says so.

A task is *certified* iff its gold passes, its no-op fails, no mutant survives, no hack passes, no valid alternative
fails, the backends agree, a judged reply check gave what it must and nothing kept a part from running. The certificate
carries the content hashes of the task, of its domain and of the code that grades and audits it (`checker_hash`): it
is void as soon as any of them changes (`Certificate.valid_for`), and `tasks certify --reuse FILE` certifies anew
exactly the tasks whose earlier certificate is void. `--reuse` is a cache, not evidence: a file whose counts cannot be
(negative, more killed than made, more passed than tried, `certified` where its fields say otherwise) is refused, but
hashes and outcomes that could be true are believed, so only a file this kit wrote should be given.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic import Field, model_validator

from groundstate.audits.alternatives import TaskAlternatives, audit
from groundstate.audits.hacks import TaskHacks, hack_task
from groundstate.audits.lint import TaskLint, lint_task, within_task
from groundstate.state.base import Backend
from groundstate.tasks import Task, TaskFileError, read_data_file
from groundstate.types import Domain, Judge
from groundstate.worlds.attempt import play_calls, prepare_domains

SILENT_REPLY = "I have taken care of your request."  # a reply that tells the customer nothing: rubrics must say no


# the modules whose code decides a certificate: grading, the change sets it compares, and the audits
_CHECKERS = (
    "grading/grader", "grading/judge", "grading/blame", "audits/lint", "audits/hacks", "audits/alternatives", "audits/certify",
    "worlds/attempt", "worlds/episode", "worlds/environment", "worlds/domain", "tasks", "types", "state/changes", "state/base", "state/capture", "state/db", "state/sqlite", "state/postgres", "tools/__init__", "tools/mutate",
    "agents/scripted", "worlds/thinkingbox/env", "worlds/thinkingbox/grading", "worlds/tau2/env", "worlds/tau2/grading",
)  # fmt: skip


@functools.cache
def checker_hash() -> str:
    """Hash of the code that grades and audits tasks (`_CHECKERS`): a certificate is void once it changes."""
    root = Path(__file__).parents[1]
    h = hashlib.sha256()
    for name in _CHECKERS:
        h.update((root / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


def task_hash(task: Task) -> str:
    """Hash of everything a task file says about the task (wording, user, patch, gold, checks, rubrics, limits)."""
    return hashlib.sha256(json.dumps(task.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


Count = Annotated[int, Field(ge=0)]


@pydantic.dataclasses.dataclass
class Certificate:
    """One task's certificate. Its counts are bounded and agree with its lists (`_consistent`), and a `certified` that
    a file gives must be what they make it (`_claims`): a certificate read back (`--reuse`) can be wrong only about the
    hashes and outcomes it states, which are a cache's word, never evidence."""

    task_id: str
    domain: str
    task_hash: str
    domain_hash: str
    checker_hash: str
    backends: Annotated[list[str], Field(min_length=1)]
    gold_pass: bool
    noop_fail: bool
    mutants_counted: Count
    mutants_killed: Count
    mutants_equivalent: Count  # same state as gold's but for masked columns
    mutants_refused: Count  # the tool refused the mutated call
    mutants_noop: Count  # the mutated call changed nothing (the world's state digest)
    alternatives_tried: Count
    alternatives_accepted: Count
    alternatives_invalid: Count
    hacks_tried: Count
    hacks_passed: Count
    sqlite_equals_postgres: bool | None  # None: one backend, or a world the backend does not hold
    in_backend: bool = True  # whether the task's world lives in the backend (SQL domains) or outside it (ThinkingBox)
    reply: str | None = None  # rubric tasks: "judged" (both reply checks as they must be), "unjudged", or what went wrong
    judge: str | None = None  # the judge of the replies (`openai:MODEL@URL`), where one judged them
    survivors: list[dict[str, str]] = field(default_factory=list)
    false_negatives: list[dict[str, str]] = field(default_factory=list)
    hacks_that_passed: list[str] = field(default_factory=list)
    invalid_alternatives: list[dict[str, str]] = field(default_factory=list)  # each with why it is not the same work
    disagreements: list[str] = field(default_factory=list)  # attempts whose reward differs between the backends
    problems: list[str] = field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Certificate:
        alts = (self.alternatives_accepted, self.alternatives_invalid, len(self.false_negatives))
        wrong = [
            (self.mutants_killed > self.mutants_counted, f"mutants_killed ({self.mutants_killed}) exceeds mutants_counted ({self.mutants_counted})"),
            (
                len(self.survivors) != self.mutants_counted - self.mutants_killed,
                f"survivors lists {len(self.survivors)}, but mutants_counted - mutants_killed is {self.mutants_counted - self.mutants_killed}",
            ),
            (
                sum(alts) != self.alternatives_tried,
                "alternatives_accepted + alternatives_invalid + false_negatives ({} + {} + {}) is not alternatives_tried ({})".format(
                    *alts, self.alternatives_tried
                ),
            ),
            (
                len(self.invalid_alternatives) != self.alternatives_invalid,
                f"invalid_alternatives lists {len(self.invalid_alternatives)}, but alternatives_invalid is {self.alternatives_invalid}",
            ),
            (self.hacks_passed > self.hacks_tried, f"hacks_passed ({self.hacks_passed}) exceeds hacks_tried ({self.hacks_tried})"),
            (
                len(self.hacks_that_passed) != self.hacks_passed,
                f"hacks_that_passed lists {len(self.hacks_that_passed)}, but hacks_passed is {self.hacks_passed}",
            ),
            (
                (self.sqlite_equals_postgres is False) != bool(self.disagreements),
                f"sqlite_equals_postgres is {self.sqlite_equals_postgres}, but disagreements lists {len(self.disagreements)}",
            ),
        ]
        for bad, why in wrong:
            if bad:
                raise ValueError(why)
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _claims(cls, data: Any, handler: pydantic.ValidatorFunctionWrapHandler) -> Certificate:
        cert = handler(data)
        # `to_json` writes `certified`; read back, it is recomputed from the fields, and a file that says otherwise lies
        claimed = data.get("certified", cert.certified) if isinstance(data, dict) else cert.certified
        if claimed is not cert.certified:
            raise ValueError(f"certified is {claimed!r}, but its fields make it {cert.certified}")
        return cert

    @property
    def certified(self) -> bool:
        return (
            self.gold_pass
            and self.noop_fail
            and self.mutants_killed == self.mutants_counted
            and self.hacks_passed == 0
            and not self.false_negatives
            and self.sqlite_equals_postgres is not False
            and self.reply in (None, "judged", "unjudged")
            and not self.problems
        )

    def valid_for(self, task: Task, domain: Domain) -> bool:
        """Whether the certificate still speaks for this task: neither the task, its domain nor the checking code
        changed since."""
        return (self.task_id, self.task_hash, self.domain_hash, self.checker_hash) == (task.id, task_hash(task), domain.content_hash, checker_hash())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "certified": self.certified}


@dataclass
class _Run:
    backend: str
    lint: TaskLint
    alternatives: TaskAlternatives
    hacks: TaskHacks

    def rewards(self) -> dict[str, int | None]:
        out = {f"lint {k}": v for k, v in self.lint.rewards.items()}
        out.update({f"alternative {r.description}": r.reward for r in self.alternatives.results})
        out.update({f"hack {k}": v for k, v in self.hacks.rewards.items()})
        return out


async def reply_checks(task: Task, domain: Domain, backend: Backend, judge: Judge) -> str:
    """`judged` when the gold with the task's gold reply passes and with `SILENT_REPLY` fails, else what went wrong."""
    if not task.gold_reply:
        return "no gold_reply: the task gives no reply its rubrics accept"
    gold = [c.model_dump() for c in task.gold]
    got = []
    for text, want in ((task.gold_reply, 1), (SILENT_REPLY, 0)):
        out = await play_calls(task, domain, gold, backend=backend, final_text=text, judge=judge)
        if out.verdict.system_error:
            return f"system error judging the reply: {out.verdict.system_error}"
        if out.verdict.reward != want:
            got.append(f"{'the gold reply' if want else 'a reply that states nothing'} got {out.verdict.reward}, must get {want}")
    return "; ".join(got) or "judged"


def certify_task(task: Task, domain: Domain, backends: list[Backend], siblings: list[Task], judge: Judge | None = None) -> Certificate:
    """One task's certificate: lint, alternatives and hacks on each backend in turn, compared; rubric replies judged on
    the first backend where a judge is given."""
    runs: list[_Run] = []
    for backend in backends:
        run = _Run(
            backend.name,
            lint_task(task, domain, backend),
            asyncio.run(audit(task, domain, backend, within_task(backend))),
            asyncio.run(hack_task(task, domain, backend, siblings)),
        )
        runs.append(run)
        if not run.alternatives.shows_state:
            break  # the world lives outside the backend: another backend would play the same servers
    first = runs[0]
    lint, alts, hacks = first.lint, first.alternatives, first.hacks
    parity: bool | None = None
    disagreements: list[str] = []
    if len(runs) > 1:
        base = first.rewards()
        for other in runs[1:]:
            theirs = other.rewards()
            disagreements += [
                f"{k}: {first.backend} {base.get(k)} vs {other.backend} {theirs.get(k)}"
                for k in sorted(set(base) | set(theirs))
                if base.get(k) != theirs.get(k)
            ]
        parity = not disagreements
    reply = None
    if task.rubrics:
        reply = "unjudged" if judge is None else asyncio.run(reply_checks(task, domain, backends[0], judge))
    judged_by = judge.spec if task.rubrics and judge is not None else None
    problems = list(lint.problems) + list(alts.problems)
    problems += [f"hack {h}: system error" for h, o in hacks.outcomes.items() if o == "system_error"]
    return Certificate(
        task_id=task.id,
        domain=domain.name,
        task_hash=task_hash(task),
        domain_hash=domain.content_hash,
        checker_hash=checker_hash(),
        backends=[r.backend for r in runs],
        gold_pass=lint.gold_pass,
        noop_fail=lint.noop_fail,
        mutants_counted=lint.counted,
        mutants_killed=lint.killed,
        mutants_equivalent=lint.count("equivalent"),
        mutants_refused=lint.count("refused"),
        mutants_noop=lint.count("no-op"),
        alternatives_tried=len(alts.results),
        alternatives_accepted=alts.count("accepted"),
        alternatives_invalid=alts.count("invalid"),
        hacks_tried=hacks.tried,
        hacks_passed=len(hacks.passed),
        sqlite_equals_postgres=parity,
        in_backend=first.alternatives.shows_state,
        reply=reply,
        judge=judged_by,
        survivors=[{"mutant": m.description, "reason": m.reason} for m in lint.mutants if m.outcome == "survived"],
        false_negatives=[{"alternative": r.description, "reason": r.reason} for r in alts.results if r.outcome == "false_negative"],
        hacks_that_passed=hacks.passed,
        invalid_alternatives=[{"alternative": r.description, "reason": r.reason} for r in alts.results if r.outcome == "invalid"],
        disagreements=disagreements,
        problems=problems,
    )


def summary(certs: list[Certificate]) -> dict[str, Any]:
    """The suite's totals: what `tasks certify --json` prints."""
    return {
        "tasks": len(certs),
        "certified": sum(c.certified for c in certs),
        "backends": sorted({b for c in certs for b in c.backends}),
        "gold_pass": sum(c.gold_pass for c in certs),
        "noop_fail": sum(c.noop_fail for c in certs),
        "mutants": sum(c.mutants_counted for c in certs),
        "mutants_killed": sum(c.mutants_killed for c in certs),
        "mutants_equivalent": sum(c.mutants_equivalent for c in certs),
        "mutants_refused": sum(c.mutants_refused for c in certs),
        "mutants_noop": sum(c.mutants_noop for c in certs),
        "alternatives_tried": sum(c.alternatives_tried for c in certs),
        "alternatives_accepted": sum(c.alternatives_accepted for c in certs),
        "alternatives_invalid": sum(c.alternatives_invalid for c in certs),
        "hacks_tried": sum(c.hacks_tried for c in certs),
        "hacks_passed": sum(c.hacks_passed for c in certs),
        # tasks whose attempts got the same rewards on both backends (None: no task was certified on two)
        "sqlite_equals_postgres": sum(c.sqlite_equals_postgres is True for c in certs)
        if any(c.sqlite_equals_postgres is not None for c in certs)
        else None,
        "rubric_tasks": sum(c.reply is not None for c in certs),
        "replies_judged": sum(c.reply == "judged" for c in certs),
        "replies_unjudged": sum(c.reply == "unjudged" for c in certs),
        "not_certified": [
            {
                "task_id": c.task_id,
                "survivors": c.survivors,
                "false_negatives": c.false_negatives,
                "hacks_passed": c.hacks_that_passed,
                "disagreements": c.disagreements,
                "reply": c.reply,
                "problems": c.problems,
            }
            for c in certs
            if not c.certified
        ],
    }


def load_certificates(path: Path) -> dict[str, Certificate]:
    """The certificates of an earlier `tasks certify --out` file by task id; `TaskFileError` naming the file, the task
    and the field for anything else, a certificate whose counts cannot be (`Certificate`) included. The file is a cache
    of earlier runs, not evidence: a certificate with the right hashes is believed, and `certified` is recomputed."""
    if not Path(path).is_file():  # a FIFO or a device would block the read
        raise TaskFileError(path, "is not a regular file")
    data = read_data_file(path)
    entries = data.get("per_task") if isinstance(data, dict) and "certified" in data else None
    if not isinstance(entries, list):
        raise TaskFileError(path, "is not a `tasks certify --out` file (no per_task list)")
    adapter = pydantic.TypeAdapter(Certificate)
    out: dict[str, Certificate] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TaskFileError(path, "must be a mapping", field=f"per_task[{i}]")
        task_id = entry.get("task_id") if isinstance(entry.get("task_id"), str) else None
        try:
            cert = adapter.validate_python(entry)
        except pydantic.ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            raise TaskFileError(path, message, task_id=task_id, field=f"per_task[{i}]" + (f".{where}" if where else "")) from None
        if cert.task_id in out:  # two certificates of one task: which one would be kept is not for the file to decide
            raise TaskFileError(path, "a second certificate of the task", task_id=task_id, field=f"per_task[{i}]")
        out[cert.task_id] = cert
    return out


def reusable(cert: Certificate | None, task: Task, domain: Domain, backends: list[str], judge: Judge | None) -> bool:
    """Whether an earlier certificate still speaks for the task as certified now: certified (a failure, which may have
    been a server gone away, is always certified anew), valid for the task (`valid_for`), on the same backends (one,
    for a world outside the backend) and, where a judge is given now, with its reply judged by that judge."""
    if cert is None or not cert.certified or not cert.valid_for(task, domain):
        return False
    if (sorted(cert.backends) != sorted(backends)) if cert.in_backend else (cert.backends != backends[:1]):
        return False
    return not (task.rubrics and judge is not None and (cert.reply != "judged" or cert.judge != judge.spec))


def certify(
    pairs: list[tuple[Task, Domain]],
    backends: list[Backend],
    workers: int = 1,
    on_done: Callable[[Certificate], None] | None = None,
    judge: Judge | None = None,
    previous: dict[str, Certificate] | None = None,
) -> list[Certificate]:
    """Certificates of many tasks, in their order; `workers` > 1 certifies tasks in threads (useful with PostgreSQL).
    A certificate in `previous` that is still `reusable` is kept instead of certifying its task again."""
    for backend in backends:
        prepare_domains((d for _, d in pairs), backend)
        if backend.max_open is not None:
            workers = min(workers, max(1, (backend.max_open - 1) // within_task(backend)))
    siblings: dict[str, list[Task]] = {}
    for t, d in pairs:
        siblings.setdefault(d.name, []).append(t)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        names = [b.name for b in backends]
        kept = {t.id: previous[t.id] for t, d in pairs if previous and reusable(previous.get(t.id), t, d, names, judge)}
        futures = [None if t.id in kept else pool.submit(certify_task, t, d, backends, siblings[d.name], judge) for t, d in pairs]
        out = []
        for (t, _), fut in zip(pairs, futures, strict=True):
            cert = kept[t.id] if fut is None else fut.result()
            out.append(cert)
            if on_done:
                on_done(cert)
    return out


@dataclass(frozen=True)
class CertifyJob:
    """What `groundstate tasks certify` asks of `certify_suite`; these defaults are the command's."""

    concurrency: int = 0  # tasks certified at once; 0: 1 on SQLite alone, 8 with a server backend
    out: Path | None = None  # also write every certificate here, as JSON (with the suite's totals)


@dataclass
class CertifiedSuite:
    """`certify_suite`'s answer: the certificates in the tasks' order and the totals (`summary`, with `reused`: how
    many certificates were kept from the earlier file)."""

    certificates: list[Certificate]
    totals: dict[str, Any]


class CertifyRefused(ValueError):
    """The suite was not certified: an `--out` that cannot be written, a judge that cannot answer (said before any task)."""


def certify_suite(
    pairs: list[tuple[Task, Domain]],
    backends: list[Backend],
    job: CertifyJob = CertifyJob(),
    judge: Judge | None = None,
    previous: dict[str, Certificate] | None = None,
    on_done: Callable[[Certificate], None] | None = None,
) -> CertifiedSuite:
    """`certify` at the job's concurrency, the certificates written to `job.out` where one is given. Before any task:
    `CertifyRefused` for an `out` that cannot be written, or a judge that cannot answer one rubric question while a task
    has rubrics; `TaskFileError` for a domain file a backend rejects."""
    if job.out:
        try:
            job.out.parent.mkdir(parents=True, exist_ok=True)
            existed = job.out.exists()
            with job.out.open("a"):
                pass
            if not existed:
                job.out.unlink()
        except OSError as e:
            raise CertifyRefused(f"--out {job.out}: {e.strerror or e}") from None
    if judge is not None and any(t.rubrics for t, _ in pairs):  # a dead or wrong judge is said once, before any attempt
        try:
            judge.judge_rubric("Does the reply say hello?", "Hello.")
        except Exception as e:  # noqa: BLE001 - EndpointError, JudgeError: the judge cannot answer
            raise CertifyRefused(f"--judge {judge.spec}: {e}") from None
    workers = job.concurrency or (8 if any(b.name == "postgres" for b in backends) else 1)
    certs = certify(pairs, backends, workers=workers, on_done=on_done, judge=judge, previous=previous)
    totals = summary(certs)
    totals["reused"] = sum(previous is not None and previous.get(c.task_id) is c for c in certs)
    if job.out:
        try:
            job.out.write_text(json.dumps({**totals, "per_task": [c.to_json() for c in certs]}, indent=1, default=str))
        except OSError as e:
            raise CertifyRefused(f"--out {job.out}: {e.strerror or e}") from None
    return CertifiedSuite(certs, totals)
