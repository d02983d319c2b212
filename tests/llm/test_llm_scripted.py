"""Oracle, random and scripted policies."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

import pytest

from hindsight.llm import ModelError, load_model
from hindsight.llm.scripted import (
    OracleBackend,
    RandomBackend,
    ScriptedBackend,
    format_response,
    load_script,
)
from hindsight.types import EnvView, GenerationRequest, SamplingParams, conversation

PARAMS = SamplingParams(temperature=0)
ACTION = re.compile(r"^<analysis>.+</analysis><action>(.*)</action>$", re.DOTALL)


@dataclass
class FakeEnv:
    best: str = "right"
    actions: tuple[str, ...] = ("up", "down", "left", "right")
    fail: bool = False
    calls: list[str] = field(default_factory=list)

    def oracle_action(self) -> str:
        self.calls.append("oracle")
        if self.fail:
            raise RuntimeError("planner found no path")
        return self.best

    def admissible_actions(self) -> tuple[str, ...]:
        self.calls.append("admissible")
        if self.fail:
            raise RuntimeError("state unknown")
        return self.actions


def request(env: EnvView | None = None, text: str = "go") -> GenerationRequest:
    return GenerationRequest(conversation(("user", text)), env=env)


def action_of(text: str) -> str:
    match = ACTION.match(text)
    assert match, text
    return match.group(1)


def test_fake_env_satisfies_the_protocol():
    assert isinstance(FakeEnv(), EnvView)


def test_oracle_answers_with_the_env_action_in_agent_format():
    envs = [FakeEnv(best="left"), FakeEnv(best="stack a b")]
    out = OracleBackend().generate([request(env) for env in envs], PARAMS)
    assert [action_of(c.text) for c in out] == ["left", "stack a b"]
    assert all(c.error is None and c.finish_reason == "stop" for c in out)
    assert all(c.token_ids is None and c.logprobs is None for c in out)


def test_oracle_without_env_or_with_failing_env_gives_error_completions():
    out = OracleBackend().generate([request(None), request(FakeEnv(fail=True)), request(FakeEnv())], PARAMS)
    assert out[0].error and "env" in out[0].error and out[0].text == "" and out[0].finish_reason == "error"
    assert out[1].error and "planner found no path" in out[1].error
    assert out[2].error is None and action_of(out[2].text) == "right"


@dataclass
class TiedEnv(FakeEnv):
    """An env whose planner rates several actions as equally good."""

    tied: tuple[str, ...] = ("down", "right")

    def oracle_actions(self) -> list[str]:
        return list(self.tied)


def test_a_seeded_oracle_breaks_ties_by_the_prompt_and_repeats_itself():
    prompts = [f"state {i}" for i in range(40)]
    picks = [action_of(c.text) for c in OracleBackend(seed=0).generate([request(TiedEnv(), p) for p in prompts], PARAMS)]
    assert set(picks) == {"down", "right"}  # 40 prompts: both ties are taken (a 2 * 0.5**40 chance to fail)
    again = [action_of(c.text) for c in OracleBackend(seed=0).generate([request(TiedEnv(), p) for p in prompts], PARAMS)]
    assert again == picks
    other = [action_of(c.text) for c in OracleBackend(seed=1).generate([request(TiedEnv(), p) for p in prompts], PARAMS)]
    assert other != picks
    # Without a seed it is the planner's own first choice, ties or not.
    assert {action_of(c.text) for c in OracleBackend().generate([request(TiedEnv(), p) for p in prompts], PARAMS)} \
        == {"right"}


def test_a_seeded_oracle_on_an_env_without_the_list_is_a_clear_error_completion():
    [out] = OracleBackend(seed=3, spec="oracle:3").generate([request(FakeEnv())], PARAMS)
    assert out.finish_reason == "error" and "oracle:3" in out.error and "oracle_actions" in out.error


def test_oracle_specs_take_an_integer_seed():
    assert load_model("oracle:7").seed == 7 and load_model("oracle").seed is None
    with pytest.raises(ModelError, match="integer"):
        load_model("oracle:x")


def test_random_is_uniform_over_admissible_actions_and_seeded():
    env = FakeEnv()
    picks = [action_of(c.text) for c in RandomBackend(seed=1).generate([request(env)] * 2000, PARAMS)]
    counts = Counter(picks)
    assert set(counts) == set(env.actions)
    assert all(400 < n < 600 for n in counts.values()), counts
    again = [action_of(c.text) for c in RandomBackend(seed=1).generate([request(env)] * 2000, PARAMS)]
    assert picks == again
    other = [action_of(c.text) for c in RandomBackend(seed=2).generate([request(env)] * 50, PARAMS)]
    assert other != picks[:50]


def test_random_does_not_touch_the_global_rng():
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    RandomBackend(seed=4).generate([request(FakeEnv())] * 10, PARAMS)
    assert random.random() == expected


def test_random_without_admissible_actions_emits_a_random_word():
    out = RandomBackend(seed=3).generate([request(FakeEnv(actions=())), request(None)], PARAMS)
    for completion in out:
        assert completion.error is None
        assert re.fullmatch(r"[a-z]{3,8}", action_of(completion.text))


def test_random_with_failing_env_gives_an_error_completion():
    (out,) = RandomBackend(seed=3).generate([request(FakeEnv(fail=True))], PARAMS)
    assert out.error and "state unknown" in out.error


def test_scripted_replays_in_order_across_calls_then_reports_exhaustion():
    backend = ScriptedBackend(["one", "two", "three"])
    first = backend.generate([request(), request()], PARAMS)
    second = backend.generate([request(), request()], PARAMS)
    assert [c.text for c in first] == ["one", "two"]
    assert second[0].text == "three" and second[0].error is None
    assert second[1].text == "" and second[1].error and "script exhausted" in second[1].error
    assert backend.remaining == 0 and backend.used == 3
    assert all(c.error for c in backend.generate([request()] * 3, PARAMS))


def test_scripted_rejects_non_strings():
    with pytest.raises(ModelError, match="entry 1"):
        ScriptedBackend(["ok", 3])  # type: ignore[list-item]


def test_load_script_json_list(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(["<action>up</action>", "multi\nline"]))
    assert load_script(path) == ["<action>up</action>", "multi\nline"]


def test_load_script_jsonl_strings_and_objects(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('"first"\n\n{"response": "second", "note": "x"}\n"third\\nline"\n')
    assert load_script(path) == ["first", "second", "third\nline"]


def test_load_script_plain_text_with_separators(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("<analysis>a</analysis>\n<action>up</action>\n---\nsecond\n  ---  \n\nthird\n---\n")
    assert load_script(path) == ["<analysis>a</analysis>\n<action>up</action>", "second", "third"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.json", "{not json", "not valid JSON"),
        ("dict.json", '{"a": 1}', "JSON list of strings"),
        ("bad.jsonl", '"ok"\n{"reply": "x"}\n', "line 2"),
        ("broken.jsonl", '"ok"\n[1,\n', "line 2 is not valid JSON"),
        ("empty.txt", "\n\n", "no responses"),
        ("empty.json", "[]", "no responses"),
    ],
)
def test_load_script_reports_malformed_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ModelError, match=message):
        load_script(path)


def test_format_response_matches_the_agent_format():
    assert format_response("why", "up") == "<analysis>why</analysis><action>up</action>"
