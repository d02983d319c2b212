"""LoRA adapters in model specs (`BASE+ADAPTER`): parsing, resolution, merging, export, errors.

Every adapter here is built on the tiny random Llama of conftest.py with LoRA B matrices
set to random values (peft initialises them to zero, which would change nothing), so an
adapter visibly changes the logits and merged and unmerged models can be compared.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from hindsight.llm import SPEC_FORMS, ModelError, ModelSpec, describe_spec, load_model, parse_spec

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from hindsight.cli.main import main  # noqa: E402
from hindsight.llm import adapters  # noqa: E402
from hindsight.llm.hf import HFBackend  # noqa: E402
from hindsight.train.checkpoint import save_checkpoint  # noqa: E402
from hindsight.train.model import DEFAULT_TARGETS, LoraSettings, TrainableModel  # noqa: E402
from hindsight.types import GenerationRequest, SamplingParams, conversation  # noqa: E402

RANK, ALPHA = 4, 8
GREEDY = SamplingParams(temperature=0, max_new_tokens=8)
REQUESTS = [GenerationRequest(conversation(("user", "Where is the goal?"))),
            GenerationRequest(conversation(("user", "Move left, then down.")))]


# ---------------------------------------------------------------- helpers and fixtures


def randomize_lora(model: torch.nn.Module, seed: int, roles: tuple[str, ...] = ()) -> None:
    """Non-zero LoRA matrices (B starts at zero in peft), so the adapter changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name and (not roles or any(f".{role}." in name for role in roles)):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def assert_close_logits(actual: torch.Tensor, expected: torch.Tensor, relative: float = 1e-4) -> None:
    # Merging computes (W + s·BA)x instead of Wx + s·B(Ax): equal up to float reassociation,
    # which scales with the size of the logits.
    assert (actual - expected).abs().max() <= relative * expected.abs().max()


def save_peft_adapter(base_dir: Path, out: Path, seed: int, **lora: object) -> Path:
    """A standard PEFT adapter folder for the model in `base_dir` (or a LlamaForCausalLM)."""
    base = AutoModelForCausalLM.from_pretrained(base_dir) if isinstance(base_dir, Path) else base_dir
    settings = dict(r=RANK, lora_alpha=ALPHA, target_modules=list(DEFAULT_TARGETS), task_type="CAUSAL_LM")
    settings.update(lora)
    model = get_peft_model(base, LoraConfig(**settings))
    randomize_lora(model, seed)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def ids(tiny_lora_model_dir) -> torch.Tensor:
    return torch.randint(0, 2000, (2, 12), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def peft_dir(tiny_lora_model_dir, tmp_path_factory) -> Path:
    return save_peft_adapter(tiny_lora_model_dir, tmp_path_factory.mktemp("peft") / "adapter", seed=1)


@pytest.fixture(scope="module")
def run_dir(tiny_lora_model_dir, tmp_path_factory, ids) -> SimpleNamespace:
    """A Hindsight run with a policy and a critic adapter at step 3, and each role's logits."""
    run = tmp_path_factory.mktemp("run") / "echo"
    backend = HFBackend.load(tiny_lora_model_dir, device="cpu")
    model = TrainableModel(backend, roles=("policy", "critic"), lora=LoraSettings(rank=RANK, alpha=ALPHA))
    randomize_lora(model.model, seed=2)
    save_checkpoint(run, 3, model, {}, {}, {})
    run.joinpath("config.yaml").write_text(
        f"kind: echo\nmodel: hf:{tiny_lora_model_dir}\nlora_rank: {RANK}\nlora_alpha: {ALPHA}\n")
    roles = {}
    for role in ("policy", "critic"):
        with model.role(role):
            roles[role] = logits(model.model, ids)
    saved = torch.load(run / "checkpoints" / "step-000003" / "model" / "weights.pt")
    return SimpleNamespace(path=run, logits=roles, saved=saved)


@pytest.fixture()
def bundled(monkeypatch, tmp_path) -> Path:
    folder = tmp_path / "bundled"
    folder.mkdir()
    monkeypatch.setattr(adapters, "bundled_adapters_dir", lambda: folder)
    return folder


def one_line_error(spec: str, match: str) -> str:
    with pytest.raises(ModelError, match=match) as info:
        load_model(spec, device="cpu")
    assert "\n" not in str(info.value)
    return str(info.value)


# ---------------------------------------------------------------- grammar


@pytest.mark.parametrize(("spec", "expected"), [
    ("smollm2+frozenlake3", ModelSpec("smollm2", "", "frozenlake3")),
    ("hf:/models/x+/path/to/adapter", ModelSpec("hf", "/models/x", "/path/to/adapter")),
    ("hf:smollm2+runs/sft", ModelSpec("hf", "smollm2", "runs/sft")),
    ("SmolLM2 + frozenlake3 ", ModelSpec("smollm2", "", "frozenlake3")),
    ("smollm2+a+b", ModelSpec("smollm2", "", "a+b")),
])
def test_adapter_specs_parse_and_round_trip(spec, expected):
    parsed = parse_spec(spec)
    assert parsed == expected
    assert parse_spec(str(parsed)) == parsed
    assert str(parsed.base) + "+" + "+".join(parsed.adapters) == str(parsed)
    assert ModelSpec("smollm2").adapter == "" and str(ModelSpec("hf", "/m")) == "hf:/m"


@pytest.mark.parametrize(("spec", "match"), [
    ("oracle+x", "needs a smollm2 or hf:PATH base"),
    ("openai:gpt-4o+x", "needs a smollm2 or hf:PATH base"),
    ("random:3+x", "needs a smollm2 or hf:PATH base"),
    ("scripted:replies.json+x", "needs a smollm2 or hf:PATH base"),
    ("smollm2+", "needs an adapter after each"),
    ("smollm2++x", "needs an adapter after each"),
    ("+x", "needs a base model"),
    ("hf:+x", "needs a path"),
    ("llama+x", "unknown model spec"),
])
def test_bad_adapter_specs_are_one_line_errors(spec, match):
    with pytest.raises(ModelError, match=match) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_describe_and_spec_forms_mention_adapters():
    assert any(form == "BASE+ADAPTER" for form, _ in SPEC_FORMS)
    line = describe_spec("smollm2+frozenlake3")
    assert "SmolLM2" in line and "frozenlake3" in line and "\n" not in line
    with pytest.raises(ModelError, match="BASE\\+ADAPTER"):
        load_model("llama:7b")


# ---------------------------------------------------------------- applying adapters


def test_peft_adapter_changes_the_model_exactly_as_peft_does(tiny_lora_model_dir, peft_dir, ids):
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir), peft_dir)
    base = load_model(f"hf:{tiny_lora_model_dir}", device="cpu")
    spec = f"hf:{tiny_lora_model_dir}+{peft_dir}"
    merged = load_model(spec, device="cpu")
    assert isinstance(merged, HFBackend) and merged.spec == spec
    # Merged: the plain transformers model, no LoRA layers left to cost time at generation.
    assert type(merged.model) is type(base.model) and not any("lora" in n for n, _ in merged.model.named_parameters())

    expected, before = logits(reference, ids), logits(base.model, ids)
    assert_close_logits(logits(merged.model, ids), expected)
    assert (expected - before).abs().max() > 0.1 * before.abs().max()  # the adapter does change the model

    unmerged = HFBackend(reference, base.tokenizer)
    out, want, plain = (b.generate(REQUESTS, GREEDY) for b in (merged, unmerged, base))
    assert [c.token_ids for c in out] == [c.token_ids for c in want]
    assert [c.token_ids for c in out] != [c.token_ids for c in plain]


