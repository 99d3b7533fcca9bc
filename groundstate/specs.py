"""Agent, user and judge specs: the text that names each (on the command line, in a config, in a record), parsed once,
here, into frozen typed values that everything downstream takes.

- agent: `scripted:gold`, `scripted:noop`, `scripted:noisy:P` (0 ≤ P ≤ 1), `openai:MODEL[@URL]` (an OpenAI-compatible
  endpoint) or `hf:PATH` (a Hugging Face model folder or hub id);
- user: `scripted` (the task's script; `scripted:task` says the same) or `openai:MODEL[@URL]` (an LLM playing the persona);
- judge: `openai:MODEL[@URL]`, or no judge (`none`, in any case, or "").

Each `parse_*` raises a one-line `ValueError` naming the spec and what is wrong, and returns a value it is given already
parsed as it is (so a library function may take either). `str(spec)` is the text the spec was parsed from, unchanged:
records and a run's identity keep it exactly, so a run resumed with the same text is the same run. Syntax only: whether
an `hf:` folder holds a model is `agents.check_agent_spec`'s question, whether an endpoint answers
`agents.openai_compat.probe_endpoint`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

AgentKind = Literal["scripted", "openai", "hf"]
Script = Literal["gold", "noop", "noisy"]
UserKind = Literal["scripted", "openai"]
JudgeKind = Literal["openai", "none"]

AGENT_SPECS = "scripted:gold|noop|noisy:P, openai:MODEL[@URL] or hf:PATH"
USER_SPECS = "scripted, scripted:gold or openai:MODEL[@URL]"

# a URL given without its scheme: it would silently become part of the model name, and the requests go to the official API
_SCHEMELESS_URL = re.compile(r"(localhost|[\w.-]+:\d+|\d+\.\d+\.\d+\.\d+)([:/]|$)")


class Endpoint(NamedTuple):
    """An OpenAI-compatible endpoint (`openai:MODEL[@URL]`): the model, and the base URL, None for the client's default
    (`OPENAI_BASE_URL` when set, else the official API)."""

    model: str
    url: str | None = None


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """A parsed agent spec: `script` and `noise` (P of `noisy:P`) for `scripted`, `endpoint` for `openai`, `path` for `hf`."""

    kind: AgentKind
    text: str
    script: Script | None = None
    noise: float | None = None
    endpoint: Endpoint | None = None
    path: str | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def model_name(self) -> str:
        """The model as a record's `model` field and a price table name it: the endpoint's MODEL, the hf PATH, else the spec."""
        if self.endpoint is not None:
            return self.endpoint.model
        return self.path if self.path is not None else self.text


@dataclass(frozen=True, kw_only=True)
class UserSpec:
    """A parsed user spec: the task's script (`scripted`; `scripted:gold` also makes the user's own gold calls, where a
    world gives its users tools: τ²'s telecom), or an LLM user at `endpoint`."""

    kind: UserKind
    text: str
    endpoint: Endpoint | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def is_llm(self) -> bool:
        """An LLM user (audited, cacheable, sampled) rather than the task's script."""
        return self.kind == "openai"

    @property
    def gold(self) -> bool:
        """The gold user (`scripted:gold`): it makes the task's own user calls (`tasks.UserSpec.actions`) the first time
        the agent hands it the turn, whatever the agent said; the plain scripted user never acts on its own side."""
        return self.text == "scripted:gold"


@dataclass(frozen=True, kw_only=True)
class JudgeSpec:
    """A parsed judge spec: an LLM judge of reply rubrics at `endpoint`, or none (rubric tasks stay unjudged)."""

    kind: JudgeKind
    text: str
    endpoint: Endpoint | None = None

    def __str__(self) -> str:
        return self.text


