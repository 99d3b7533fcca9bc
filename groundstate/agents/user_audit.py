"""The user-turn audit: each reply of an LLM user checked against what its persona knows, so that a simulator that
invents a fact, contradicts one, floods or walks away, unprovoked, is a *user-simulator fault*, recorded as a system
error (retried by `--repair`), never scored as the agent's 0.

What the user knows is its task's instruction, persona and context; what it has seen is that and every text turn
delivered to it (`base.delivered_turns`): a value the agent told it is the user's to repeat. Facts are the fact-like
tokens of a text (`fact_tokens`): e-mail addresses; codes that mix letters and digits (E10181, ORD-1234, 4RATSN);
numbers written as references (#412); and numbers of five or more digits (a routing number, 555-0123) that are not a
date, a time, an amount, a percentage, a ZIP+4 or a quantity ("15000 miles"); four digits are too often a time, an
amount or a street number. A reply to an agent message that asks the user to make a value up (a new PIN, a password
to choose) states nothing the user should have known: its tokens are never a fault.

The findings (the first that holds):
- `contradicted_fact`: the reply states a fact it never saw that has the form of one of its own facts: another
  e-mail where it has one, a code or number of the same shape (E10182 where it has E10181, #413 where it has #412);
- `invented_fact`: the reply states any other fact it never saw (a phone number its persona does not have);
- `premature_stop`: the user ends the conversation in answer to an agent message asking for one of its facts: a
  question (or a "please give ..." request) that names the fact's label, the words before the fact in the known text
  ("employee number" in "your employee number is E10181"; every e-mail is an "email"), next to an asking word
  (what, which, could you provide / tell / confirm ..., may I have), and does not state the value itself;
- `overlong_reply`: a reply longer than `types.MAX_REPLY_CHARS` (`refuse_overlong`), or one the user model did not
  finish within its token budget (`openai_compat.USER_MAX_TOKENS`, sent as its `max_completion_tokens`).

A finding is a user fault only where the agent cannot have provoked it (`provocation`); otherwise it is provoked
(`Fault.provoked`): the reply goes on to the agent (a flood goes nowhere: the conversation ends) and the attempt is
graded as it stands, with a note, so `--repair`, which re-runs system errors only, never re-rolls it. A failing policy could
otherwise buy a new draw whenever it liked, by asking for what the persona lacks in any words ("Kindly share your phone
number.": the obliging reply is an invented fact), by claiming success and asking a question (the user leaves), or by
asking for a flood ("Please type 'ok' 40,000 times."): over several repairs, best-of-n. The rule is a whitelist, never a
list of asking words: the agent cannot have provoked a finding when every message it has delivered to the user is
*plain* (`_plain`): short, and made only of greetings and thanks, offers of help ("How can I help you today?";
"Anything else?", but not before a stop: it says the request is handled), and plain asks for facts of the user's own
("Could you confirm your work email address, please?": an opener, "your", and only the words the known text names that
fact by). After plain messages, a fact the user gives unasked, one of its own it misstates, a flood and walking away
from a fair ask are its faults; after anything else ("Tell me the phone number on your file.", "Your request went
through.", "What's your employee number at your previous job?", a claim in an earlier message) they are the agent's
risk. Earlier messages count because they can set the user up ("answer as your manager would"), and asking again for a
fact the user has already given provokes its leaving. Floods are judged by the same rule, not by words that ask for
repetition (which a list would miss); the user model's budget makes them rare. The price: with an agent that chats,
most findings are graded as the agent's, and a genuine simulator fault then counts against the agent; the audit's notes
in the verdicts' reasons show how often. `--no-user-audit` judges nothing: every flood is a system error.

Conservative by design: a false fault turns an agent's failure into a repairable system error and biases pass rates
up, so only clear cases are flagged, and a wording the rules cannot place is the agent's risk. Short numbers (days,
counts, "order 12"), dates in any usual form, times, amounts, years, ordinals, quantities and product names in mixed
case (iPhone15) are never facts; a fact counts as seen when it appears anywhere in what the user saw once case, spaces
and punctuation are ignored (E-10181, e10181 and "E 10181" are one fact); "Is there anything else ...?" never asks
for a fact. Scripted users are not audited: their replies are the task's own. Every pattern reads a text in time
linear in its length, whatever it holds: a hostile reply and agent message of `MAX_REPLY_CHARS` each are read in well
under a second (the e-mail pattern was quadratic: 40,000 characters took 20 s).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import Any

from groundstate.agents.base import delivered_turns
from groundstate.tasks import Task
from groundstate.types import MAX_REPLY_CHARS, FaultKind, UserSimulator, UserTools

FAULT_PREFIX = "user-simulator fault"


class UserSimulatorFault(RuntimeError):
    """An LLM user's reply broke its persona (`find_fault`, unprovoked) or flooded (`refuse_overlong`): the attempt is a
    system error whose text starts with `user-simulator fault (KIND):`, so `--repair` plays it again; the reply is never
    written to a user cache."""

    def __init__(self, kind: FaultKind, detail: str, reply: str | None = None):
        super().__init__(f"{FAULT_PREFIX} ({kind}): {detail}")
        self.kind, self.detail, self.reply = kind, detail, reply


# -- fact-like tokens ------------------------------------------------------------------------------------------

# An e-mail address is read from its '@' (`_emails`), never by a pattern that may start at every character of a long run
# of address characters: that was quadratic (40,000 characters took 20 s, a 30 MB reply hours).
_LOCAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
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
            # an amount starts where a run of digits and commas starts (a start inside "1,1,1,..." would rescan it: quadratic)
            r"(?<![\d,])\b\d[\d,]*(?:\.\d+)?\s?(?:[$€£¥]|(?:usd|eur|gbp)\b)",  # 1500€, 40 USD
            r"(?<![\d,])\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b",  # 1,500 and 1,500.00
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


def _emails(text: str) -> list[tuple[int, int]]:
    """The spans of the e-mail addresses in `text`, leftmost first and not overlapping, in time linear in its length:
    from each '@' back over the address characters (never past the last address found) and forward over a domain."""
    spans: list[tuple[int, int]] = []
    done, at = 0, text.find("@")
    while at != -1:
        start = at
        while start > done and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        domain = _DOMAIN.match(text, at + 1) if start < at else None
        if domain is not None:
            spans.append((start, domain.end()))
            done = domain.end()
        at = text.find("@", max(at + 1, done))
    return spans


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    parts, last = [], 0
    for start, end in spans:
        parts += [text[last:start], " " * (end - start)]
        last = end
    return "".join(parts) + text[last:]


def fact_tokens(text: str) -> list[Token]:
    """The fact-like tokens of `text`, in order (see the module docstring for what is and is not one), in time linear in
    its length whatever it holds."""
    emails = _emails(text)
    found = [Token(text[a:b], text[a:b].lower(), "email", text[a:b].lower().rpartition("@")[2], a) for a, b in emails]
    masked = _NOT_FACTS.sub(lambda m: " " * len(m.group(0)), _blank(text, emails))
    for m in _TOKEN.finditer(masked):
        token = _classify(m.group(0), m.start())
        if token is not None:
            found.append(token)
    return sorted(found, key=lambda t: t.start)


def _is_in(token: Token, text: str) -> bool:
    """Whether `text` holds the token, ignoring case, spaces and punctuation (an e-mail address: ignoring case)."""
    return _Seen(text).holds(token)


class _Seen:
    """A text prepared once for many `holds` questions (what the user saw, against every token of a reply): lower-cased,
    and without anything but letters and digits; each key is looked up once."""

    def __init__(self, text: str):
        self.lower = text.lower()
        self.squashed = re.sub(r"[^a-z0-9]+", "", self.lower)
        self._known: dict[tuple[bool, str], bool] = {}

    def holds(self, token: Token) -> bool:
        key = (token.kind == "email", token.key)
        if key not in self._known:
            self._known[key] = token.key in (self.lower if token.kind == "email" else self.squashed)
        return self._known[key]


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


def _own_words(before: str, label: tuple[str, ...]) -> set[str]:
    """The words the known text names a fact of the user's own by: its label, and the words between "your" (or "my")
    and the fact in its clause ("work" in "Your work email is ...")."""
    words = _words(re.split(r"[.;:,()!?\n\"]|\band\b", before)[-1])
    owner = max((i for i, w in enumerate(words) if w in ("your", "my")), default=None)
    named = {w for w in words[owner + 1 :] if w not in _STOP and w not in _LINKING} if owner is not None else set()
    return named | set(label)


@dataclass(frozen=True)
class UserFact:
    """A fact the user has: its token, the labels it goes by in the known text, and the words a plain ask may name it by
    (`words`: its labels' and the known text's own, as in "your work email")."""

    token: Token
    labels: frozenset[tuple[str, ...]]
    words: frozenset[str] = frozenset()


def user_facts(task: Task) -> list[UserFact]:
    """The facts of the task's user (instruction, persona, context), each with its labels, in order of appearance."""
    found: dict[str, tuple[Token, set[tuple[str, ...]], set[str]]] = {}
    for text in known_texts(task):
        for t in fact_tokens(text):
            label = ("email",) if t.kind == "email" else _label(text[: t.start])
            held = found.setdefault(t.key, (t, set(), set()))
            if label:
                held[1].add(label)
                held[2].update(_own_words(text[: t.start], label))
    return [UserFact(t, frozenset(labels), frozenset(words)) for t, labels, words in found.values()]


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
# What a plain message is made of (`_plain`): nothing else is, so an unforeseen wording is the agent's risk, never a re-roll.
_POLITE = r"(?:hi|hello|hey|good (?:morning|afternoon|evening))(?: there)?|thanks|thank you(?: (?:so|very) much)?|sure|certainly|of course|okay|ok|great|got it|understood|no problem|absolutely"
_HELP = r"(?:i'd be |i would be |i'll be |i will be |i'm |i am )?(?:happy|glad) to help(?: you)?(?: with that)?|i can help(?: you)? with that"
_OFFER = r"how (?:can|may|could) i (?:help|assist)(?: you)?(?: today)?|what can i do for you(?: today)?"
# "anything else?" says the request is handled: plain before a fact the user gives, not before the user leaving
_ELSE = r"(?:is there )?anything else(?: (?:i|we) can (?:help you with|assist you with|help with|do for you))?(?: today)?"
_GIVE = r"(?:confirm|provide|give me|tell me|share|send me|send|spell|type|enter)"
_OPENER = (
    rf"what is|what's|what are|(?:could|can|would) you (?:please )?(?:also )?{_GIVE}|(?:please )?(?:also )?{_GIVE}|"
    r"(?:may|can|could) i (?:please )?(?:also )?(?:have|get|ask for)|i(?:'ll| will)? (?:also )?need"
)
_SENTENCE = re.compile(
    rf"(?:(?:{_POLITE})[,!.]? )*(?:{_POLITE}|{_HELP}|{_OFFER}|(?P<done>{_ELSE})|(?:{_OPENER}) your (?P<asked>[a-z', -]+?)(?:,? please)?)[.!?]*"
)
_PLAIN_CHARS = 600  # a plain message is short: a longer one is not read, and not plain
_KIND_WORDS = frozenset({"number", "address", "reference", "code"})  # "your employee ID", "your email address"


