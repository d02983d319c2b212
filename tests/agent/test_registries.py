"""PRMs, critics and pre-action writers are found by name, built one way, and config switches map onto names."""

import json

import pytest

from hindsight.agent.critic import CRITICS, CriticPrompt, ModelCritic, NoCritic, TemplateCritic, critic_name
from hindsight.agent.evaluate import EvalConfig, best_of_n, pre_action_writer
from hindsight.agent.prm import PRMS, JudgePRM, OraclePRM, build_prm
from hindsight.agent.prompts import PromptBuilder
from hindsight.agent.reflection import GoalReflector
from hindsight.agent.selfguide import SelfAssessor
from hindsight.agent.writers import PRE_ACTION_WRITERS, build_pre_action, pre_action_name
from hindsight.cli.main import main
from hindsight.registry import UnknownName

from .fakes import RecordingBackend


def test_each_registry_lists_its_entries():
    assert PRMS.names() == ("oracle", "judge")
    assert CRITICS.names() == ("model", "template", "none")
    assert PRE_ACTION_WRITERS.names() == ("self-guide", "reflection")


def test_prms_are_built_from_the_role_value(tmp_path):
    assert isinstance(build_prm("oracle"), OraclePRM)
    script = tmp_path / "judge.json"
    script.write_text(json.dumps(["Score: 0.5"]))
    judge = build_prm(f"scripted:{script}", fallback=0.25)
    assert isinstance(judge, JudgePRM) and judge.fallback == 0.25
    with pytest.raises(ValueError, match="prm cannot be 'policy'"):
        build_prm("policy")


def test_evaluation_and_cso_share_the_prm_factory():
    config = EvalConfig(env="frozenlake", model="oracle", best_of=3, temperature=1.0)
    assert best_of_n(config).n == 3 and isinstance(best_of_n(config).prm, OraclePRM)
    assert best_of_n(EvalConfig(env="frozenlake", model="oracle")) is None


def test_critics_by_name_and_the_switches_that_name_them():
    assert critic_name("adapter") == "model" and critic_name("openai:gpt-4o-mini") == "model"
    assert critic_name("template") == "template" and critic_name("adapter", no_critic=True) == "none"
    assert isinstance(CRITICS.get("template")(None, None, ""), TemplateCritic)
    assert isinstance(CRITICS.get("none")(None, None, ""), NoCritic)
    with pytest.raises(ValueError, match="needs the backend"):
        CRITICS.get("model")(None, None, "")
    backend = RecordingBackend(lambda request: "<critique>none</critique>")
    critic = CRITICS.get("model")(backend, CriticPrompt("criteria", PromptBuilder()), "")
    assert isinstance(critic, ModelCritic) and critic.name == "fake"


def test_pre_action_writers_by_name_and_by_the_old_switches():
    assert pre_action_name() == "none" and build_pre_action("none", 48) is None
    assert pre_action_name(self_guide=True) == "self-guide" and pre_action_name(reflact=True) == "reflection"
    assert pre_action_name("reflection") == "reflection"
    assert isinstance(build_pre_action("self-guide", 24), SelfAssessor)
    assert build_pre_action("reflection", 24) == GoalReflector(max_new_tokens=24)
    assert isinstance(pre_action_writer(EvalConfig(env="frozenlake", model="oracle", self_guide=True)), SelfAssessor)
    assert isinstance(pre_action_writer(EvalConfig(env="frozenlake", model="oracle", pre_action="reflection")),
                      GoalReflector)
    with pytest.raises(ValueError, match="choose one"):
        pre_action_name("reflection", self_guide=True)
    with pytest.raises(UnknownName, match="unknown pre-action writer 'self-guid'; known: self-guide, reflection"):
        pre_action_name("self-guid")


def test_an_unknown_name_on_the_command_line_is_one_line_and_exit_code_2(capsys):
    assert main(["eval", "--env", "frozenlake", "--model", "oracle", "--pre-action", "reflexion"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown pre-action writer 'reflexion'; known: self-guide, reflection" in err
