"""The user-turn audit: each reply of an LLM user checked against what its persona knows, so that a simulator that
invents a fact, contradicts one or walks away is a *user-simulator fault*, recorded as a system error (retried by
`--repair`), never scored as the agent's 0.

What the user knows is its task's instruction, persona and context; what it has seen is that and every text turn
delivered to it (`base.delivered_turns`): a value the agent told it is the user's to repeat. Facts are the fact-like
tokens of a text (`fact_tokens`): e-mail addresses; codes that mix letters and digits (E10181, ORD-1234, 4RATSN);
numbers written as references (#412); and numbers of five or more digits (a routing number, 555-0123) that are not a
date, a time, an amount, a percentage, a ZIP+4 or a quantity ("15000 miles"); four digits are too often a time, an
amount or a street number. A reply to an agent message that asks the user to make a value up (a new PIN, a password
to choose) states nothing the user should have known: its tokens are never a fault.

The rules (the first that holds is the fault):
- `contradicted_fact`: the reply states a fact it never saw that has the form of one of its own facts: another
  e-mail where it has one, a code or number of the same shape (E10182 where it has E10181, #413 where it has #412);
- `invented_fact`: the reply states any other fact it never saw (a phone number its persona does not have);
- `premature_stop`: the user ends the conversation in answer to an agent message asking for one of its facts: a
  question (or a "please give ..." request) that names the fact's label, the words before the fact in the known text
  ("employee number" in "your employee number is E10181"; every e-mail is an "email"), next to an asking word
  (what, which, could you provide / tell / confirm ..., may I have), and does not state the value itself.

Conservative by design: a false fault turns an agent's failure into a repairable system error and biases pass rates
up, so only clear cases are flagged. Short numbers (days, counts, "order 12"), dates in any usual form, times,
amounts, years, ordinals, quantities and product names in mixed case (iPhone15) are never facts; a fact counts as
seen when it appears anywhere in what the user saw once case, spaces and punctuation are ignored (E-10181, e10181 and
"E 10181" are one fact); "Is there anything else ...?" never asks for a fact. Scripted users are not audited: their
replies are the task's own.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from groundstate.agents.base import delivered_turns
from groundstate.tasks import Task
from groundstate.types import UserSimulator

FAULT_PREFIX = "user-simulator fault"
FAULT_KINDS = ("invented_fact", "contradicted_fact", "premature_stop")
_FAULT_TEXT = re.compile(rf"^{FAULT_PREFIX} \(([a-z_]+)\):")


class UserSimulatorFault(RuntimeError):
    """An LLM user's reply broke its persona (`find_fault`): the attempt is a system error whose text starts with
    `user-simulator fault (KIND):`, so `--repair` plays it again; the reply is never written to a user cache."""

    def __init__(self, kind: str, detail: str, reply: str | None = None):
        super().__init__(f"{FAULT_PREFIX} ({kind}): {detail}")
        self.kind, self.detail, self.reply = kind, detail, reply


def fault_kind(system_error: str | None) -> str | None:
    """The fault kind of a record's system error when it is a user-simulator fault, else None."""
    m = _FAULT_TEXT.match(system_error or "")
    return m.group(1) if m and m.group(1) in FAULT_KINDS else None