def _owns(asked: str, facts: list[UserFact]) -> bool:
    """Whether `asked` ("work email address and your employee ID") names only facts of the user's own, each by its own
    words and all of some label of it ("email"; "employee number", not "number" alone)."""
    for part in re.split(r",? and (?:your )?|, (?:your )?", asked):
        words = set(_words(part))
        if not any(words <= f.words | _KIND_WORDS and any(set(label) <= words for label in f.labels) for f in facts):
            return False
    return True


def _plain(message: str, facts: list[UserFact], leaving: bool = False) -> bool:
    """Whether an agent message is plain: short, and each of its sentences a greeting or thanks, an offer of help ("How
    can I help you today?"; "Anything else?" unless the user is `leaving`), or a plain ask for facts of the user's own
    ("Could you confirm your work email address, please?"). Nothing plain claims anything, asks anything else, names a
    value or another one's fact."""
    if len(message) > _PLAIN_CHARS:
        return False
    text = re.sub(r"\s+", " ", message.lower().replace("\u2019", "'")).strip()
    for sentence in filter(None, re.split(r"(?<=[.!?]) ", text)):
        m = _SENTENCE.fullmatch(sentence)
        if m is None or (leaving and m.group("done") is not None) or (m.group("asked") is not None and not _owns(m.group("asked"), facts)):
            return False
    return True


