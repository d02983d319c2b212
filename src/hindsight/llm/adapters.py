"""LoRA adapters: where they live, how their weights are named, merging and export.

An adapter reaches Hindsight in one of three shapes, and `resolve_adapter` tells them apart
(in this order):

- a bundled adapter: a folder `hindsight/adapters/NAME/` shipped inside the package;
- a PEFT adapter folder: `adapter_config.json` + `adapter_model.safetensors` (or `.bin`),
  what `PeftModel.save_pretrained` and `hindsight export-adapter` write;
- a Hindsight run directory or one of its checkpoints: one role's adapter (default
  `policy`) of the run's latest (or that) checkpoint.

`read_adapter` turns each into one `AdapterWeights`: the LoRA matrices under the names PEFT
writes in its files, plus the rank, alpha and targets needed to rebuild the layers they
belong to. Inside a peft model every matrix is named after its adapter
(`...q_proj.lora_A.policy.weight`), in a PEFT file it is not (`...q_proj.lora_A.weight`);
`peft_name` and `role_name` convert between the two, and no other code does.

Nothing here is imported by `hindsight.llm` itself: torch, peft and safetensors are
loaded only when an adapter is actually used.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hindsight.llm.base import ModelError

if TYPE_CHECKING:
    import torch

    from hindsight.llm.hf import HFBackend

logger = logging.getLogger(__name__)

#: The package whose folder holds the bundled adapters, one sub-folder each.
BUNDLED_PACKAGE = "hindsight.adapters"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: Written by `export_adapter` next to the PEFT files: what the adapter came from.
EXPORT_MANIFEST = "hindsight.json"
#: Shipped with each bundled adapter: how it was trained.
PROVENANCE = "provenance.json"
EXPORT_DTYPES = ("float32", "float16", "bfloat16")
#: Adapter name used while an adapter is merged into a base model (never saved).
MERGE_ADAPTER = "merging"

# A bundled name is one plain path component, so `./name` or `dir/name` always means a path.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ROLE_KEY = re.compile(r"\.(lora_A|lora_B)\.([^.]+)\.(weight|bias)$")
_PEFT_KEY = re.compile(r"\.(lora_A|lora_B)\.(weight|bias)$")
_OTHER_FORMS = "a PEFT adapter folder (adapter_config.json), a Hindsight run directory or a checkpoint folder"


# ---------------------------------------------------------------- weight names


def peft_name(name: str, role: str) -> str | None:
    """The PEFT-file name of a LoRA parameter of adapter `role` in a peft model, else None."""
    match = _ROLE_KEY.search(name)
    if match is None or match.group(2) != role:
        return None
    return f"{name[: match.start()]}.{match.group(1)}.{match.group(3)}"


def role_name(name: str, role: str) -> str:
    """The name a PEFT-file LoRA tensor has inside a peft model, as part of adapter `role`."""
    match = _PEFT_KEY.search(name)
    if match is None:
        raise ModelError(f"{name} is not a LoRA weight name")
    return f"{name[: match.start()]}.{match.group(1)}.{role}.{match.group(2)}"


def adapter_roles(names: Sequence[str]) -> list[str]:
    """Adapter names present among peft parameter names (e.g. a checkpoint's), sorted."""
    return sorted({match.group(2) for name in names if (match := _ROLE_KEY.search(name))})


def _module_of(name: str) -> str:
    # For messages: the module path a LoRA weight belongs to, without peft's wrapper prefix.
    module = _PEFT_KEY.sub("", name)
    return module.removeprefix("base_model.model.")


def _targets(names: Sequence[str]) -> tuple[str, ...]:
    # The leaf module names carrying LoRA (q_proj, ...): what LoraConfig.target_modules lists.
    return tuple(sorted({_module_of(name).rsplit(".", 1)[-1] for name in names}))


# ---------------------------------------------------------------- finding adapters


def bundled_adapters_dir() -> Path:
    """The folder holding the bundled adapters (inside the installed or editable package)."""
    from importlib.resources import files

    return Path(str(files(BUNDLED_PACKAGE)))


def list_bundled_adapters() -> list[str]:
    """Names of the bundled adapters, sorted: the sub-folders that hold a PEFT adapter."""
    folder = bundled_adapters_dir()
    if not folder.is_dir():
        return []
    return sorted(child.name for child in folder.iterdir() if (child / ADAPTER_CONFIG).is_file())


@dataclass(frozen=True)
class AdapterSource:
    """Where an adapter lives.

    kind: bundled, peft (a PEFT folder), run (a run directory, resolved to its latest
    checkpoint) or checkpoint. path: the PEFT folder, or the checkpoint folder
    (`checkpoints/step-N`). text: what the user wrote, for messages.
    """

    kind: str
    path: Path
    text: str

    @property
    def run_dir(self) -> Path | None:
        """The run a checkpoint belongs to (run and checkpoint kinds)."""
        return self.path.parent.parent if self.kind in ("run", "checkpoint") else None

    def describe(self) -> str:
        if self.kind == "bundled":
            return f"bundled adapter {self.text}"
        if self.kind == "peft":
            return f"adapter {self.text}"
        return f"{self.path.name} of run {self.run_dir}"


def resolve_adapter(text: str | os.PathLike[str]) -> AdapterSource:
    """Find the adapter `text` names: a bundled name, a PEFT folder, a run or a checkpoint.

    An adapter spec (`BASE+ADAPTER`, as init_from may be given) names its ADAPTER part;
    its BASE is not checked here. A path that exists always wins over that reading, so a
    folder whose name contains `+` still works.
    """
    raw = os.fspath(text).strip()
    if not raw:
        raise ModelError("an adapter needs a name or a path")
    path = Path(raw).expanduser()
    if "+" in raw and not path.exists():
        from hindsight.llm.specs import parse_spec

        try:
            parsed = parse_spec(raw)
        except ModelError:
            parsed = None  # not a spec either: reported below as a missing path
        if parsed is not None:
            if len(parsed.adapters) != 1:
                raise ModelError(f"{raw!r} chains {len(parsed.adapters)} adapters; one adapter is needed here")
            return resolve_adapter(parsed.adapter)
    if _NAME.match(raw):
        bundled = bundled_adapters_dir() / raw
        if (bundled / ADAPTER_CONFIG).is_file():
            return AdapterSource("bundled", bundled, raw)
    if path.is_dir():
        return _classify_folder(path, raw)
    if path.exists():
        raise ModelError(f"adapter {raw} is a file; an adapter is a folder ({_OTHER_FORMS})")
    if _NAME.match(raw):
        names = ", ".join(list_bundled_adapters()) or "none"
        raise ModelError(f"unknown adapter {raw!r}: no bundled adapter or folder of that name; "
                         f"bundled adapters: {names}; or give {_OTHER_FORMS}")
    raise ModelError(f"adapter not found: {path}")


def _classify_folder(path: Path, raw: str) -> AdapterSource:
    if (path / ADAPTER_CONFIG).is_file():
        return AdapterSource("peft", path, raw)
    if (path / "checkpoints").is_dir() or (path / "config.yaml").is_file():
        from hindsight.logs.checkpoints import list_checkpoints

        checkpoints = list_checkpoints(path)
        if not checkpoints:
            raise ModelError(f"run {path} has no checkpoint yet, so no adapter to use")
        return AdapterSource("run", checkpoints[-1].path, raw)
    if (path / "model" / "weights.pt").is_file():
        return AdapterSource("checkpoint", path, raw)
    if (path / "weights.pt").is_file() and path.name == "model":
        return AdapterSource("checkpoint", path.parent, raw)  # the weights folder inside a checkpoint
    # PEFT saves every adapter not named "default" into a sub-folder of that name.
    nested = sorted(child.name for child in path.iterdir() if (child / ADAPTER_CONFIG).is_file())
    if nested:
        raise ModelError(f"{path} holds adapters in sub-folders ({', '.join(nested)}); give one of them, "
                         f"e.g. {path / nested[0]}")
    raise ModelError(f"{path} is not an adapter: no {ADAPTER_CONFIG} (PEFT adapter), checkpoints/ (run "
                     "directory) or model/weights.pt (checkpoint)")


# ---------------------------------------------------------------- reading adapters


@dataclass(frozen=True)
class AdapterWeights:
    """One LoRA adapter, wherever it came from.

    tensors: LoRA matrices under their PEFT-file names. rank, alpha, targets: the LoRA
    shape (alpha is None when it cannot be known, see `alpha_unknown`). base: the model
    spec it was trained on, when recorded. variants: LoRA variants it uses beyond plain
    LoRA (use_rslora, use_dora, per-module ranks), which change what the weights mean.
    """

    tensors: Mapping[str, torch.Tensor]
    rank: int
    alpha: float | None
    targets: tuple[str, ...]
    source: AdapterSource
    base: str | None = None
    variants: tuple[str, ...] = ()
    alpha_unknown: str = ""
    peft_config: Any = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.source.describe()

    def lora_config(self) -> Any:
        """A peft `LoraConfig` that rebuilds this adapter's layers (for merging).

        A config read from a folder is copied without its `base_model_name_or_path`: that names
        the base the adapter was saved against (a spec such as `smollm2`), never the loaded
        model, and peft warns when `get_peft_model` renames it. The copy also leaves the stored
        config as it was read, whatever peft writes into the one it is given.
        """
        if self.peft_config is not None:
            config = copy.deepcopy(self.peft_config)
            config.base_model_name_or_path = None
            return config
        if self.alpha is None:
            raise ModelError(self.alpha_unknown)
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.alpha, target_modules=list(self.targets), lora_dropout=0.0,
                          task_type="CAUSAL_LM")


