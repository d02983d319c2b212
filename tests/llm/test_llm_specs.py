"""Spec parsing, option checking and the light-import promise of `hindsight.llm`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hindsight.llm import ModelError, ModelSpec, describe_spec, load_model, parse_spec
from hindsight.llm.scripted import OracleBackend, RandomBackend, ScriptedBackend


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("smollm2", ModelSpec("smollm2")),
        ("hf:/models/tiny", ModelSpec("hf", "/models/tiny")),
        ("hf:model.Q4.gguf", ModelSpec("hf", "model.Q4.gguf")),
        ("openai:gpt-4o-mini", ModelSpec("openai", "gpt-4o-mini")),
        ("openai:Qwen/Qwen2.5-7B-Instruct", ModelSpec("openai", "Qwen/Qwen2.5-7B-Instruct")),
        ("vllm:Qwen/Qwen2.5-7B-Instruct", ModelSpec("vllm", "Qwen/Qwen2.5-7B-Instruct")),
        ("oracle", ModelSpec("oracle")),
        ("random", ModelSpec("random")),
        ("random:7", ModelSpec("random", "7")),
        ("scripted:replies.jsonl", ModelSpec("scripted", "replies.jsonl")),
        ("  OpenAI:m  ", ModelSpec("openai", "m")),
    ],
)
def test_parse_spec_accepts_every_documented_form(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "gpt4", "anthropic:claude", "hf:", "openai:", "vllm:", "vllm", "scripted:", "oracle:x", "random:x"]
)
def test_parse_spec_rejects_malformed_specs_with_one_line(spec):
    with pytest.raises(ModelError) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_unknown_spec_error_lists_the_accepted_forms():
    with pytest.raises(
        ModelError, match=r"accepted forms: smollm2, hf:PATH, openai:MODEL, vllm:MODEL, oracle, random, scripted:FILE"
    ):
        load_model("llama:7b")


def test_vllm_spec_checks_its_options_before_it_starts_anything():
    with pytest.raises(ModelError, match="unknown option.*base_url"):
        load_model("vllm:some-model", base_url="http://elsewhere/v1")


def test_missing_files_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match="script file not found"):
        load_model(f"scripted:{tmp_path / 'absent.json'}")
    with pytest.raises(ModelError, match="model path not found"):
        load_model(f"hf:{tmp_path / 'absent'}")


def test_hf_rejects_files_that_are_not_gguf_and_folders_without_config(tmp_path):
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"\0")
    with pytest.raises(ModelError, match="not a .gguf"):
        load_model(f"hf:{stray}")
    with pytest.raises(ModelError, match="no config.json"):
        load_model(f"hf:{tmp_path}")


def test_unknown_options_are_rejected_with_the_accepted_list(tmp_path):
    with pytest.raises(ModelError, match=r"unknown option\(s\) for oracle: temperature; accepted: seed"):
        load_model("oracle", temperature=1)
    with pytest.raises(ModelError, match="not both"):
        load_model("oracle:1", seed=2)
    with pytest.raises(ModelError, match="accepted: seed"):
        load_model("random", temprature=0)
    with pytest.raises(ModelError, match="max_concurrency"):
        load_model("openai:m", base_url="http://127.0.0.1:9", concurrency=4)


def test_load_model_builds_the_light_backends(tmp_path):
    script = tmp_path / "s.json"
    script.write_text('["a", "b"]')
    assert isinstance(load_model("oracle"), OracleBackend)
    random_backend = load_model("random:5")
    assert isinstance(random_backend, RandomBackend) and random_backend.seed == 5
    assert load_model("random", seed=9).seed == 9
    scripted = load_model(f"scripted:{script}")
    assert isinstance(scripted, ScriptedBackend) and scripted.responses == ("a", "b")
    assert scripted.spec == f"scripted:{script}"


def test_seed_in_spec_and_option_conflict():
    with pytest.raises(ModelError, match="not both"):
        load_model("random:1", seed=2)


def test_describe_spec_gives_one_line_per_form():
    for spec in ["smollm2", "hf:/m", "hf:/m/x.gguf", "openai:gpt", "vllm:m", "oracle", "random", "random:3",
                 "scripted:f.txt"]:
        line = describe_spec(spec)
        assert line and "\n" not in line
    assert "seed 3" in describe_spec("random:3")


def test_importing_the_package_loads_no_heavy_library():
    code = (
        "import sys, hindsight.llm, hindsight.llm.hf, hindsight.llm.scripted\n"
        "heavy = [m for m in ('torch', 'transformers', 'httpx') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "hindsight.llm.bundled_gguf_path\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