def provocation(conversation: list[dict[str, Any]], facts: list[UserFact], leaving: bool = False) -> str | None:
    """What the agent said that may have provoked a finding in the user's next reply (`leaving`: the user ended the
    conversation), in words; None when every message it has delivered to the user is plain (`_plain`). Earlier
    messages count too: "answer as your manager would" sets up the user for a plain "What is your employee number?"."""
    said = [text for role, text in delivered_turns(conversation) if role == "assistant"]
    for n, text in enumerate(reversed(said)):
        if not _plain(text, facts, leaving):
            which = "the agent's message" if n == 0 else "an earlier message of the agent"
            return f"{which} {_shown(text, 160)!r} is more than a greeting, an offer of help or a plain ask for the user's own facts"
    return None


@dataclass(frozen=True)
class Fault:
    """A broken rule: its kind and what the reply did; `provoked`, when the agent may have provoked it (what it said, in
    words: `provocation`): then it is no user fault, and the attempt is graded as it stands."""

    kind: str
    detail: str
    provoked: str | None = None


def _sentence_words(sentence: str) -> list[str]:
    return _words(sentence.replace("'", "").replace("\u2019", ""))


def _anchors(sentence: str, words: list[str]) -> list[int]:
    """Where a sentence asks the user for something: an asking word (what, which), a giving verb addressed to the user
    ("could you confirm", "please provide"), an asking phrase ("may I have")."""
    anchors = [i for i, w in enumerate(words) if w in _ASK_WORDS]
    anchors += [i for i, w in enumerate(words) if w in _GIVE_VERBS and ("you" in words[max(0, i - 3) : i] or i == 0 or words[i - 1] == "please")]
    phrase = _ASK_PHRASES.search(sentence.lower().replace("\u2019", "'"))
    if phrase is not None:
        anchors.append(len(_sentence_words(sentence[: phrase.start()])))
    return anchors


