"""The user-turn audit: each rule fires on a clear case and stays quiet on legitimate replies (a value the agent told
the user, the instruction's own dates and amounts, "I don't know", a goodbye after "anything else?")."""

from __future__ import annotations

import asyncio
import json

import pytest

from groundstate.agents import ScriptedUser, make_user
from groundstate.agents.openai_compat import OpenAIUser
from groundstate.agents.user_audit import (
    FAULT_PREFIX,
    AuditedUser,
    UserAudit,
    UserSimulatorFault,
    fact_tokens,
    find_fault,
    user_facts,
)
from groundstate.worlds.attempt import error_kind
from groundstate.worlds.domain import iter_tasks, load_domain


@pytest.fixture(scope="module")
def leave():
    """hr-book-annual-leave-001: "Your work email is mei.garcia@brightwater.example and your employee number is E10181.
    You want annual leave from Monday, July 6, 2026 to Friday, July 10, 2026 ..."."""
    return load_domain("hr").task("hr-book-annual-leave-001")


def said(task, *agent_messages: str) -> list[dict]:
    """A conversation: the instruction, then the agent's messages (each answered by "OK." but the last)."""
    conv = [{"role": "system", "content": "the domain's policy"}, {"role": "user", "content": task.instruction}]
    for i, text in enumerate(agent_messages):
        conv.append({"role": "assistant", "content": text})
        if i < len(agent_messages) - 1:
            conv.append({"role": "user", "content": "OK."})
    return conv


def test_the_task_facts_and_their_labels(leave):
    assert "E10181" in leave.user.context and "mei.garcia@brightwater.example" in leave.user.context
    facts = {f.token.text: f for f in user_facts(leave)}
    assert set(facts) == {"E10181", "mei.garcia@brightwater.example"}  # no date, year or day of the month
    assert ("employee", "number") in facts["E10181"].labels and facts["mei.garcia@brightwater.example"].labels == {("email",)}


@pytest.mark.parametrize(
    "reply",
    [
        "Sure, it's E10181.",
        "My employee number is e-10181 and my email is MEI.GARCIA@brightwater.example.",
        "E 10181",
        "From July 6 to July 10, 2026, so 5 working days.",
        "2026-07-06 to 2026-07-10, i.e. 07/06/2026 to 07/10/2026.",
        "I've been here since 2019 and this is my 3rd request this year.",
        "It cost about $1,500.00, or 1,500 dollars, roughly 1500 USD.",
        "Around 10:30am, or maybe 3 pm.",
        "About 15% of my allowance, 12.5 days left.",
        "I don't know my manager's employee number, sorry.",
        "My iPhone15 calendar shows it, and the trip is 1500 miles.",
        "Thanks, that's all. Maybe 10-12 people are off that week.",
        # what a hostile review found flagged before (dates, times and amounts in other shapes, four-digit numbers)
        "It was placed on 15-06-2026, or 06-15-2026 as my bank writes it.",
        "It arrived on 2026-06-06T10:00.",
        "Around 14h30, or about 1030 this morning.",
        "I paid 1500€ for it; it cost 1299 in the end, so 1200 back to my card.",
        "Ship it to 68199-1234.",
    ],
)
def test_legitimate_replies_are_not_faults(leave, reply):
    assert find_fault(leave, said(leave, "Could you confirm your employee number and the dates?"), reply) is None


def test_a_value_the_agent_told_the_user_is_the_users_to_repeat(leave):
    told = said(leave, "Your request is LR-20931 and HR will call you on 555-0123. Anything to add?")
    assert find_fault(leave, told, "Great, so LR-20931 it is, and 555 0123 is the number to expect.") is None
    fault = find_fault(leave, said(leave, "Anything to add?"), "Great, so LR-20931 it is.")
    assert fault is not None and fault.kind == "invented_fact" and "LR-20931" in fault.detail


@pytest.mark.parametrize(
    "reply, invented",
    [
        ("You can call me on 555-0199.", "555-0199"),
        ("It is about order ORD-4412.", "ORD-4412"),
        ("My ticket is #5513.", "#5513"),
        ("The account is 99881.", "99881"),
    ],
)
def test_a_fact_the_user_never_had_is_invented(leave, reply, invented):
    fault = find_fault(leave, said(leave, "How can I help?"), reply)
    assert fault is not None and fault.kind == "invented_fact" and invented in fault.detail


