import os
from pathlib import Path

import pytest

#: Set by `.ci/run`, which installs every requirement of the suite: a skipped test there means a
#: broken set-up (a missing package, model or browser), so it fails instead of passing quietly.
STRICT_SKIPS = os.environ.get("HINDSIGHT_STRICT_SKIPS") == "1"

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# pytest-xdist (`-n 2` in pyproject.toml) runs the suite in worker processes that share the
# cores: each worker gets its share of torch threads, set before anything imports torch and
# inherited by the processes a test starts. Two workers that each spin a thread per core
# contend for every core, and torch then runs several times slower than on one thread.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, _workers)))


def pytest_report_header(config):
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        return "tests/with_verl: not collected here (verl is not installed); bash .ci/verl runs them in verl's venv"
    return None


def _fail_skip(report) -> None:
    if STRICT_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where every requirement should be installed (HINDSIGHT_STRICT_SKIPS=1): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level importorskip skips a whole file at collection.
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory) -> Path:
    """One converted copy of the bundled model per test run, never in the user's cache.

    pytest-xdist's workers share it: their temporary folders have one parent per run, so the
    conversion (tens of seconds) is done once rather than once per worker. Set HINDSIGHT_CACHE
    yourself to reuse a conversion across runs.
    """
    if not os.environ.get("HINDSIGHT_CACHE"):
        base = tmp_path_factory.getbasetemp()
        cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "hindsight-cache"
        cache.mkdir(exist_ok=True)
        os.environ["HINDSIGHT_CACHE"] = str(cache)
    return Path(os.environ["HINDSIGHT_CACHE"])


@pytest.fixture(scope="session")
def bundled_tokenizer(model_cache):
    """The bundled SmolLM2 tokenizer (from the converted cache)."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from hindsight.llm.base import ModelError
    from hindsight.llm.hf import bundled_gguf_path, convert_gguf

    try:
        # Workers share model_cache: one converts while the others wait (convert_gguf's lock).
        folder = convert_gguf(bundled_gguf_path())
    except ModelError as exc:
        pytest.skip(str(exc))
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def build_tiny_llama(folder: Path, tokenizer, **overrides) -> Path:
    """Save a randomly initialised 2-layer Llama with `tokenizer` into `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **overrides,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, bundled_tokenizer) -> Path:
    """A randomly initialised 2-layer Llama with the bundled tokenizer: trains in milliseconds.

    Use it as `hf:PATH` wherever a test needs a real trainable model but not a good one.
    """
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), bundled_tokenizer)


@pytest.fixture(scope="session")
def tiny_lora_model_dir(tmp_path_factory, bundled_tokenizer) -> Path:
    """Like `tiny_model_dir` with larger initial weights, so LoRA adapters alone can fit a few
    targets: with the default initialisation the tied output layer keeps every logit near
    zero, whatever the adapters do."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-lora"), bundled_tokenizer, initializer_range=0.3)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray cluster of 2 CPUs for one test module (env actors and model replicas join it).

    One cluster at a time on the machine: an xdist worker waits for the other's to shut down.
    """
    ray = pytest.importorskip("ray")
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder every worker's base temp lives in
    with FileLock(str(shared / "ray-cluster.lock")):
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()
