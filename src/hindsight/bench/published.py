"""The papers' published numbers that `hindsight bench` shows beside its own.

Only the rows and columns that a bench cell has a counterpart for are here: the methods the
bench runs (not the proprietary models the papers also list), and each benchmark's headline
number (not its per-difficulty or per-task-type breakdown). Values are as printed, in the
paper's unit (percent, reward points or seconds); None marks a value the paper does not print
(a dash in the table, or a number shown only in a figure).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedRow:
    label: str
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class PublishedTable:
    """One table of one paper: its columns, a row per method or model, and the decimals each column is
    printed with (as in the paper)."""

    paper: str
    table: str
    caption: str
    columns: tuple[str, ...]
    rows: tuple[PublishedRow, ...]
    digits: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.digits) != len(self.columns):
            raise ValueError(f"{self.paper} {self.table}: {len(self.digits)} digits for {len(self.columns)} columns")
        for row in self.rows:
            if len(row.values) != len(self.columns):
                raise ValueError(f"{self.paper} {self.table}: row {row.label!r} has {len(row.values)} values "
                                 f"for {len(self.columns)} columns")


def _rows(*rows: tuple) -> tuple[PublishedRow, ...]:
    return tuple(PublishedRow(label, tuple(values)) for label, *values in rows)


ECHO, SELF_GUIDE, CSO, TIDE = "ECHO", "Self-Guide", "CSO", "TIDE"

ECHO_MAIN = PublishedTable(
    ECHO, "Tables 1 and 2",
    "Success or score (%) of two backbones before RL, after GRPO, after ECHO, and ECHO with a frozen critic "
    "(w/o evolving) or the linear gain (w/o SA-aware); SA shaping was ablated on the graded benchmarks only.",
    ("WebShop", "ALFWorld", "SciWorld", "DeepSearch"),
    _rows(
        ("Qwen3-4B", 6.12, 0.32, 4.50, 20.25),
        ("Qwen3-4B + GRPO", 82.37, 87.50, 79.14, 33.25),
        ("Qwen3-4B + ECHO", 90.03, 91.25, 82.88, 47.25),
        ("Qwen3-4B ECHO w/o evolving", 83.60, 85.75, 68.58, 40.25),
        ("Qwen3-4B ECHO w/o SA-aware", 86.69, None, 78.55, None),
        ("Qwen2.5-7B", 13.98, 2.00, 1.50, 15.50),
        ("Qwen2.5-7B + GRPO", 83.55, 89.50, 81.24, 42.25),
        ("Qwen2.5-7B + ECHO", 89.97, 93.75, 85.63, 46.75),
        ("Qwen2.5-7B ECHO w/o evolving", 84.99, 92.50, 72.19, 42.50),
        ("Qwen2.5-7B ECHO w/o SA-aware", 86.78, None, 83.65, None),
    ),
    (2, 2, 2, 2),
)

ECHO_REFINEMENT = PublishedTable(
    ECHO, "Table 5",
    "Mean reward gain of a second attempt over the first, at early, middle and late checkpoints: plain "
    "re-sampling, critique-guided refinement, and their difference (reward points).",
    ("no-critic regeneration", "critic-guided refinement", "relative gain"),
    _rows(
        ("WebShop · early", 0.81, 6.54, 5.73),
        ("WebShop · mid", 0.59, 5.42, 4.83),
        ("WebShop · late", 0.23, 7.54, 7.31),
        ("SciWorld · early", 0.32, 2.82, 2.50),
        ("SciWorld · mid", 0.43, 3.65, 3.22),
        ("SciWorld · late", 0.34, 3.78, 3.44),
    ),
    (2, 2, 2),
)

ECHO_TIME = PublishedTable(
    ECHO, "Table 7",
    "Wall-clock training time (seconds) split into ECHO's stages, against GRPO on the same set-up (Qwen3-4B).",
    ("WebShop", "ALFWorld", "SciWorld", "DeepSearch"),
    _rows(
        ("policy rollout (ECHO)", 10, 14, 10, 17),
        ("critic rollout", 10, 8, 9, 10),
        ("refinement", 272, 541, 192, 581),
        ("total ECHO", 327, 592, 231, 649),
        ("GRPO rollout", 259, 502, 168, 552),
        ("total GRPO", 273, 519, 184, 581),
        ("overhead (%)", 19, 14, 25, 11),
    ),
    (0, 0, 0, 0),
)

SELF_GUIDE_MAIN = PublishedTable(
    SELF_GUIDE, "Table 1",
    "Prompting baselines and RL variants on three benchmarks and three backbones: ALFWorld success over all task "
    "types, ScienceWorld and WebShop success and score (%).",
    ("ALFWorld all", "SciWorld success", "SciWorld score", "WebShop success", "WebShop score"),
    _rows(
        ("Qwen3-4B · ReAct", 20.3, 9.9, 12.4, 11.3, 31.1),
        ("Qwen3-4B · Reflexion", 37.1, 16.4, 10.9, 24.0, 57.8),
        ("Qwen3-4B · ReFlAct", 38.6, 9.0, 11.8, 16.0, 35.1),
        ("Qwen3-4B · ReAct w/ SG", 58.6, 10.4, 13.1, 17.6, 42.7),
        ("Qwen3-4B · GRPO", 86.7, 59.3, 51.4, 71.9, 84.3),
        ("Qwen3-4B · GRPO w/ SG", 91.4, 62.6, 60.4, 77.3, 87.0),
        ("Qwen3-4B · GRPO w/ SG & GR", 96.9, 65.0, 61.6, 78.1, 87.8),
        ("Qwen3-1.7B · ReAct", 10.2, 0.9, 1.0, 4.7, 41.6),
        ("Qwen3-1.7B · Reflexion", 16.4, 12.3, 11.8, 16.0, 39.8),
        ("Qwen3-1.7B · ReFlAct", 12.9, 0.9, 1.2, 4.4, 37.5),
        ("Qwen3-1.7B · ReAct w/ SG", 21.1, 1.4, 5.3, 5.4, 39.7),
        ("Qwen3-1.7B · GRPO", 72.7, 42.6, 23.5, 32.0, 63.0),
        ("Qwen3-1.7B · GRPO w/ SG", 81.3, 49.3, 25.3, 49.2, 76.7),
        ("Qwen3-1.7B · GRPO w/ SG & GR", 89.8, 52.1, 28.0, 56.3, 79.4),
        ("Qwen2.5-7B · ReAct", 42.2, 3.1, 3.3, 7.8, 19.6),
        ("Qwen2.5-7B · Reflexion", 45.0, 21.8, 10.0, 29.0, 62.1),
        ("Qwen2.5-7B · ReFlAct", 47.1, 8.5, 6.0, 10.2, 28.6),
        ("Qwen2.5-7B · ReAct w/ SG", 55.5, 10.0, 11.4, 13.3, 31.4),
        ("Qwen2.5-7B · GRPO", 83.6, 64.0, 62.7, 65.6, 77.5),
        ("Qwen2.5-7B · GRPO w/ SG", 92.2, 72.5, 69.4, 76.6, 89.3),
        ("Qwen2.5-7B · GRPO w/ SG & GR", 95.3, 75.4, 72.6, 80.5, 90.1),
    ),
    (1, 1, 1, 1, 1),
)

SELF_GUIDE_SCHEDULE = PublishedTable(
    SELF_GUIDE, "schedule ablation (section 4.4, Figure 5)",
    "Final validation success (%) of Qwen3-1.7B on WebShop under other schedules of the guidance reward; the "
    "early-entry runs appear in the figure only.",
    ("final validation success",),
    _rows(
        ("self-guidance only (no guidance reward)", 49.2),
        ("immediate full reward", 39.7),
        ("early entry", None),
        ("no annealing", 53.2),
        ("full trapezoid schedule", 56.3),
    ),
    (1,),
)

CSO_MAIN = PublishedTable(
    CSO, "Table 1",
    "Accuracy (%) of post-training methods applied to the same SFT agent (CK-Pro-8B), on all of GAIA-Text-103 "
    "and on XBench-DeepSearch.",
    ("GAIA-Text-103", "XBench-DeepSearch"),
    _rows(
        ("CK-Pro-8B (SFT start)", 35.9, 23.0),
        ("+ ETO", 38.9, 22.0),
        ("+ RFT", 34.9, 20.0),
        ("+ Step-DPO", 38.9, 25.0),
        ("+ IPR", 44.6, 24.0),
        ("+ CSO", 49.5, 29.0),
    ),
    (1, 1),
)

CSO_SELECTION = PublishedTable(
    CSO, "Table 3",
    "CSO with PRM selection and outcome verification, without the PRM (every alternative verified) and without "
    "verification (PRM-selected pairs kept unchecked): GAIA-Text accuracy (%) and preference pairs built.",
    ("GAIA-Text", "preference pairs"),
    _rows(
        ("PRM + verification", 49.5, 671),
        ("w/o PRM", 48.5, 1967),
        ("w/o verification", 43.6, 4126),
    ),
    (1, 0),
)

CSO_BRANCHES = PublishedTable(
    CSO, "Table 4",
    "CSO with k alternatives sampled at each step: accuracy (%) on GAIA-Text and XBench-DeepSearch.",
    ("GAIA-Text", "XBench-DeepSearch"),
    _rows(
        ("k = 3", 46.6, 26.0),
        ("k = 5", 49.6, 29.0),
        ("k = 7", 49.6, 28.0),
    ),
    (1, 1),
)

_TIDE_MODELS = (
    "Qwen3-4B-Instruct", "Qwen3-30B-A3B-Instruct", "Llama-3.1-8B-Instruct", "Llama-3.3-70B-Instruct", "GLM-4-9B-Chat",
    "GLM-4-32B-0414", "Mistral-7B-Instruct", "Ministral-3-14B-Instruct", "Phi-4", "DeepSeek-V3.2", "Gemini 2.5 Flash",
    "Qwen3-4B-Thinking", "Qwen3-30B-A3B-Thinking", "Phi-4-reasoning", "gpt-oss-120b", "DeepSeek-R1", "Gemini 2.5 Pro",
)


def _per_model(values: tuple[tuple[float, ...], ...]) -> tuple[PublishedRow, ...]:
    """TIDE's rows, one per model of `_TIDE_MODELS`, in that order."""
    return tuple(PublishedRow(model, row) for model, row in zip(_TIDE_MODELS, values, strict=True))