@pytest.mark.parametrize(
    "reply, given, own",
    [
        ("My employee number is E10182.", "E10182", "employee number is E10181"),
        ("Use mei.garcia@gmail.com please.", "mei.garcia@gmail.com", "email is mei.garcia@brightwater.example"),
    ],
)
def test_a_fact_of_the_same_kind_as_one_of_the_users_contradicts_it(leave, reply, given, own):
    fault = find_fault(leave, said(leave, "What is your employee number?"), reply)
    assert fault is not None and fault.kind == "contradicted_fact"
    assert given in fault.detail and own in fault.detail


def test_a_reference_of_the_same_shape_contradicts_the_users_own():
    task = load_domain("retail").task(next(t.id for t in load_domain("retail").tasks if "#" in (t.user.context or "")))
    (ref,) = [f.token for f in user_facts(task) if f.token.kind == "ref"][:1]
    other = "#" + str(int(ref.key) + 1).zfill(len(ref.key))
    fault = find_fault(task, said(task, "Which order is it?"), f"It is order {other}.")
    assert fault is not None and fault.kind == "contradicted_fact" and ref.text in fault.detail


@pytest.mark.parametrize(
    "agent, provoked",
    [
        ("Thanks. Could you confirm your work email address?", False),
        ("May I have your email, please?", False),
        ("Please send me your e-mail.", False),
        ("Sure, could you confirm your work email address, please?", False),
        # more than a plain ask: what it adds is the agent's doing (here harmless; the audit does not read intent)
        ("Please send me your e-mail so I can look you up.", True),
        # the employee number is in the user's opening message: asking for it again is the agent's doing
        ("What is your employee number?", True),
        ("May I have your employee ID, please?", True),
    ],
)
def test_ending_the_conversation_when_asked_for_a_fact_is_a_premature_stop(leave, agent, provoked):
    fault = find_fault(leave, said(leave, agent), None)
    assert fault is not None and fault.kind == "premature_stop" and bool(fault.provoked) == provoked, fault


@pytest.mark.parametrize(
    "agent",
    [
        "Your leave from July 6 to July 10 is booked. Is there anything else I can help with?",
        "Done! Enjoy the move.",
        "Shall I go ahead and submit the request?",
        "Would you like me to file it under employee number E10181?",  # states the value: not asking for it
        "I have sent the confirmation to your email. Is that all?",
        "What would you like me to do with your old employee record number after the move?",
        "I cannot book leave that overlaps a blackout period, sorry.",
    ],
)
def test_ending_the_conversation_otherwise_is_not_a_fault(leave, agent):
    assert find_fault(leave, said(leave, agent), None) is None


def test_a_stop_right_after_the_users_own_message_is_not_judged(leave):
    assert find_fault(leave, said(leave)[:2], None) is None


def test_the_bundled_tasks_own_user_replies_raise_no_fault():
    """Every scripted reply written for a bundled task (dates, amounts, ids in real phrasing), said after an agent that
    told the user what the task's world holds, is clean: the audit flags what no task author would write."""
    checked = 0
    for task, _ in iter_tasks(None):
        world = json.dumps(task.patch, default=str)
        conv = said(task, f"Here is what I found: {world}. What exactly would you like?")
        for line in task.user.script:
            assert find_fault(task, conv, line) is None, (task.id, line)
            conv += [{"role": "user", "content": line}, {"role": "assistant", "content": "Noted."}]
            checked += 1
        assert find_fault(task, conv + [{"role": "assistant", "content": "All done. Anything else I can do for you?"}], None) is None
    assert checked > 500


def test_fact_tokens_mask_dates_times_amounts_and_years():
    text = "On 2026-05-13 at 10:30 I paid $137.51 (1,234.50 in total, 15% off) for 3 items since 2017; ref #412, E10181, 4RATSN, 555-0123."
    assert [t.text for t in fact_tokens(text)] == ["#412", "E10181", "4RATSN", "555-0123"]
    assert [t.shape for t in fact_tokens(text)] == ["#999", "E99999", "9AAAAA", "999-9999"]


