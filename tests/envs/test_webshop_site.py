"""The real-WebShop adapter (`webshop-site`) against a stand-in of WebShop's web app."""

import copy
import json
import socket

import pytest
from fake_webshop_site import app
from serving import serving_app

from hindsight.cli.main import main
from hindsight.envs import EnvError, list_envs, make
from hindsight.envs.contract import EnvFailure
from hindsight.logs import read_trajectories

WINNING = ["search[red coffee mug]", "click[B01MUG]", "click[red]", "click[16 oz]", "click[buy now]"]


@pytest.fixture(scope="module")
def site():
    with serving_app(app) as url:
        yield url


def play(env, seed, actions):
    observation, info = env.reset(seed)
    keys, observations = [info["state_key"]], [observation]
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        keys.append(info["state_key"])
        observations.append(observation)
    return keys, observations, info, terminated


def test_a_purchase_with_the_requested_options_scores_one(site):
    env = make("webshop-site", url=site)
    keys, observations, info, terminated = play(env, 0, WINNING)
    assert "red coffee mug in the 16 oz size" in observations[0]
    assert "[B01MUG]" in observations[1] and "[Next >]" in observations[1]
    assert "[red]" in observations[2] and "[Buy Now]" in observations[2]
    assert "Chosen options: color: red; size: 16 oz" in observations[4]
    assert terminated and info["success"] and info["score"] == 1.0
    assert "B01MUG" not in observations[-1].split("\n", 1)[1]  # the site's hidden goal stays hidden
    # A replay opens a new session, and reaches the same states.
    assert play(env, 0, WINNING)[0] == keys


def test_a_purchase_without_the_options_gets_the_sites_partial_score(site):
    env = make("webshop-site", url=site)
    _, _, info, terminated = play(env, 0, ["search[mug]", "click[B01MUG]", "click[buy now]"])
    assert terminated and not info["success"] and info["score"] == 0.5


def test_actions_the_page_does_not_offer_are_invalid_steps_with_feedback(site):
    env = make("webshop-site", url=site)
    env.reset(1)
    observation, _, _, _, info = env.step("click[buy now]")
    assert not info["valid"] and "nothing (use search[...])" in observation
    observation, _, _, _, info = env.step("buy the tea")
    assert not info["valid"] and "not an action" in observation
    env.step("search[green tea]")
    observation, _, _, _, info = env.step("search[tea]")
    assert not info["valid"] and "only search from the search page" in observation
    observation, _, _, _, info = env.step("click[B99XYZ]")
    assert not info["valid"] and "You can click:" in observation and "b03tea" in observation
    assert env.step("click[next]")[4]["valid"]  # "next" means the "next >" button
    assert env.admissible_actions()[0] == "click[back to search]"


def test_a_copy_browses_the_same_session_on_its_own(site):
    env = make("webshop-site", url=site)
    env.reset(2)
    env.step("search[stoneware mug]")
    twin = copy.deepcopy(env)
    twin.step("click[B04MUG]")
    assert env.state_key() != twin.state_key() and "/search_results/" in env.state_key()
    assert twin.step("click[white]")[4]["valid"] and twin.step("click[buy now]")[4]["success"]


def test_the_contract_checker_passes_it_without_oracle_checks(site):
    from hindsight.envs.checker import check_env

    report = check_env("webshop-site", seeds=2, kwargs={"url": site}, prefixes=2, split_n=2)
    assert report.ok, report.violations
    assert any("declares no oracle" in note for note in report.notes)


def test_splits_follow_the_webshop_baselines():
    env = make("webshop-site", url="http://127.0.0.1:9")
    assert env.split_seeds("test", 3) == [0, 1, 2]
    assert env.split_seeds("validation", 2) == [500, 501]
    assert env.split_seeds("train", 1) == [1500]
    assert [env.seed_split(s) for s in (0, 499, 500, 1499, 1500)] == ["test", "test", "validation", "validation",
                                                                          "train"]
    with pytest.raises(EnvError, match="goals 0..499"):
        env.split_seeds("test", 501)


def test_a_site_that_is_down_is_an_env_failure(tmp_path, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the probe closes
    env = make("webshop-site", url=f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(EnvFailure, match="cannot reach"):
        env.reset(0)
    # An evaluation records the lost episodes and says so under its table.
    assert main(["eval", "--env", "webshop-site", "--set", f"url=http://127.0.0.1:{port}", "--model", "random",
                 "--episodes", "2", "--out", str(tmp_path / "down")]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 episodes lost their environment" in out and "cannot reach" in out
    summary = json.loads((tmp_path / "down" / "summary.json").read_text())
    assert summary["env_failures"] == 2 and summary["success_rate"] == 0.0


def test_without_an_address_it_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("WEBSHOP_URL", raising=False)
    with pytest.raises(EnvError, match="url=http://HOST:PORT"):
        make("webshop-site")
    with pytest.raises(EnvError, match="http"):
        make("webshop-site", url="localhost:3000")
    listed = {spec.id: spec for spec in list_envs()}
    assert "[unavailable here: webshop-site needs the address" in listed["webshop-site"].description
    env = make("webshop-site", url="http://127.0.0.1:9")
    env.instance = {"goal": 0}
    with pytest.raises(EnvError, match="no oracle"):
        env.oracle_action()


def test_hindsight_eval_plays_the_site(site, tmp_path, capsys):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([f"<action>{action}</action>" for action in WINNING]))
    out = tmp_path / "run"
    assert main(["eval", "--env", "webshop-site", "--set", f"url={site}", "--model", f"scripted:{script}",
                 "--episodes", "1", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["success_rate"] == 1.0
    (trajectory,) = read_trajectories(out)
    assert [step.action for step in trajectory.steps] == WINNING
