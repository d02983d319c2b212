"""The critique judge: tolerant parsing, its prompts, and a scripted judge's answers end to end."""

import pytest

from hindsight.agent.critique_judge import (
    CritiqueCase, CritiqueJudge, parse_addressed, parse_diagnosis, parse_granularity, render_attempt,
)
from hindsight.algos.echo_analysis import Addressed, Granularity
from hindsight.llm.scripted import ScriptedBackend

from tests.methods.echo_runs import attempt


@pytest.mark.parametrize("text,level", [
    ("Granularity: 3", Granularity.PINPOINTED),
    ("granularity = **2**", Granularity.TARGETED),
    ("Granularity: level 1", Granularity.GENERIC),
    ("Granularity: 3/3", Granularity.PINPOINTED),
    ("**Granularity**: fine-grained", Granularity.PINPOINTED),
    ("2/3", Granularity.TARGETED),
    ("The advice is generic.", Granularity.GENERIC),
    ("It names turn 4... wait. Granularity: 2", Granularity.TARGETED),
    ("coarse-level guidance", Granularity.GENERIC),
    ("2", Granularity.TARGETED),
    ("2.", Granularity.TARGETED),
    ("**3** - it names turn 4", Granularity.PINPOINTED),
    ("I rate it 2/3 overall", Granularity.TARGETED),
])
def test_granularity_is_read_tolerantly(text, level):
    assert parse_granularity(text) == (level, None)


@pytest.mark.parametrize("text,reason", [
    ("Granularity: 5", "not 1, 2 or 3"),
    ("Granularity: high", "not 1, 2 or 3"),
    ("It is generic rather than pinpointed", "several levels"),
    ("I cannot tell.", "no granularity level"),
    # A small judge copying the task back: its digits are not levels.
    ("You are standing on a frozen lake. Rows are numbered from 1 at the top", "no granularity level"),
    ("1. Move down to row 2", "no granularity level"),
    ("", "no granularity level"),
])
def test_unreadable_granularity_says_why(text, reason):
    level, error = parse_granularity(text)
    assert level is None and reason in error


@pytest.mark.parametrize("text,verdict", [
    ("Addressed: yes", Addressed.YES),
    ("addressed - **No**", Addressed.NO),
    ("Addressed: UNCLEAR", Addressed.UNCLEAR),
    ("No, it walked into the hole again.", Addressed.NO),
    ("Yes.", Addressed.YES),
    ("It is unclear whether it got there.", Addressed.UNCLEAR),
    ("Partially: it moved right but later fell.", Addressed.UNCLEAR),
    ("The second attempt did not move left at turn 1 again: yes", Addressed.YES),
])
def test_addressed_is_read_tolerantly(text, verdict):
    assert parse_addressed(text) == (verdict, None)


@pytest.mark.parametrize("text,reason", [
    ("Addressed: maybe", "not yes, no or unclear"),
    ("It could be yes or no", "several"),
    ("The agent moved right.", "no yes / no / unclear"),
])
def test_unreadable_verdict_says_why(text, reason):
    verdict, error = parse_addressed(text)
    assert verdict is None and reason in error


def test_diagnosis_takes_the_labelled_line_or_the_first_line():
    assert parse_diagnosis("Diagnosis: You stepped into the hole at turn 1.") == (
        "You stepped into the hole at turn 1.", None)
    assert parse_diagnosis('\n  "Kept walking into the edge."\nMore text') == ("Kept walking into the edge.", None)
    assert parse_diagnosis("  \n ") == (None, "empty diagnosis")
    assert len(parse_diagnosis("Diagnosis: " + "x" * 1000)[0]) == 300


def cases():
    first = attempt(7, 1, solved=False, late=False)
    refined = attempt(7, 1, solved=True, late=False, guidance="move right", sample=1)
    return [CritiqueCase(first, "At turn 1 you moved left into the {hole}; move right.", refined),
            CritiqueCase(None, "Plan ahead.", refined),
            CritiqueCase(first, "Avoid holes.", refined)]


def test_prompts_show_attempt_critique_and_refinement():
    judge = CritiqueJudge(ScriptedBackend([]))
    granularity = judge.granularity_prompt(cases()[0])[1].content
    assert "moved left into the {hole}" in granularity and "left -> You moved left and fell into a hole" in granularity
    assert "3 = pinpointed" in granularity and granularity.rstrip().endswith("Granularity: <1, 2 or 3>")
    addressed = judge.addressed_prompt(cases()[0])[1].content
    assert "First attempt:" in addressed and "Second attempt" in addressed and "You reached the goal." in addressed
    assert "Outcome: score 1.00 of 1, solved" in addressed and "Outcome: score 0.00 of 1, not solved" in addressed
    assert "(not logged)" in judge.granularity_prompt(cases()[1])[1].content
    assert render_attempt(None) == "(not logged)"
    diagnosis = judge.diagnosis_prompt(cases()[0].attempt)[1].content
    assert "which failed" in diagnosis and diagnosis.rstrip().endswith("Diagnosis: <the sentence>")


def test_a_scripted_judge_rates_and_counts_what_it_cannot_read():
    backend = ScriptedBackend(["Granularity: 3", "Granularity: 1", "no idea",
                               "Addressed: yes", "Addressed: maybe"])  # the third verdict: script exhausted
    judge = CritiqueJudge(backend)
    levels = judge.granularity(cases())
    verdicts = judge.addressed(cases())
    assert [v.value for v in levels] == [Granularity.PINPOINTED, Granularity.GENERIC, None]
    assert levels[2].error == "no granularity level in the answer" and levels[2].text == "no idea"
    assert [v.value for v in verdicts] == [Addressed.YES, None, None]
    assert "not yes, no or unclear" in verdicts[1].error and verdicts[2].error.startswith("backend error: script")
    assert (judge.unread.granularity, judge.unread.addressed, judge.unread.diagnosis) == (1, 2, 0)
    assert judge.granularity([]) == []