def test_a_fault_says_its_kind_in_its_type_and_its_text():
    e = UserSimulatorFault("premature_stop", "the user ended the conversation")
    assert str(e).startswith(f"{FAULT_PREFIX} (premature_stop): ") and e.kind == "premature_stop"
    assert error_kind(e) == "user_fault"


def test_llm_users_are_audited_by_default_and_scripted_users_never(leave):
    assert isinstance(make_user("scripted", leave), ScriptedUser)
    assert isinstance(make_user("openai:u@http://127.0.0.1:9/v1", leave), AuditedUser)
    assert isinstance(make_user("openai:u@http://127.0.0.1:9/v1", leave, audit=False), OpenAIUser)
    with pytest.raises(ValueError, match="LLM user"):
        make_user("scripted", leave, sampling={"temperature": 0.5})


def test_the_audited_user_raises_the_fault_of_a_bad_reply(leave):
    class Says:
        def __init__(self, reply):
            self.text = reply

        async def reply(self, conversation, tools=None):
            return self.text

    conv = said(leave, "What is your employee number?")
    assert asyncio.run(AuditedUser(Says("E10181"), UserAudit(leave)).reply(conv)) == "E10181"
    with pytest.raises(UserSimulatorFault) as e:
        asyncio.run(AuditedUser(Says("E10999"), UserAudit(leave)).reply(conv))
    assert e.value.kind == "contradicted_fact" and e.value.reply == "E10999"
    # ending the conversation when asked is noted, not raised: the final state decides (`attempt.play`)
    audit = UserAudit(leave)
    assert asyncio.run(AuditedUser(Says(None), audit).reply(said(leave, "What is your email address?"))) is None
    assert audit.early_stop is not None and audit.early_stop.kind == "premature_stop"


def test_a_value_the_agent_asks_the_user_to_make_up_is_never_a_fault(leave):
    for ask in ("Please make up a new 6-digit PIN.", "Choose a password for the portal, please.", "What new PIN would you like?"):
        assert find_fault(leave, said(leave, ask), "Let's use 492817 then, and E10999 as the label.") is None, ask


def test_an_early_stop_fails_only_an_attempt_whose_task_was_left_undone(leave):
    """Ending the conversation when asked for a fact is the user's fault only if the final state fails (`attempt.play`):
    an agent that finished and then asked "which other ... can I help with?" keeps its pass."""
    from groundstate.agents.scripted import ScriptedUser
    from groundstate.agents.user_cache import early_stop_fault
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.types import AgentTurn, ToolCallRequest
    from groundstate.worlds.attempt import play

    domain = load_domain("hr")

    class Agent:
        """The given calls, then a question asking for one of the user's facts that it has not given (its e-mail)."""

        def __init__(self, calls):
            self.calls = list(calls)

        async def act(self, conversation, tools):
            if self.calls:
                c = self.calls.pop(0)
                return AgentTurn(tool_calls=[ToolCallRequest(f"c{len(self.calls)}", c.tool, dict(c.args))])
            return AgentTurn(text="Could you confirm your work email address?")

    def user():
        return AuditedUser(ScriptedUser([]), UserAudit(leave))  # the script is empty: it ends the conversation at once

    done = asyncio.run(play(leave, domain, Agent(leave.gold), user(), backend=SqliteBackend()))
    assert done.verdict.system_error is None and done.verdict.state_reward == 1
    assert any("after the task was done" in r for r in done.verdict.reasons)
    undone = asyncio.run(play(leave, domain, Agent([]), user(), backend=SqliteBackend()))
    assert undone.verdict.system_error.startswith("user-simulator fault (premature_stop):"), undone.verdict
    assert "left undone by the user" in undone.verdict.system_error
    assert early_stop_fault(ScriptedUser([])) is None


# -- a finding the agent's own message provoked is not the user's fault (#32 item 7) -----------------------------


