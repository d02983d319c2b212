import pytest

from hindsight.agent.prompts import Memory, PromptBuilder
from hindsight.types import Step


def make_step(i: int) -> Step:
    return Step(index=i, observation=f"obs{i}", state_key=str(i), raw=f"<action>a{i}</action>", action=f"a{i}",
                analysis=None, valid=True, reward=0.0, score=0.0, feedback=f"obs{i + 1}")


HISTORY = [make_step(i) for i in range(4)]


def roles(conversation):
    return [m.role for m in conversation]


def test_full_history_alternates_user_and_assistant():
    conv = PromptBuilder(Memory.parse("full")).build("Reach the goal.", HISTORY, "obs4")
    assert roles(conv) == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert "Reach the goal." in conv[0].content and "<action>" in conv[0].content
    assert conv[-1].content == "obs4"
    assert [m.content for m in conv[1:-1:2]] == ["obs0", "obs1", "obs2", "obs3"]


def test_no_history_shows_only_current_observation():
    conv = PromptBuilder(Memory.parse("none")).build("Reach the goal.", HISTORY, "obs4")
    assert roles(conv) == ["system", "user"]
    assert conv[-1].content.endswith("obs4") and "not shown" in conv[-1].content


def test_window_keeps_last_k_turns_and_says_so():
    conv = PromptBuilder(Memory.parse(2)).build("Reach the goal.", HISTORY, "obs4")
    assert roles(conv) == ["system", "user", "assistant", "user", "assistant", "user"]
    assert conv[1].content.startswith("(The first 2 turns are not shown.)") and conv[1].content.endswith("obs2")
    assert conv[2].content == "<action>a2</action>"


def test_first_turn_has_no_omission_note():
    conv = PromptBuilder(Memory.parse("none")).build("Reach the goal.", [], "obs0")
    assert conv[-1].content == "obs0"


@pytest.mark.parametrize("bad", ["some", "-1", "1.5x"])
def test_bad_memory_spec(bad):
    with pytest.raises(ValueError, match="memory"):
        Memory.parse(bad)


def test_memory_round_trips_as_text():
    for text in ["full", "none", "3"]:
        assert str(Memory.parse(text)) == text


def test_guidance_is_appended_to_the_system_message_on_every_turn():
    builder = PromptBuilder(Memory.parse("none"), system_template="Rules: {instruction}")
    advised = builder.build("Reach the goal.", HISTORY, "obs4", guidance="  You should go left.  ")
    assert advised[0].content == ("Rules: Reach the goal.\n\nAdvice from a review of your previous attempt at this "
                                  "same task:\nYou should go left.")
    assert builder.build("Reach the goal.", HISTORY, "obs4", guidance=" ")[0].content == "Rules: Reach the goal."
    assert advised[1:] == builder.build("Reach the goal.", HISTORY, "obs4")[1:]