def read_adapter(source: str | os.PathLike[str] | AdapterSource, role: str = "policy") -> AdapterWeights:
    """The weights and LoRA shape of an adapter; for runs and checkpoints, of adapter `role`.

    `source` is anything `resolve_adapter` accepts. A PEFT folder holds one adapter, so
    `role` only picks among the adapters of a Hindsight checkpoint (policy, critic, ...).
    """
    if not isinstance(source, AdapterSource):
        source = resolve_adapter(source)
    if source.kind in ("bundled", "peft"):
        return _read_peft(source)
    return _read_checkpoint(source, role)


def _read_peft(source: AdapterSource) -> AdapterWeights:
    folder = source.path
    try:
        settings = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {folder / ADAPTER_CONFIG}: {_one_line(exc)}") from None
    if not isinstance(settings, dict):
        raise ModelError(f"{folder / ADAPTER_CONFIG} is not a JSON object")
    kind = str(settings.get("peft_type", "")).upper()
    if kind != "LORA":
        raise ModelError(f"{source.describe()} is a {kind or 'untyped'} adapter; only LoRA adapters are supported")
    weights_file = next((folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()), None)
    if weights_file is None:
        raise ModelError(f"{folder} has {ADAPTER_CONFIG} but no {' or '.join(ADAPTER_WEIGHTS)}")
    from peft import LoraConfig

    try:
        config = LoraConfig.from_pretrained(str(folder))
    except Exception as exc:  # peft raises ValueError, TypeError, KeyError... for a config it cannot use
        raise ModelError(f"{folder / ADAPTER_CONFIG} is not a usable LoRA config: {_one_line(exc)}") from None
    try:
        if weights_file.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors = load_file(str(weights_file))
        else:
            import torch

            tensors = torch.load(weights_file, map_location="cpu", weights_only=True)
    except Exception as exc:  # safetensors and torch raise several types for a damaged file
        raise ModelError(f"cannot read {weights_file}: {_one_line(exc)}") from None
    if not isinstance(tensors, dict) or not tensors:
        raise ModelError(f"{weights_file} holds no weights")
    other = [name for name in tensors if not _PEFT_KEY.search(name)]
    if other:
        raise ModelError(f"{source.describe()} holds weights other than LoRA matrices (e.g. {other[0]}); only plain "
                         "LoRA adapters on linear layers are supported")
    variants = tuple(name for name, used in (
        ("use_rslora", config.use_rslora), ("use_dora", config.use_dora),
        ("rank_pattern", bool(config.rank_pattern)), ("alpha_pattern", bool(config.alpha_pattern)),
    ) if used)
    return AdapterWeights(
        tensors=tensors, rank=int(config.r), alpha=float(config.lora_alpha), targets=_targets(list(tensors)),
        source=source, base=_recorded_base(folder), variants=variants, peft_config=config,
    )