def _asks_for(sentence: str, fact: UserFact) -> bool:
    words = _sentence_words(sentence)
    if "else" in words or _is_in(fact.token, sentence):
        return False
    anchors, present = set(_anchors(sentence, words)), set(words)
    for label in fact.labels:
        if not set(label) <= present:
            continue
        ends = [i for i, w in enumerate(words) if w == label[-1]]
        if any(e - d in anchors for e in ends for d in range(_WINDOW + 1)):
            return True
    return False


def _requests(text: str) -> list[str]:
    """The sentences of an agent message that ask something: questions, and requests that start with "please"."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]
    return [s for s in sentences if s.rstrip("\"')] ").endswith("?") or s.lower().startswith("please")]


def _stop(turns: list[tuple[str, str]], facts: list[UserFact]) -> Fault | None:
    """The premature stop of a user that ended the conversation after the agent's last message asked for one of its
    facts, or None (provoked unless every message of the agent was plain and the fact was not given already)."""
    asked = turns[-1][1]
    wanted = [(sentence, fact) for sentence in _requests(asked) for fact in facts if fact.labels and _asks_for(sentence, fact)]
    if not wanted:
        return None
    said = "\n".join(text for role, text in turns if role == "user")
    fresh = [(sentence, fact) for sentence, fact in wanted if not _is_in(fact.token, said)]
    sentence, fact = (fresh or wanted)[0]
    fault = Fault("premature_stop", f"the user ended the conversation when the agent asked for its {_name(fact)} ({sentence[:160]!r})")
    if not fresh:
        return replace(fault, provoked=f"the user had already given its {_name(fact)} ({fact.token.text}), and the agent asked for it again")
    return fault


def find_fault(task: Task, conversation: list[dict[str, Any]], reply: str | None, facts: list[UserFact] | None = None) -> Fault | None:
    """The first rule an LLM user's `reply` (None: it ended the conversation) to `conversation` breaks, or None; a
    finding the agent may have provoked has `provoked` set (`provocation`; see the module docstring)."""
    facts = user_facts(task) if facts is None else facts
    turns = delivered_turns(conversation)
    asked = turns[-1][1] if turns and turns[-1][0] == "assistant" else None
    if reply is None:
        fault = _stop(turns, facts) if asked is not None else None
    elif asked is not None and _ASKS_TO_MAKE_UP.search(asked):
        return None  # "please choose a new 6-digit PIN": the value is the user's to invent
    else:
        fault = _fact_fault(task, turns, reply, facts)
    if fault is None or fault.provoked is not None:
        return fault
    why = provocation(conversation, facts, leaving=reply is None)
    return fault if why is None else replace(fault, provoked=why)


def _fact_fault(task: Task, turns: list[tuple[str, str]], reply: str, facts: list[UserFact]) -> Fault | None:
    """The first fact of `reply` the user never saw, as the fault it is (`contradicted_fact`, `invented_fact`), or None."""
    seen = _Seen("\n".join(known_texts(task) + [text for _, text in turns]))
    for token in fact_tokens(reply):
        if seen.holds(token):
            continue
        # of the same kind: any other e-mail address; a code, reference or number of the same shape
        same = [f for f in facts if f.token.kind == token.kind and (token.kind == "email" or f.token.shape == token.shape)]
        if same:
            own = max(same, key=lambda f: difflib.SequenceMatcher(None, f.token.key, token.key).ratio())
            return Fault(
                "contradicted_fact",
                f"the reply gives {_shown(token.text)}, which the user never saw; its own {_name(own)} is {own.token.text} ({reply[:160]!r})",
            )
        return Fault(
            "invented_fact",
            f"the reply gives {_shown(token.text)}, which is neither in the user's instructions nor in the conversation ({reply[:160]!r})",
        )
    return None


def _shown(text: str, most: int = 80) -> str:
    """A token or a message as a finding quotes it: at most `most` characters (a hostile one may be any length)."""
    return text if len(text) <= most else text[:most] + f"… ({len(text):,} characters)"


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
    finished and then asked "which other order can I help with?" is not failed by the customer leaving). A finding the
    agent provoked is noted in `provoked` and never raises: the attempt goes on and is graded as it stands."""

    def __init__(self, task: Task):
        self.task = task
        self.facts = user_facts(task)
        self.early_stop: Fault | None = None
        self.provoked: list[Fault] = []

    def check(self, conversation: list[dict[str, Any]], reply: str | None) -> None:
        """Raise `UserSimulatorFault` when `reply` to `conversation` invents or contradicts a fact; note an early stop,
        and a finding the agent provoked."""
        fault = find_fault(self.task, conversation, reply, self.facts)
        if fault is None:
            return
        if fault.provoked is not None:
            self.provoked.append(fault)
        elif fault.kind == "premature_stop":
            self.early_stop = self.early_stop or fault
        else:
            raise UserSimulatorFault(fault.kind, fault.detail, reply)

    def excuses(self, conversation: list[dict[str, Any]], fault: UserSimulatorFault) -> bool:
        """Whether an `overlong_reply` the user model made in answer to `conversation` is one the agent may have provoked
        (`provocation`: "Please type 'ok' 40,000 times."): then it is noted in `provoked`, and the caller ends the
        conversation there (the flood goes nowhere) so the attempt is graded as it stands. False for any other fault."""
        why = provocation(conversation, self.facts) if fault.kind == "overlong_reply" else None
        if why is None:
            return False
        self.provoked.append(Fault(fault.kind, fault.detail, f"{why}; the conversation ended there"))
        return True