def parse_endpoint(spec: str | Endpoint) -> Endpoint:
    """`openai:MODEL[@URL]` → its `Endpoint`. The URL is split off at the last `@` only when what follows is an http(s)
    URL, so model names may contain `@`; a server named without its scheme is refused rather than read as a model name."""
    if isinstance(spec, Endpoint):
        return spec
    kind, sep, rest = spec.partition(":")
    if kind != "openai" or not sep:
        raise ValueError(f"bad endpoint spec {spec!r}: expected openai:MODEL[@BASE_URL]")
    model, at, url = rest.rpartition("@")
    if at and not url.startswith(("http://", "https://")) and _SCHEMELESS_URL.match(url):
        raise ValueError(f"bad endpoint spec {spec!r}: the URL needs its scheme, e.g. openai:{model}@http://{url}")
    if not at or not url.startswith(("http://", "https://")):
        model, url = rest, ""
    model = model.strip()
    if not model:
        raise ValueError(f"bad endpoint spec {spec!r}: the model name is empty")
    return Endpoint(model, url.strip() or None)


def parse_agent(spec: str | AgentSpec) -> AgentSpec:
    """An agent spec: `scripted:gold|noop|noisy:P`, `openai:MODEL[@URL]` or `hf:PATH`."""
    if isinstance(spec, AgentSpec):
        return spec
    kind, sep, rest = spec.partition(":")
    if kind == "scripted" and sep:
        script, noise = _parse_script(spec, rest)
        return AgentSpec(kind="scripted", text=spec, script=script, noise=noise)
    if kind == "openai" and sep:
        return AgentSpec(kind="openai", text=spec, endpoint=parse_endpoint(spec))
    if kind == "hf" and sep:
        if not rest.strip():
            raise ValueError(f"bad agent spec {spec!r}: no model given (a Hugging Face model folder or a hub id)")
        return AgentSpec(kind="hf", text=spec, path=rest)
    hint = f" (did you mean scripted:{spec}?)" if spec in ("gold", "noop") or spec.startswith("noisy") else ""
    hint = " (openai needs its model: openai:MODEL[@URL])" if spec == "openai" else " (hf needs its folder: hf:PATH)" if spec == "hf" else hint
    raise ValueError(f"unknown agent spec {spec!r}: use {AGENT_SPECS}{hint}")


def _parse_script(spec: str, script: str) -> tuple[Script, float | None]:
    """(`gold`|`noop`|`noisy`, P or None) of a scripted agent's part after `scripted:`."""
    if script == "gold" or script == "noop":
        return script, None
    if script.startswith("noisy:"):
        try:
            p = float(script.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad agent spec {spec!r}: noisy:P needs a probability, e.g. scripted:noisy:0.3") from None
        if not 0 <= p <= 1:  # also NaN
            raise ValueError(f"bad agent spec {spec!r}: P must be in [0, 1]")
        return "noisy", p
    hint = " (noisy needs its probability: scripted:noisy:0.3)" if script == "noisy" else ""
    raise ValueError(f"unknown agent spec {spec!r}: use scripted:gold, scripted:noop or scripted:noisy:P{hint}")


def parse_user(spec: str | UserSpec) -> UserSpec:
    """A user spec: `scripted` (or `scripted:task`), `scripted:gold` or `openai:MODEL[@URL]`."""
    if isinstance(spec, UserSpec):
        return spec
    if spec in ("scripted", "scripted:task", "scripted:gold"):
        return UserSpec(kind="scripted", text=spec)
    if spec.startswith("openai:"):
        return UserSpec(kind="openai", text=spec, endpoint=parse_endpoint(spec))
    raise ValueError(f"unknown user spec {spec!r}: use {USER_SPECS}")


def parse_judge(spec: str | JudgeSpec) -> JudgeSpec:
    """A judge spec: `openai:MODEL[@URL]`, or none (`none` in any case, or "")."""
    if isinstance(spec, JudgeSpec):
        return spec
    if spec.strip().lower() in ("", "none"):
        return JudgeSpec(kind="none", text=spec)
    return JudgeSpec(kind="openai", text=spec, endpoint=parse_endpoint(spec))
