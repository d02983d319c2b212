"""`hindsight export-adapter RUN_DIR OUT_DIR`: a run's adapter as a standard PEFT adapter folder.

OUT_DIR receives adapter_config.json and adapter_model.safetensors, which
`peft.PeftModel.from_pretrained(base_model, OUT_DIR)` loads, and hindsight.json saying
what they came from (run, step, role, dtype, the run's config). Any model spec can then
use it: `hindsight eval --model smollm2+OUT_DIR`, `init_from: OUT_DIR`.

    hindsight export-adapter runs/grpo adapters/grpo-frozenlake3
    hindsight export-adapter runs/echo out/critic --role critic --step 20 --dtype float32
"""

from __future__ import annotations

import argparse

from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-adapter", help="write a run's LoRA adapter as a PEFT adapter folder", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (hindsight train ...)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="folder to create (must not exist, or be empty)")
    parser.add_argument("--role", default="policy", help="which adapter: policy (default), critic (ECHO, critic-sft) or prm (prm-sft)")
    parser.add_argument("--step", type=int, help="step of the checkpoint to export (default: the latest)")
    parser.add_argument("--dtype", default="float16", choices=("float32", "float16", "bfloat16"),
                        help="dtype of the saved matrices (default float16: half the size; loading casts back)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.llm import ModelError
    from hindsight.llm.adapters import export_adapter

    try:
        out = export_adapter(args.run_dir, args.out_dir, role=args.role, step=args.step, dtype=args.dtype)
    except ModelError as exc:
        raise CLIError(str(exc)) from None
    print(f"adapter written to {out} (use it as BASE+{out}, e.g. in --model or init_from)")
    return 0