def test_run_directory_and_checkpoint_resolve_to_the_policy_adapter(tiny_lora_model_dir, run_dir, ids):
    for adapter in (run_dir.path, run_dir.path / "checkpoints" / "step-000003",
                    run_dir.path / "checkpoints" / "step-000003" / "model"):
        backend = load_model(f"hf:{tiny_lora_model_dir}+{adapter}", device="cpu")
        assert_close_logits(logits(backend.model, ids), run_dir.logits["policy"])
    source = adapters.resolve_adapter(run_dir.path)
    assert source.kind == "run" and source.run_dir == run_dir.path
    critic = adapters.read_adapter(run_dir.path, role="critic")
    assert critic.rank == RANK and critic.alpha == ALPHA and critic.targets == tuple(sorted(DEFAULT_TARGETS))
    assert critic.base == f"hf:{tiny_lora_model_dir}"


def test_bundled_names_resolve_first_and_unknown_names_list_them(tiny_lora_model_dir, peft_dir, bundled, ids,
                                                                  monkeypatch, tmp_path):
    shutil.copytree(peft_dir, bundled / "demo")
    (bundled / "README.md").write_text("not an adapter")
    assert adapters.list_bundled_adapters() == ["demo"]
    import hindsight.llm

    assert hindsight.llm.list_bundled_adapters() == ["demo"]
    # A local folder of the same name loses to the bundled adapter; ./demo names the folder.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    assert adapters.resolve_adapter("demo").kind == "bundled"
    with pytest.raises(ModelError, match="is not an adapter"):
        adapters.resolve_adapter("./demo")

    backend = load_model(f"hf:{tiny_lora_model_dir}+demo", device="cpu")
    direct = load_model(f"hf:{tiny_lora_model_dir}+{peft_dir}", device="cpu")
    assert torch.equal(logits(backend.model, ids), logits(direct.model, ids))
    message = one_line_error(f"hf:{tiny_lora_model_dir}+frozenlake9", "unknown adapter 'frozenlake9'")
    assert "bundled adapters: demo" in message and "PEFT adapter folder" in message and "run directory" in message