@pytest.mark.parametrize(
    "agent, reply",
    [
        ("What is the phone number on your file?", "Sure, it is 555-0199."),
        ("Could you give me your other email address?", "Use mei.garcia@gmail.com."),
        ("What is your manager's employee number?", "I think it is E10999."),
        ("Please provide your home address, including the ZIP code.", "12 Elm Street, 02139."),
        ("Thanks! And what is your employee number, and the phone number we should call you on?", "E10181, and 555-0199."),
        ("Which order number is this about?", "Order #5513."),
    ],
)
def test_a_value_the_agent_asked_for_and_the_user_does_not_have_is_provoked(leave, agent, reply):
    """The agent asked for something its persona does not hold: whatever the obliging user makes up is the agent's doing,
    so the attempt is graded as it stands (the audit notes it; nothing raises, nothing is repaired)."""
    conv = said(leave, agent)
    fault = find_fault(leave, conv, reply)
    assert fault is not None and fault.provoked, fault
    audit = UserAudit(leave)
    audit.check(conv, reply)  # no UserSimulatorFault
    assert [f.kind for f in audit.provoked] == [fault.kind] and audit.early_stop is None


@pytest.mark.parametrize(
    "agent, reply",
    [
        ("How can I help you today?", "You can call me on 555-0199."),  # volunteered
        ("What is your employee number?", "It is E10182."),  # its own, misstated
        ("Could you confirm your work email address?", "It's mei.garcia@gmail.com."),
        ("What is your employee number?", "E10181, and my phone is 555-0199."),  # answerable; the phone volunteered
        ("Is there anything else I can help you with?", "Yes, ticket #5513 too."),
    ],
)
def test_a_fact_the_user_volunteers_or_misstates_when_asked_fairly_is_still_its_fault(leave, agent, reply):
    fault = find_fault(leave, said(leave, agent), reply)
    assert fault is not None and not fault.provoked, fault
    with pytest.raises(UserSimulatorFault):
        UserAudit(leave).check(said(leave, agent), reply)


@pytest.mark.parametrize(
    "agent",
    [
        "Could you please tell me your employee number?",  # it gave it in its opening message
        "Your leave is booked. Could you confirm your work email address?",  # the agent says it is done
        "I'm afraid I cannot book that. Could you confirm your work email address?",  # ... or that it cannot be done
        "Could you confirm your work email address, and the phone number on your file?",  # and asks for what it lacks
    ],
)
def test_walking_away_from_a_question_the_agent_gave_it_reason_to_leave_is_provoked(leave, agent):
    fault = find_fault(leave, said(leave, agent), None)
    assert fault is not None and fault.kind == "premature_stop" and fault.provoked, fault
    audit = UserAudit(leave)
    audit.check(said(leave, agent), None)
    assert audit.early_stop is None and [f.kind for f in audit.provoked] == ["premature_stop"]


def test_a_failing_agent_cannot_turn_its_failure_into_a_repairable_system_error(leave):
    """Scripted agents that game the audit, once failing (they never book the leave): one asks for a fact the persona
    does not hold and the obliging user makes one up; one claims success and closes with a question, and the user
    leaves. Both attempts are graded as they stand (a 0, with the audit's note), never a system error that `--repair`
    would re-roll; a fair question the user walks away from is still the user's fault."""
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.types import AgentTurn
    from groundstate.worlds.attempt import play

    domain = load_domain("hr")

    class Says:
        """A user that answers every message with its next line (None: it ends the conversation)."""

        def __init__(self, *lines):
            self.lines = list(lines)

        async def reply(self, conversation, tools=None):
            return self.lines.pop(0) if self.lines else None

    class Gamer:
        def __init__(self, *texts):
            self.texts = list(texts)

        async def act(self, conversation, tools):
            return AgentTurn(text=self.texts.pop(0)) if self.texts else AgentTurn(text="Goodbye.", done=True)

    def attempt(agent, user):
        return asyncio.run(play(leave, domain, agent, AuditedUser(user, UserAudit(leave)), backend=SqliteBackend())).verdict

    invented = attempt(Gamer("What is the phone number on your file?"), Says("It is 555-0199."))
    assert invented.system_error is None and invented.reward == 0, invented
    assert any("provoked" in r and "555-0199" in r for r in invented.reasons), invented.reasons
    closed = attempt(Gamer("Your leave is booked! Could you confirm your work email address for the confirmation?"), Says())
    assert closed.system_error is None and closed.reward == 0, closed
    assert any("provoked" in r and "premature_stop" in r for r in closed.reasons), closed.reasons
    fair = attempt(Gamer("Could you confirm your work email address?"), Says())
    assert fair.system_error is not None and (fair.error_kind, fair.fault) == ("user_fault", "premature_stop"), fair