# -- fact-like tokens ------------------------------------------------------------------------------------------

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_QUANTITY = (
    r"dollars?|bucks|usd|eur|euros?|pounds?|gbp|cents?|miles?|km|kilomet(?:er|re)s?|points?|credits?|hours?|hrs?|"
    r"minutes?|mins?|seconds?|secs?|days?|nights?|weeks?|months?|years?|items?|units?|people|persons?|guests?|times|"
    r"pieces?|pcs?|kg|kilos?|lbs?|grams?|g|liters?|litres?|steps?|words?|pages?|calories|seats?|bags?|gb|mb|tb|kb"
)
# masked before tokens are read: never facts, and their digits must not be read as one
_NOT_FACTS = re.compile(
    "|".join(
        [
            r"\b\d{4}-\d{1,2}-\d{1,2}(?:T[\d:.]+Z?)?",  # 2026-07-06, 2026-06-06T10:00
            r"\b\d{1,2}-\d{1,2}-\d{2,4}\b",  # 15-06-2026, 06-15-2026
            r"\b\d{5}-\d{4}\b",  # a ZIP+4 code
            r"\b\d{1,2}h\d{2}\b",  # 14h30
            r"\b\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?\b",  # 07/06/2026, 6/7, 06.07.2026
            r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\b\.?)?",  # 10:30, 10:30 am
            r"\b\d{1,2}\s?[ap]\.?m\b\.?",  # 5pm, 5 p.m.
            r"(?:[$€£¥]|\b(?:usd|eur|gbp)\s?)\d[\d,]*(?:\.\d+)?(?:\s?[km]\b)?",  # $1,500.00, USD 40, $15k
            r"\b\d[\d,]*(?:\.\d+)?\s?(?:[$€£¥]|(?:usd|eur|gbp)\b)",  # 1500€, 40 USD
            r"\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b",  # 1,500 and 1,500.00
            r"\b\d+\.\d+\b",  # 42.5
            r"\b\d+(?:\.\d+)?\s?%",  # 15%
            rf"\b\d+\s?(?:{_QUANTITY})\b",  # 1500 miles, 3 days
        ]
    ),
    re.IGNORECASE,
)
_TOKEN = re.compile(r"#?\b[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*\b")
_UNIT_SUFFIX = re.compile(rf"^\d+(?:st|nd|rd|th|am|pm|k|m|b|x|p|d|h|s|w|y|mo|yr|yrs|cm|mm|ft|in|mi|ml|l|oz|mg|{_QUANTITY})$", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    """One fact-like token of a text: as written, its comparison key, its kind and its shape (what "the same kind of
    fact" means), and where it starts in the text."""

    text: str
    key: str  # lower case, without '#', '-', '_'
    kind: str  # email, code, ref (#412) or number
    shape: str  # E99999 for E10181, #999 for #412, 999-9999 for 555-0123; the domain for an e-mail
    start: int


def _code_shape(key: str) -> str:
    upper = key.upper()
    prefix = re.match(r"[A-Z]*", upper).group(0)
    return prefix + re.sub(r"[A-Z]", "A", re.sub(r"\d", "9", upper[len(prefix) :]))


def _is_year(digits: str) -> bool:
    return len(digits) == 4 and 1900 <= int(digits) <= 2099


def _classify(text: str, start: int) -> Token | None:
    body = text.lstrip("#")
    key = re.sub(r"[-_]", "", body).lower()
    groups = re.split(r"[-_]", body)
    letters = re.sub(r"[^A-Za-z]", "", body)
    digits = re.sub(r"\D", "", body)
    if not digits:
        return None
    if text.startswith("#") and not letters:
        return Token(text, key, "ref", "#" + "9" * len(digits), start)
    if not letters:
        if len(groups) == 1:
            if len(digits) >= 5:  # four digits are too often a time, an amount or a street number to call a fact
                return Token(text, key, "number", "9" * len(digits), start)
            return None
        if len(digits) >= 6 and not all(_is_year(g) for g in groups):  # 555-0123, 123-45-6789; not 2025-2026 or 10-12
            return Token(text, key, "number", "-".join("9" * len(g) for g in groups), start)
        return None
    if _UNIT_SUFFIX.match(key) or len(key) < 4:
        return None
    if letters.isupper():  # E10181, MA102, 4RATSN, ORD-1234 (USB3 is too short to tell)
        ok = len(digits) >= 2 or len(key) >= 5
    elif letters.islower():  # e10181 typed in lower case; not mp3 or iphone15
        ok = len(digits) >= 3
    else:  # mixed case is a name (iPhone15, PlayStation5), not a code
        ok = False
    return Token(text, key, "code", _code_shape(key), start) if ok else None


def fact_tokens(text: str) -> list[Token]:
    """The fact-like tokens of `text`, in order (see the module docstring for what is and is not one)."""
    found = [Token(m.group(0), m.group(0).lower(), "email", m.group(0).lower().rpartition("@")[2], m.start()) for m in _EMAIL.finditer(text)]
    masked = _EMAIL.sub(lambda m: " " * len(m.group(0)), text)
    masked = _NOT_FACTS.sub(lambda m: " " * len(m.group(0)), masked)
    for m in _TOKEN.finditer(masked):
        token = _classify(m.group(0), m.start())
        if token is not None:
            found.append(token)
    return sorted(found, key=lambda t: t.start)


def _is_in(token: Token, text: str) -> bool:
    """Whether `text` holds the token, ignoring case, spaces and punctuation (an e-mail address: ignoring case)."""
    if token.kind == "email":
        return token.key in text.lower()
    return token.key in re.sub(r"[^a-z0-9]", "", text.lower())


# -- labels: what a fact is called, from the words before it ---------------------------------------------------

_LINKING = {"is", "are", "was", "were", "be", "ending", "ends", "in", "reads"}
_STOP = {
    "a", "an", "the", "your", "my", "you", "i", "me", "our", "their", "his", "her", "its", "it", "this", "that", "of",
    "on", "at", "to", "for", "from", "by", "with", "and", "or", "as", "want", "wants", "need", "needs", "have", "has",
    "had", "please", "cancel", "know", "say", "use", "here", "am", "s", "also", "about", "only", "two", "one", "in",
}  # fmt: skip
_GENERIC = {"number", "card", "account", "code", "reference", "request"}
_ALIASES = {"e-mail": "email", "emails": "email", "id": "number", "no": "number", "numbers": "number", "ids": "number"}


def _words(text: str) -> list[str]:
    return [_ALIASES.get(w, w) for w in re.findall(r"[a-z]+(?:-[a-z]+)?", text.lower())]


def _label(before: str) -> tuple[str, ...]:
    """The label of a fact from the text before it, within its clause: the word before it ("order #412", "booking
    4RATSN", "the last four digits of your SSN are 8425"), and the word before that where the first names only a kind
    of thing ("employee number", "savings account", "debit card")."""
    clause = re.split(r"[.;:,()!?\n\"]|\band\b", before)[-1]
    words = _words(clause)
    while words and words[-1] in _LINKING:
        words.pop()
    if not words or words[-1] in _STOP:
        return ()
    if words[-1] in _GENERIC and len(words) > 1 and words[-2] not in _STOP:
        return (words[-2], words[-1])
    return (words[-1],)


@dataclass(frozen=True)
class UserFact:
    """A fact the user has: its token and the labels it goes by in the known text."""

    token: Token
    labels: frozenset[tuple[str, ...]]


def user_facts(task: Task) -> list[UserFact]:
    """The facts of the task's user (instruction, persona, context), each with its labels, in order of appearance."""
    found: dict[str, tuple[Token, set[tuple[str, ...]]]] = {}
    for text in known_texts(task):
        for t in fact_tokens(text):
            label = ("email",) if t.kind == "email" else _label(text[: t.start])
            held = found.setdefault(t.key, (t, set()))
            if label:
                held[1].add(label)
    return [UserFact(t, frozenset(labels)) for t, labels in found.values()]


def known_texts(task: Task) -> list[str]:
    return [x for x in (task.instruction, task.user.persona, task.user.context) if x]


# -- the rules ---------------------------------------------------------------------------------------------------

_ASK_WORDS = {"what", "whats", "which"}
_GIVE_VERBS = {"provide", "share", "give", "tell", "confirm", "send", "spell", "enter", "type", "verify", "remind", "repeat"}
_ASK_PHRASES = re.compile(
    r"\b(?:may|can|could) i (?:have|get|ask for)\b|\bdo you (?:know|have|remember) (?:your|the)\b|\bi(?:'ll| will)? need (?:your|the)\b"
)
_WINDOW = 6  # words between the asking word and the label's last word
_ASKS_TO_MAKE_UP = re.compile(
    r"\b(?:choose|pick|make up|create|come up with|think of|invent|set up|select|decide on)\b|\bnew (?:pin|password|passcode|code|number)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Fault:
    kind: str
    detail: str


def _asks_for(sentence: str, fact: UserFact) -> bool:
    words = _words(sentence.replace("'", ""))
    if "else" in words or _is_in(fact.token, sentence):
        return False
    phrase = _ASK_PHRASES.search(sentence.lower().replace("\u2019", "'"))
    anchors = [i for i, w in enumerate(words) if w in _ASK_WORDS]
    anchors += [i for i, w in enumerate(words) if w in _GIVE_VERBS and ("you" in words[max(0, i - 3) : i] or i == 0 or words[i - 1] == "please")]
    if phrase is not None:
        anchors.append(len(_words(sentence[: phrase.start()].replace("'", ""))))
    for label in fact.labels:
        if not set(label) <= set(words):
            continue
        ends = [i for i, w in enumerate(words) if w == label[-1]]
        if any(0 <= e - a <= _WINDOW for a in anchors for e in ends):
            return True
    return False


def _requests(text: str) -> list[str]:
    """The sentences of an agent message that ask something: questions, and requests that start with "please"."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]
    return [s for s in sentences if s.rstrip("\"')] ").endswith("?") or s.lower().startswith("please")]


def find_fault(task: Task, conversation: list[dict[str, Any]], reply: str | None, facts: list[UserFact] | None = None) -> Fault | None:
    """The first rule an LLM user's `reply` (None: it ended the conversation) to `conversation` breaks, or None."""
    facts = user_facts(task) if facts is None else facts
    turns = delivered_turns(conversation)
    if reply is None:
        last = turns[-1] if turns else None
        if last is None or last[0] != "assistant":
            return None
        for sentence in _requests(last[1]):
            for fact in facts:
                if fact.labels and _asks_for(sentence, fact):
                    return Fault("premature_stop", f"the user ended the conversation when the agent asked for its {_name(fact)} ({sentence[:160]!r})")
        return None
    if turns and turns[-1][0] == "assistant" and _ASKS_TO_MAKE_UP.search(turns[-1][1]):
        return None  # "please choose a new 6-digit PIN": the value is the user's to invent
    seen = "\n".join(known_texts(task) + [text for _, text in turns])
    for token in fact_tokens(reply):
        if _is_in(token, seen):
            continue
        # of the same kind: any other e-mail address; a code, reference or number of the same shape
        same = [f for f in facts if f.token.kind == token.kind and (token.kind == "email" or f.token.shape == token.shape)]
        if same:
            own = max(same, key=lambda f: difflib.SequenceMatcher(None, f.token.key, token.key).ratio())
            return Fault(
                "contradicted_fact",
                f"the reply gives {token.text}, which the user never saw; its own {_name(own)} is {own.token.text} ({reply[:160]!r})",
            )
        return Fault(
            "invented_fact", f"the reply gives {token.text}, which is neither in the user's instructions nor in the conversation ({reply[:160]!r})"
        )
    return None


def _name(fact: UserFact) -> str:
    """What a fact is called: its longest label ("employee number"), else its kind."""
    if fact.labels:
        return " ".join(max(sorted(fact.labels), key=len))
    return {"email": "e-mail address", "ref": "reference", "number": "number", "code": "code"}[fact.token.kind]


class UserAudit:
    """The audit of one task's LLM user: its facts, read once, and `check` for each reply.

    A reply that invents or contradicts a fact raises at once. Ending the conversation when asked for a fact is only
    noted (`early_stop`): it is the user's fault only if the task was left undone, which the final state decides
    (`attempt.play` makes a failing attempt with an early stop a system error, and keeps a passing one: an agent that had
    finished and then asked "which other order can I help with?" is not failed by the customer leaving)."""

    def __init__(self, task: Task):
        self.task = task
        self.facts = user_facts(task)
        self.early_stop: Fault | None = None

    def check(self, conversation: list[dict[str, Any]], reply: str | None) -> None:
        """Raise `UserSimulatorFault` when `reply` to `conversation` invents or contradicts a fact; note an early stop."""
        fault = find_fault(self.task, conversation, reply, self.facts)
        if fault is not None and fault.kind == "premature_stop":
            self.early_stop = self.early_stop or fault
        elif fault is not None:
            raise UserSimulatorFault(fault.kind, fault.detail, reply)


class AuditedUser:
    """A user simulator whose every reply passes `audit` before the episode sees it (a fault raises `UserSimulatorFault`)."""

    def __init__(self, inner: UserSimulator, audit: UserAudit):
        self.inner, self.audit = inner, audit

    async def reply(self, conversation: list[dict[str, Any]]) -> str | None:
        reply = await self.inner.reply(conversation)
        self.audit.check(conversation, reply)
        return reply