def _recorded_base(folder: Path) -> str | None:
    for name in (EXPORT_MANIFEST, PROVENANCE):
        try:
            manifest = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and isinstance(manifest.get("base_model"), str):
            return manifest["base_model"]
    return None


def _read_checkpoint(source: AdapterSource, role: str) -> AdapterWeights:
    import torch

    weights_file = source.path / "model" / "weights.pt"
    try:
        saved = torch.load(weights_file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged or foreign file
        raise ModelError(f"cannot read {weights_file}: {_one_line(exc)}") from None
    roles = adapter_roles(list(saved))
    if not roles:
        raise ModelError(f"{source.describe()} holds no LoRA adapter (a full fine-tuning run?); "
                         "only LoRA runs can be used as adapters")
    if role not in roles:
        raise ModelError(f"{source.describe()} holds no {role!r} adapter; it has {', '.join(roles)}")
    tensors = {key: tensor for name, tensor in saved.items() if (key := peft_name(name, role)) is not None}
    ranks = {int(tensor.shape[0]) for key, tensor in tensors.items() if ".lora_A." in key}
    if len(ranks) != 1:
        raise ModelError(f"{source.describe()} has LoRA matrices of several ranks ({sorted(ranks)}); cannot use it")
    rank = ranks.pop()

    config_file = source.run_dir / "config.yaml"
    config = _read_yaml(config_file)
    alpha, alpha_unknown = None, ""
    if config is None:
        alpha_unknown = (f"cannot apply {source.describe()}: its LoRA alpha is stored only in the run's config.yaml, "
                         f"and {config_file} is missing or unreadable")
    else:
        if isinstance(config.get("lora_rank"), int) and config["lora_rank"] != rank:
            raise ModelError(f"{source.describe()} has rank-{rank} matrices but its config.yaml says lora_rank: "
                             f"{config['lora_rank']}")
        if isinstance(config.get("lora_alpha"), (int, float)) and not isinstance(config["lora_alpha"], bool):
            alpha = float(config["lora_alpha"])
        else:
            alpha_unknown = f"cannot apply {source.describe()}: {config_file} has no lora_alpha"
    base = config.get("model") if config else None
    return AdapterWeights(tensors=tensors, rank=rank, alpha=alpha, targets=_targets(list(tensors)), source=source,
                          base=base if isinstance(base, str) else None, alpha_unknown=alpha_unknown)


def _read_yaml(path: Path) -> dict[str, Any] | None:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return loaded if isinstance(loaded, dict) else None


# ---------------------------------------------------------------- applying adapters


def load_into(model: Any, weights: AdapterWeights, adapter: str) -> None:
    """Copy an adapter's matrices into adapter `adapter` of a peft model, all or nothing.

    Every matrix of the file must have a place of the same shape in the model, and every
    LoRA matrix of `adapter` in the model must get one: an adapter made for another base
    model fails here with a one-line `ModelError` instead of half-loading. Tensors are cast
    to the model's dtype (an fp16 export loads into an fp32 model).
    """
    import torch

    slots = {key: parameter for name, parameter in model.named_parameters()
             if (key := peft_name(name, adapter)) is not None}
    label = weights.label
    foreign = [key for key in weights.tensors if key not in slots]
    if foreign:
        raise ModelError(f"{label} does not fit this model: it has weights for {_module_of(foreign[0])}, which the "
                         "model lacks (an adapter for another base model?)")
    missing = [key for key in slots if key not in weights.tensors]
    if missing:
        raise ModelError(f"{label} does not fit this model: it has no weights for {_module_of(missing[0])} "
                         f"({len(missing)} of {len(slots)} LoRA matrices missing; an adapter for another base model?)")
    for key, tensor in weights.tensors.items():
        if tuple(tensor.shape) != tuple(slots[key].shape):
            raise ModelError(f"{label} does not fit this model: {_module_of(key)} has a {tuple(tensor.shape)} "
                             f"matrix where the model needs {tuple(slots[key].shape)} (an adapter for another base "
                             "model, or another rank?)")
    with torch.no_grad():
        for key, tensor in weights.tensors.items():
            slots[key].copy_(tensor.to(slots[key].device))


def merge_adapters(backend: HFBackend, adapters: Sequence[AdapterWeights], base: str = "") -> None:
    """Merge LoRA adapters, in order, into the weights of `backend.model` (a plain transformers model).

    Merged, an adapter costs nothing at generation time: the model has exactly the base's
    layers. Merging reassociates a float sum (W + s·BA instead of Wx + s·B(Ax)), so logits
    match an unmerged peft model to rounding, not bit for bit.
    """
    from peft import get_peft_model

    merged: list[str] = []
    for weights in adapters:
        _check_recorded_base(weights, base, merged)
        config = weights.lora_config()
        try:
            wrapped = get_peft_model(backend.model, config, adapter_name=MERGE_ADAPTER)
        except Exception as exc:  # peft raises ValueError for missing targets, others for odd configs
            raise ModelError(f"{weights.label} does not fit {base or 'the base model'}: {_one_line(exc)}") from None
        try:
            load_into(wrapped, weights, MERGE_ADAPTER)
        except ModelError:
            wrapped.unload()  # leave the caller's model as it was
            raise
        backend.model = wrapped.merge_and_unload()
        merged.append(weights.source.text)
        logger.info("merged %s into %s", weights.label, base or "the base model")
    backend.model.eval()


def _check_recorded_base(weights: AdapterWeights, base: str, merged: Sequence[str]) -> None:
    # An adapter trained on top of merged adapters (a run with model: smollm2+X) only means
    # what it learned on that same stack. Paths can be spelled many ways, so a difference is
    # a warning, not an error.
    if not weights.base or "+" not in weights.base:
        return
    from hindsight.llm.specs import parse_spec

    try:
        expected = parse_spec(weights.base).adapters
    except ModelError:
        return
    if tuple(merged) != expected:
        chain = "+".join([base or "BASE", *merged]) if merged else (base or "the bare base")
        logger.warning("%s was trained on %s, but is merged into %s here", weights.label, weights.base, chain)


# ---------------------------------------------------------------- export


def export_adapter(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, role: str = "policy",
                   step: int | None = None, dtype: str = "float16") -> Path:
    """Write one role's adapter of a run's checkpoint as a standard PEFT adapter folder.

    The folder holds `adapter_config.json` and `adapter_model.safetensors` (loadable with
    `PeftModel.from_pretrained` on the run's base model, or as `BASE+OUT_DIR` here) and
    `hindsight.json`: run, step, role, dtype, base model and the run's whole config.
    float16 halves the file; LoRA matrices are small numbers and its 10 mantissa bits
    keep them to ~5e-4 relative. Loading casts back to the model's dtype. The folder
    appears complete or not at all.
    """
    import torch

    from hindsight.configs import ConfigError
    from hindsight.logs.checkpoints import choose_checkpoint

    run = Path(run_dir)
    if not run.is_dir():
        raise ModelError(f"run directory not found: {run}")
    config = _read_yaml(run / "config.yaml")
    if config is None:
        raise ModelError(f"{run} is not a Hindsight run directory (no readable config.yaml)")
    if dtype not in EXPORT_DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of: {', '.join(EXPORT_DTYPES)}")
    try:
        chosen = choose_checkpoint(run, step)
    except ConfigError as exc:
        raise ModelError(str(exc)) from None
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelError(f"{out} already exists and is not an empty folder; choose a new output folder")

    weights = read_adapter(AdapterSource("checkpoint", chosen.path, str(run)), role)
    lora = weights.lora_config()  # raises when the alpha is unknown
    target_dtype = getattr(torch, dtype)
    tensors = {key: tensor.to(target_dtype).contiguous() for key, tensor in sorted(weights.tensors.items())}
    if not all(bool(torch.isfinite(tensor).all()) for tensor in tensors.values()):
        raise ModelError(f"the {role} adapter overflows {dtype}; export with --dtype float32 or bfloat16")
    lora.inference_mode = True
    base = config.get("model")
    lora.base_model_name_or_path = _peft_base_name(base) if isinstance(base, str) else None

    from hindsight import __version__

    manifest = {
        "exported_by": "hindsight export-adapter", "hindsight_version": __version__,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_dir": str(run.resolve()), "step": chosen.step,
        "role": role, "dtype": dtype, "base_model": base, "lora_rank": weights.rank, "lora_alpha": weights.alpha,
        "target_modules": list(weights.targets), "config": config,
    }
    return write_peft_adapter(out, tensors, lora, manifest)


def write_peft_adapter(out: Path, tensors: Mapping[str, torch.Tensor], lora: Any, manifest: Mapping[str, Any]) -> Path:
    """Write a PEFT adapter folder: `lora` (a LoraConfig) as adapter_config.json, `tensors`
    (PEFT-file names) as adapter_model.safetensors, and `manifest` as hindsight.json.

    `out` must not exist or be empty. The folder appears complete or not at all, so a
    reader (an inference server loading it) never sees half of it.
    """
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would make the export private
        from safetensors.torch import save_file

        lora.save_pretrained(str(staging))
        save_file(dict(tensors), str(staging / ADAPTER_WEIGHTS[0]), metadata={"format": "pt"})
        (staging / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        if out.is_dir():
            out.rmdir()  # rename cannot replace a folder, even an empty one
        os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _peft_base_name(spec: str) -> str:
    # peft tools read base_model_name_or_path to find the base; give them a folder when the
    # run's base is a plain transformers folder, else the Hindsight spec as a description.
    from hindsight.llm.specs import parse_spec

    try:
        parsed = parse_spec(spec)
    except ModelError:
        return spec
    if parsed.provider == "hf" and not parsed.adapter and not parsed.name.lower().endswith(".gguf"):
        return parsed.name
    return spec


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