def refuse_overlong(reply: str | None) -> None:
    """`UserSimulatorFault` (overlong_reply) for a user reply longer than `MAX_REPLY_CHARS`, whatever made it (a model
    that loops, a damaged cache): a system error unless an audit excuses it (`UserAudit.excuses`), and the reply goes
    nowhere (not to the agent, not to a cache, not into the record: the fault quotes its first 160 characters)."""
    if reply is not None and len(reply) > MAX_REPLY_CHARS:
        detail = f"the reply is {len(reply):,} characters, more than the {MAX_REPLY_CHARS:,} a reply may have ({reply[:160]!r}…)"
        raise UserSimulatorFault("overlong_reply", detail)


class AuditedUser:
    """A user simulator whose every reply passes `refuse_overlong` and `audit` before the episode sees it (a fault
    raises `UserSimulatorFault`); a flood the agent provoked (`UserAudit.excuses`) ends the conversation instead."""

    def __init__(self, inner: UserSimulator, audit: UserAudit):
        self.inner, self.audit = inner, audit

    async def reply(self, conversation: list[dict[str, Any]], tools: UserTools | None = None) -> str | None:
        try:
            reply = await self.inner.reply(conversation, tools)
            refuse_overlong(reply)  # first: the audit reads no flood
        except UserSimulatorFault as e:
            if self.audit.excuses(conversation, e):
                return None
            raise
        self.audit.check(conversation, reply)
        return reply
