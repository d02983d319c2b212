"""Bundled LoRA adapters, addressed in model specs as `BASE+NAME` (e.g. `smollm2+frozenlake3`).

Each sub-folder NAME is a standard PEFT adapter folder (`adapter_config.json`,
`adapter_model.safetensors`) with a `provenance.json` saying how it was trained; see
README.md here and `hindsight.llm.adapters`. This module holds no code: it makes the
folder a package, so that `importlib.resources` finds it both installed and editable.
"""