def test_the_package_ships_its_adapters_folder():
    import hindsight

    folder = adapters.bundled_adapters_dir()
    assert folder == Path(hindsight.__file__).parent / "adapters" and (folder / "README.md").is_file()
    package_data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "adapters/*/*" in package_data["package-data"]["hindsight"]
    # Whatever is bundled must be complete: a PEFT adapter that reads, with its provenance.
    for name in adapters.list_bundled_adapters():
        assert (folder / name / adapters.PROVENANCE).is_file(), name
        assert adapters.read_adapter(name).source.kind == "bundled"


def test_chained_adapters_merge_in_order(tiny_lora_model_dir, peft_dir, run_dir, ids):
    chained = load_model(f"hf:{tiny_lora_model_dir}+{peft_dir}+{run_dir.path}", device="cpu")
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir), peft_dir)
    holder = SimpleNamespace(model=reference.merge_and_unload())
    adapters.merge_adapters(holder, [adapters.read_adapter(run_dir.path)])
    assert_close_logits(logits(chained.model, ids), logits(holder.model, ids))


def test_an_adapter_trained_on_a_merged_stack_warns_when_merged_elsewhere(tiny_lora_model_dir, peft_dir, run_dir,
                                                                           tmp_path, caplog):
    stacked = tmp_path / "stacked-run"
    shutil.copytree(run_dir.path, stacked)
    config = (stacked / "config.yaml").read_text()
    (stacked / "config.yaml").write_text(config.replace(f"model: hf:{tiny_lora_model_dir}",
                                                        f"model: hf:{tiny_lora_model_dir}+{peft_dir}"))
    with caplog.at_level("WARNING", logger="hindsight.llm.adapters"):
        load_model(f"hf:{tiny_lora_model_dir}+{stacked}", device="cpu")
    assert "was trained on" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="hindsight.llm.adapters"):
        load_model(f"hf:{tiny_lora_model_dir}+{peft_dir}+{stacked}", device="cpu")
    assert "was trained on" not in caplog.text


def test_listing_bundled_adapters_loads_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys, hindsight.llm\n"
            "hindsight.llm.list_bundled_adapters(); hindsight.llm.parse_spec('smollm2+x')\n"
            "assert not [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- bad adapters


def test_missing_and_non_adapter_paths_are_one_line_errors(tiny_lora_model_dir, tmp_path, bundled):
    base = f"hf:{tiny_lora_model_dir}"
    one_line_error(f"{base}+{tmp_path / 'absent'}", "adapter not found")
    one_line_error(f"{base}+{tmp_path}", "is not an adapter")
    one_line_error(f"{base}+{tiny_lora_model_dir}", "is not an adapter")  # a model folder
    stray = tmp_path / "weights.safetensors"
    stray.write_bytes(b"\0")
    one_line_error(f"{base}+{stray}", "is a file")
    message = one_line_error(f"{base}+nope", "unknown adapter 'nope'")
    assert "bundled adapters: none" in message


def test_broken_peft_folders_are_one_line_errors(tiny_lora_model_dir, peft_dir, tmp_path):
    base = f"hf:{tiny_lora_model_dir}"
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(peft_dir / "adapter_config.json", no_weights)
    one_line_error(f"{base}+{no_weights}", "no adapter_model.safetensors")

    damaged = tmp_path / "damaged"
    shutil.copytree(peft_dir, damaged)
    (damaged / "adapter_model.safetensors").write_bytes(b"not a tensor file")
    one_line_error(f"{base}+{damaged}", "cannot read")

    other_kind = tmp_path / "ia3"
    shutil.copytree(peft_dir, other_kind)
    config = json.loads((other_kind / "adapter_config.json").read_text())
    (other_kind / "adapter_config.json").write_text(json.dumps({**config, "peft_type": "IA3"}))
    one_line_error(f"{base}+{other_kind}", "IA3 adapter; only LoRA")

    foreign_targets = tmp_path / "gpt2-targets"
    shutil.copytree(peft_dir, foreign_targets)
    (foreign_targets / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["c_attn"]}))
    one_line_error(f"{base}+{foreign_targets}", "does not fit")

    nested = tmp_path / "nested"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir),
                           LoraConfig(r=RANK, target_modules=["q_proj"]), adapter_name="policy")
    model.save_pretrained(nested)
    one_line_error(f"{base}+{nested}", "sub-folders \\(policy\\)")