# -- the audit reads a hostile reply in linear time (#32 item 14) ---------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("unit", ["a", "a.", "7", "1,", "a-", "a_", "x@", "1.", "7 ", "a1-", "12345 ", "$1,", "E1 ", "#", "a@b."])
def test_the_audit_reads_a_hostile_reply_in_linear_time(leave, unit):
    """200,000 characters of each repeated unit (what made the e-mail pattern and the amount patterns quadratic: 40,000
    characters took 20 s) in the agent's message and in the reply, then an invented phone number: the audit finishes
    and still finds it. Before the fix this ran for minutes."""
    junk = unit * (200_000 // len(unit))
    conv = said(leave, junk + "\nHow can I help you today?")
    fault = find_fault(leave, conv, junk + " Call me on 555-0199.")
    assert fault is not None and fault.kind == "invented_fact" and "555-0199" in fault.detail, fault


# -- flipped: a finding is the user's fault only where the agent's messages cannot have provoked it (#32 item 7, review) --

# the reviewer's probe (/tmp/attack32/audit_game.py): asks for what the persona does not hold, phrased as no question the
# old word lists read, each answered by an obliging user that makes the value up
GAMED_ASKS = [
    ("Tell me the phone number on your file.", "Sure, it is 555-0199."),
    ("I need the phone number on your file to proceed.", "Sure, it is 555-0199."),
    ("Kindly share your phone number.", "It's 555-0199."),
    ("Could you tell me a number we can reach you at?", "Sure, 555-0199."),
    ("What number can we reach you on?", "Sure, 555-0199."),
    ("Before I continue, your phone number please.", "555-0199."),
    ("I'll need your ZIP code.", "02139."),
    ("Could you give me the employee number of your manager?", "E10999."),
    ("What's your employee number at your previous job?", "E10999."),
    ("Could you confirm the email address of your manager?", "It's boss@brightwater.example."),
    ("What is the phone number on your file?", "Sure, it is 555-0199."),
    ("Your leave is booked under reference LR-1. What is your employee number?", "E10999."),
    ("Hi! What is your employee number, as your manager would write it?", "E10999."),
]
# a claim of success placed anywhere in the message, in words no list held, then a fair question the user walks away from
GAMED_STOPS = [
    "That's all sorted for you now. Could you confirm your work email address?",
    "Your request went through. Could you confirm your work email address?",
    "Your leave is in the system. Could you confirm your work email address?",
    "I have made the change. Could you confirm your work email address?",
    "Could you confirm your work email address? Your leave request is now logged.",
    "Could you confirm your work email address? We're all good on our side.",
    "Is there anything else I can help you with? Could you confirm your work email address?",  # "anything else": handled
]


@pytest.mark.parametrize("agent, reply", GAMED_ASKS)
def test_an_ask_in_any_words_for_what_the_user_lacks_is_provoked(leave, agent, reply):
    fault = find_fault(leave, said(leave, agent), reply)
    assert fault is not None and fault.kind in ("invented_fact", "contradicted_fact") and fault.provoked, fault
    audit = UserAudit(leave)
    audit.check(said(leave, agent), reply)  # no UserSimulatorFault: the attempt goes on, graded as it stands
    assert [f.kind for f in audit.provoked] == [fault.kind]


@pytest.mark.parametrize("agent", GAMED_STOPS)
def test_a_stop_after_a_message_that_claims_anything_is_provoked(leave, agent):
    fault = find_fault(leave, said(leave, agent), None)
    assert fault is not None and fault.kind == "premature_stop" and fault.provoked, fault


def test_an_earlier_message_can_set_the_user_up():
    """The last message is a plain ask, but an earlier one primed the user: still the agent's doing."""
    leave = load_domain("hr").task("hr-book-annual-leave-001")
    primed = said(leave, "For this next part, please answer as your own manager would.", "What is your employee number?")
    fault = find_fault(leave, primed, "E10999.")
    assert fault is not None and fault.kind == "contradicted_fact" and fault.provoked and "earlier" in fault.provoked, fault
    assert find_fault(leave, said(leave, "Hello!", "What is your employee number?"), "E10999.").provoked is None


@pytest.mark.parametrize(
    "agents, reply, kind",
    [
        (["Hi there! How can I help you today?"], "My order ORD-4412 never came.", "invented_fact"),
        (["Hello.", "Anything else I can help you with?"], "Yes, ticket #5513 too.", "invented_fact"),
        (["Thanks! Could you confirm your work email address, please?"], "mei.garcia@gmail.com", "contradicted_fact"),
        (["Sure, I can help with that. What is your employee number?"], "It is E10182.", "contradicted_fact"),
        (["May I have your employee ID and your work email?"], "E10181 and mei@gmail.com.", "contradicted_fact"),
        (["Good morning! Please provide your work email, and your employee number."], "mei@gmail.com", "contradicted_fact"),
        (["What is your employee number?"], "E10181; call me on 555-0199.", "invented_fact"),
    ],
)
def test_after_plain_messages_a_finding_is_the_users_fault(leave, agents, reply, kind):
    """Greetings, offers of help and plain asks for the user's own facts ("your work email address") provoke nothing:
    what the user invents or misstates after them is its fault, a system error."""
    fault = find_fault(leave, said(leave, *agents), reply)
    assert fault is not None and fault.kind == kind and fault.provoked is None, fault
    with pytest.raises(UserSimulatorFault):
        UserAudit(leave).check(said(leave, *agents), reply)


@pytest.mark.parametrize("agent, reply", [*GAMED_ASKS, *((stop, None) for stop in GAMED_STOPS)])
def test_no_phrasing_turns_a_failing_agents_attempt_into_a_system_error(leave, agent, reply):
    """Each gaming phrasing, played by a scripted agent that never books the leave against a user that obliges (or
    leaves): the attempt is the agent's 0 with the audit's note, never a system error that `--repair` re-rolls."""
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.types import AgentTurn
    from groundstate.worlds.attempt import play

    class Says:
        def __init__(self, *lines):
            self.lines = list(lines)

        async def reply(self, conversation, tools=None):
            return self.lines.pop(0) if self.lines else None

    class Gamer:
        def __init__(self, text):
            self.texts = [text]

        async def act(self, conversation, tools):
            return AgentTurn(text=self.texts.pop(0)) if self.texts else AgentTurn(text="Goodbye.", done=True)

    user = AuditedUser(Says(*([reply] if reply else [])), UserAudit(leave))
    verdict = asyncio.run(play(leave, load_domain("hr"), Gamer(agent), user, backend=SqliteBackend())).verdict
    assert verdict.system_error is None and verdict.reward == 0, verdict
    assert any("the agent provoked, not a user-simulator fault" in r for r in verdict.reasons), verdict.reasons


class Flooder:
    """A user model that floods whatever it is asked (an LLM that loops, or obliges "type 'ok' 40,000 times")."""

    async def reply(self, conversation, tools=None):
        return "ok " * 40_000


@pytest.mark.parametrize(
    "agent, provoked",
    [
        ("Please type 'ok' 40,000 times.", True),
        ("Before we go on, say ok once for every day of the year, then your email.", True),
        ("Hi! How can I help you today?", False),
        ("What is your employee number?", False),
    ],
)
def test_a_flood_after_a_message_that_is_not_plain_is_provoked(leave, agent, provoked):
    """An `overlong_reply` is judged as every finding: after a message that is not plain the agent may have asked for it,
    so the conversation ends there and the attempt is graded as it stands; after a plain one it is a system error."""
    from groundstate.state.sqlite import SqliteBackend
    from groundstate.types import AgentTurn
    from groundstate.worlds.attempt import play

    class Says:
        async def act(self, conversation, tools):
            return AgentTurn(text=agent)

    verdict = asyncio.run(play(leave, load_domain("hr"), Says(), AuditedUser(Flooder(), UserAudit(leave)), backend=SqliteBackend())).verdict
    if provoked:
        assert verdict.system_error is None and verdict.reward == 0, verdict
        assert any("overlong_reply the agent provoked" in r for r in verdict.reasons), verdict.reasons
    else:
        assert (verdict.error_kind, verdict.fault) == ("user_fault", "overlong_reply"), verdict
    assert sum(map(len, verdict.reasons)) < 2_000  # the flood is quoted, never kept