#: TIDE's five environments, in its tables' order; the bench plays ALFWorld's tasks in `household`.
TIDE_ENVIRONMENTS = ("BlocksWorld", "FrozenLake", "Sudoku", "ALFWorld", "WebShop")

TIDE_AUV = PublishedTable(
    TIDE, "Table 1",
    "Success rate (SR) and area under the P_t curve (AUV), in %, of open and proprietary models on five "
    "environments.",
    tuple(f"{env} {metric}" for env in TIDE_ENVIRONMENTS for metric in ("SR", "AUV")),
    _per_model((
        (40.0, 30.8, 59.0, 46.1, 29.0, 19.3, 52.1, 38.3, 15.0, 9.6),
        (64.0, 45.4, 61.0, 49.0, 77.0, 48.8, 62.1, 48.1, 20.8, 13.7),
        (32.0, 21.9, 12.0, 8.4, 4.0, 2.1, 16.4, 12.8, 20.8, 13.1),
        (96.0, 68.2, 44.0, 34.7, 40.0, 24.9, 59.3, 46.7, 26.8, 17.6),
        (23.0, 18.2, 10.0, 7.2, 4.0, 2.0, 25.7, 21.8, 16.4, 11.5),
        (83.0, 57.5, 67.0, 49.9, 55.0, 34.4, 37.9, 29.0, 25.4, 17.2),
        (7.0, 5.0, 6.0, 4.6, 1.0, 0.4, 8.6, 7.6, 6.6, 4.4),
        (72.0, 39.0, 56.0, 35.8, 18.0, 13.3, 22.1, 15.8, 15.2, 5.4),
        (56.0, 41.2, 66.0, 50.8, 33.0, 21.4, 25.0, 18.6, 18.8, 12.2),
        (98.0, 71.1, 97.0, 73.1, 93.0, 56.8, 80.7, 59.0, 41.0, 24.8),
        (99.0, 72.0, 97.0, 70.7, 97.0, 60.4, 78.6, 58.1, 35.0, 21.6),
        (77.0, 47.9, 91.0, 66.7, 55.0, 30.7, 57.1, 40.9, 12.2, 8.2),
        (98.0, 69.8, 93.0, 68.0, 95.0, 55.6, 66.4, 50.7, 21.0, 14.6),
        (68.0, 51.3, 62.0, 48.8, 51.0, 37.4, 15.7, 9.8, 22.6, 14.3),
        (100.0, 73.7, 99.0, 73.8, 97.0, 60.2, 50.7, 29.0, 26.2, 11.1),
        (100.0, 74.9, 96.0, 72.6, 95.0, 59.4, 83.6, 64.1, 38.4, 24.1),
        (100.0, 75.2, 100.0, 75.0, 99.0, 60.2, 80.7, 62.9, 43.2, 27.1),
    )),
    (1,) * 10,
)