@pytest.mark.parametrize(("change", "match"), [
    ({"hidden_size": 48}, "matrix where the model needs"),  # same modules, other shapes
    ({"num_hidden_layers": 3}, "which the model lacks"),  # an extra layer
    ({"num_hidden_layers": 1}, "LoRA matrices missing"),  # a layer short
])
def test_an_adapter_for_another_model_is_a_one_line_error(tiny_lora_model_dir, tmp_path, change, match):
    settings = dict(vocab_size=AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir).config.vocab_size,
                    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2)
    other = LlamaForCausalLM(LlamaConfig(**{**settings, **change}))
    folder = save_peft_adapter(other, tmp_path / "other", seed=4)
    one_line_error(f"hf:{tiny_lora_model_dir}+{folder}", match)


def test_broken_runs_are_one_line_errors(tiny_lora_model_dir, run_dir, tmp_path):
    base = f"hf:{tiny_lora_model_dir}"
    no_checkpoint = tmp_path / "fresh"
    no_checkpoint.mkdir()
    (no_checkpoint / "config.yaml").write_text("kind: grpo\n")
    one_line_error(f"{base}+{no_checkpoint}", "has no checkpoint")

    no_config = tmp_path / "no-config"
    shutil.copytree(run_dir.path, no_config)
    (no_config / "config.yaml").unlink()
    one_line_error(f"{base}+{no_config}", "alpha is stored only in the run's config.yaml")
    (no_config / "config.yaml").write_text("kind: grpo\n")
    one_line_error(f"{base}+{no_config}", "has no lora_alpha")

    with pytest.raises(ModelError, match="no 'reviewer' adapter; it has critic, policy"):
        adapters.read_adapter(run_dir.path, role="reviewer")

    full = tmp_path / "full"
    step = full / "checkpoints" / "step-000001"
    (step / "model").mkdir(parents=True)
    torch.save({"model.layers.0.mlp.up_proj.weight": torch.zeros(2, 2)}, step / "model" / "weights.pt")
    torch.save({"step": 1}, step / "state.pt")
    (full / "config.yaml").write_text("kind: sft\nfull_finetune: true\n")
    one_line_error(f"{base}+{full}", "holds no LoRA adapter")


# ---------------------------------------------------------------- export


def export(*args: str) -> int:
    return main(["export-adapter", *map(str, args)])


def test_export_writes_a_peft_folder_that_loads_everywhere(tiny_lora_model_dir, run_dir, ids, tmp_path):
    out = tmp_path / "exported"
    assert export(run_dir.path, out) == 0
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                     "hindsight.json"]
    from safetensors.torch import load_file

    stored = load_file(out / "adapter_model.safetensors")
    assert stored and all(t.dtype == torch.float16 for t in stored.values())  # the default halves the file
    manifest = json.loads((out / "hindsight.json").read_text())
    assert manifest["run_dir"] == str(run_dir.path.resolve()) and manifest["step"] == 3
    assert manifest["role"] == "policy" and manifest["dtype"] == "float16"
    assert manifest["config"]["lora_alpha"] == ALPHA and manifest["base_model"] == f"hf:{tiny_lora_model_dir}"

    # peft itself loads it on the base model, and so does a spec; both are the run's policy
    # up to float16 rounding of the matrices.
    peft_loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir), out)
    assert_close_logits(logits(peft_loaded, ids), run_dir.logits["policy"], relative=1e-2)
    spec_loaded = load_model(f"hf:{tiny_lora_model_dir}+{out}", device="cpu")
    assert_close_logits(logits(spec_loaded.model, ids), logits(peft_loaded, ids))

    exact = tmp_path / "critic32"
    assert export(run_dir.path, exact, "--role", "critic", "--dtype", "float32", "--step", "3") == 0
    critic = load_model(f"hf:{tiny_lora_model_dir}+{exact}", device="cpu")
    assert_close_logits(logits(critic.model, ids), run_dir.logits["critic"])


@pytest.mark.parametrize(("make_args", "match"), [
    (lambda run, tmp: [tmp / "absent", tmp / "out"], "run directory not found"),
    (lambda run, tmp: [tmp, tmp / "out"], "not a Hindsight run directory"),
    (lambda run, tmp: [run, tmp / "out", "--step", "7"], "no checkpoint of update 7; it has 3"),
    (lambda run, tmp: [run, tmp / "out", "--role", "reviewer"], "no 'reviewer' adapter"),
    (lambda run, tmp: [run, run], "not an empty folder"),
])
def test_export_mistakes_are_one_line_and_exit_2(run_dir, tmp_path, capsys, make_args, match):
    assert export(*make_args(run_dir.path, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hindsight: error:")
    import re

    assert re.search(match, err), err
    assert not (tmp_path / "out").exists()


def test_export_of_a_run_without_checkpoints_or_with_a_bad_dtype(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("kind: grpo\n")
    assert export(tmp_path, tmp_path / "out") == 2
    assert "has no checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # argparse rejects it before anything runs
        export(tmp_path, tmp_path / "out", "--dtype", "int8")
    assert info.value.code == 2
