"""`hindsight serve-env` and its client: a served environment keeps the whole contract."""

import subprocess
import sys
import time

import httpx
import pytest
from serving import failing_envs_registered, serving

from hindsight.envs import EnvError, EnvFailure, make
from hindsight.envs import remote as remote_module
from hindsight.envs.checker import check_env
from hindsight.envs.proxy import env_label, parse_env_url
from hindsight.envs.remote import RemoteEnv
from hindsight.envs.server import EnvPool


@pytest.fixture(scope="module")
def lake_server():
    with serving(EnvPool("frozenlake", {"size": 5}, size=8)) as url:
        yield url


def play(env, seed, actions):
    trace = [env.reset(seed)]
    for action in actions:
        if env.done:
            break
        trace.append(env.step(action))
    return trace


def test_a_served_env_plays_exactly_like_a_local_one(lake_server):
    served = make(f"{lake_server}/frozenlake", p_hole=0.3)
    local = make("frozenlake", size=5, p_hole=0.3)
    assert isinstance(served, RemoteEnv) and served.id == "frozenlake"
    assert (served.instruction, served.criteria) == (local.instruction, local.criteria)
    assert served.max_steps == local.max_steps
    assert served.config == {**local.config, "server": lake_server}
    for seed in served.split_seeds("test", 3):
        actions = ["up", "jump", "right", "down", "down", "left", "right", "right"]
        assert play(served, seed, actions) == play(local, seed, actions)
    assert served.split_seeds("train", 4, start=10) == local.split_seeds("train", 4, start=10)
    assert served.seed_split(7) == local.seed_split(7)
    assert served.instance_for(7) == local.instance_for(7)


def test_the_oracle_works_through_the_server(lake_server):
    env = make("frozenlake", server=lake_server)  # what a served trajectory's env_kwargs record
    solved = 0
    for seed in range(5):
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action())
        solved += env.is_success()
    assert solved == 5


def test_a_deep_copy_forks_the_session(lake_server):
    env = make(f"{lake_server}/frozenlake")
    env.reset(2)
    twin = __import__("copy").deepcopy(env)
    moved = twin.step("up")[4]["state_key"]
    assert env.state_key() != moved or not env.step("up")[4]["valid"]  # the original did not move with its twin
    assert env.steps_taken == 0 and twin.steps_taken == 1


def test_the_contract_checker_passes_through_the_server(lake_server):
    report = check_env(f"{lake_server}/frozenlake", {}, seeds=2, prefixes=1)
    assert report.ok, "\n".join(report.violations)
    assert any("hash-seed: skipped for a served environment" in note for note in report.notes)


def test_usage_mistakes_come_back_as_the_env_s_own_errors(lake_server):
    with pytest.raises(EnvError, match="unknown keyword 'sizee'"):
        make(f"{lake_server}/frozenlake", sizee=5)
    with pytest.raises(EnvError, match="serves 'frozenlake', not 'sudoku'"):
        make(f"{lake_server}/sudoku")
    env = make(f"{lake_server}/frozenlake")
    with pytest.raises(EnvError, match="call reset"):
        env.step("up")
    with pytest.raises(EnvError, match="unknown split"):
        env.split_seeds("tset", 2)
    answer = httpx.post(f"{lake_server}/frozenlake/sessions/nope/step", json={"action": 3})
    assert answer.status_code == 400 and answer.json()["kind"] == "usage"
    answer = httpx.post(f"{lake_server}/frozenlake/split_seeds", content=b"{not json")
    assert answer.status_code == 400 and "malformed request" in answer.json()["error"]
    with pytest.raises(EnvError, match="HOST:PORT/ID"):
        parse_env_url("http://127.0.0.1:1/")
    assert env_label(f"{lake_server}/frozenlake") == "frozenlake" and env_label("sudoku") == "sudoku"


def test_an_unreachable_server_is_a_clear_failure(monkeypatch):
    monkeypatch.setattr(remote_module, "_ATTEMPTS", 1)
    with pytest.raises(EnvFailure, match="cannot reach the env server at http://127.0.0.1:9.*serve-env"):
        make("http://127.0.0.1:9/frozenlake", size=4)


def test_a_full_pool_waits_then_fails(monkeypatch):
    monkeypatch.setattr(remote_module, "_BUSY_WAIT", 0.3)
    with serving(EnvPool("frozenlake", size=1)) as url:
        first, second = make(f"{url}/frozenlake"), make(f"{url}/frozenlake")
        first.reset(0)
        with pytest.raises(EnvFailure, match="all 1 frozenlake instances are in sessions"):
            second.reset(0)
        first.close()  # the instance goes back to the pool
        second.reset(0)
        assert httpx.get(f"{url}/health").json()["instances"] == 1


def test_an_idle_session_expires_and_its_client_sees_a_lost_session():
    with serving(EnvPool("frozenlake", size=1, session_timeout=0.2)) as url:
        idle, other = make(f"{url}/frozenlake"), make(f"{url}/frozenlake")
        idle.reset(0)
        time.sleep(0.4)
        other.reset(1)  # takes the expired session's instance
        with pytest.raises(EnvFailure, match="no session"):
            idle.step("up")
        assert idle.reset(0)[0]  # a reset opens a new session


def test_a_crashed_or_hung_instance_is_discarded():
    with failing_envs_registered(), serving(EnvPool("test-exploding-lake", size=2, call_timeout=0.5)) as url:
        env = make(f"{url}/test-exploding-lake")
        env.reset(0)
        with pytest.raises(EnvFailure, match="RuntimeError: the simulator fell over"):
            env.step("explode")
        assert httpx.get(f"{url}/health").json()["instances"] == 0
        env.reset(0)
        with pytest.raises(EnvFailure, match="did not finish within 0.5 s"):
            env.step("hang")
        assert env.reset(0)[0] and env.step("up")[4]["valid"] in (True, False)


def test_serve_env_command(tmp_path):
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "hindsight", "serve-env", "frozenlake", "--port", str(port), "--set", "size=3"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert f"serving frozenlake at http://localhost:{port}/frozenlake" in server.stdout.readline()
        health = httpx.get(f"http://127.0.0.1:{port}/health").json()
        assert health["env"] == "frozenlake" and health["defaults"] == {"size": 3}
        shown = subprocess.run([sys.executable, "-m", "hindsight", "envs", "show", f"http://127.0.0.1:{port}/frozenlake"],
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "size=3" in shown.stdout and "oracle's first action" in shown.stdout
        taken = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        server.terminate()
        server.wait(10)
    unknown = subprocess.run([sys.executable, "-m", "hindsight", "serve-env", "frozen-lake"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown environment 'frozen-lake'" in unknown.stderr