TIDE_LOOPS = PublishedTable(
    TIDE, "Table 2",
    "Loop Ratio (%): the share of actions that repeat a cycle the agent had just completed.",
    TIDE_ENVIRONMENTS,
    _per_model((
        (15.8, 32.0, 22.5, 0.3, 36.7),
        (1.0, 37.7, 4.2, 0.5, 5.7),
        (3.2, 5.4, 14.7, 0.9, 2.1),
        (0.0, 9.5, 2.7, 0.0, 1.6),
        (7.6, 16.7, 9.5, 0.8, 1.5),
        (1.2, 5.1, 5.8, 0.0, 0.1),
        (51.0, 63.3, 15.7, 10.4, 17.5),
        (6.0, 4.3, 6.9, 2.7, 4.0),
        (12.3, 24.3, 21.0, 0.2, 2.6),
        (0.0, 0.0, 0.1, 0.0, 0.0),
        (0.0, 1.0, 0.6, 0.3, 0.2),
        (28.5, 9.8, 34.3, 4.4, 4.5),
        (2.0, 5.3, 2.2, 1.3, 0.7),
        (5.2, 1.4, 1.0, 1.4, 35.7),
        (1.0, 0.7, 0.0, 9.5, 9.2),
        (0.0, 0.0, 0.0, 0.0, 0.1),
        (0.0, 0.2, 0.1, 0.0, 0.0),
    )),
    (1,) * 5,
)
