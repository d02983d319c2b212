"""ECHO's analyses of a training run: failure drift across training, and what a judge makes of the critiques.

`hindsight echo-analyze RUN_DIR --out DIR` runs both on what an ECHO run logged; nothing is
trained or rolled out again.

Failure drift (the paper's RQ2). The failures are the policy's unsolved initial attempts of
`trajectories/initial.jsonl` (`failures: eval`: the unsolved tasks of the periodic
validation evaluations, `eval-validation-NNNNNN.jsonl`, the same tasks at every checkpoint,
as in the paper). The run's updates are cut into `stages` ranges. Each failure becomes a text
(`embed_text`): `trajectory`, its moves and the environment's answers, which depends on the
policy alone; `critique`, what the run's critic wrote about it (all its critiques, their
embeddings averaged), which mixes in how the critic changed; `diagnosis`, one sentence from
the judge on what went wrong, a fixed outside reader as in the paper. The texts are
embedded (MiniLM by default), drawn in 2-D (t-SNE) coloured by stage, and summarised by the
drift number of `algos.echo_analysis.failure_drift`.

Critiques (the paper's appendix C.3). Every refinement of `trajectories/train.jsonl` carries
the critique it was made with. Critiques with advice (not "none") are sampled per stage
and the judge rates each one's granularity (generic, targeted, pinpointed) and whether
the refinement addressed the issue it raised (yes, no, unclear). The tallies are per
stage, split by whether the refinement improved on its attempt (s_r > s_o).

Outputs in DIR, written here: `analysis.json` (every number), `failure-embedding.json` (each
failure's 2-D point, stage and text), `critique-ratings.jsonl` (each rated critique with the
judge's answers). The command adds `failure-drift.svg`, `critique-granularity.svg`,
`issue-addressed.svg` and `index.html`, which shows them all and needs nothing beyond itself
(`hindsight.cli.echo_page`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hindsight.agent.critique_judge import CritiqueCase, CritiqueJudge
from hindsight.algos.echo_analysis import (
    DRIFT_DEFINITION, Drift, RatedCritique, RatingTables, RatingTally, Stage, failure_drift, sample_per_stage, split_stages, stage_of,
    tally_ratings,
)
from hindsight.configs import ConfigError
from hindsight.diagnostics.embedding import Embedder, project_2d
from hindsight.logs import read_trajectories
from hindsight.logs.writer import rewrite_jsonl
from hindsight.types import Trajectory

FAILURE_SOURCES = ("initial", "eval")
EMBED_TEXTS = ("trajectory", "critique", "diagnosis")
#: Moves of a failure that its `trajectory` text keeps: the last ones, where it went wrong. The
#: encoder reads 256 tokens at most, and a long episode's opening moves would crowd out its end.
TEXT_MOVES = 8
#: Characters of a failure's text kept in failure-embedding.json and in the chart's tooltips.
SHOWN_CHARS = 300
_EVAL_FILE = re.compile(r"eval-validation-(\d{6})\.jsonl$")


@dataclass(frozen=True)
class AnalysisOptions:
    """What `analyse_echo_run` does. Caps are per stage (0: no cap); sampling under a cap is seeded."""

    stages: int = 3
    failures: str = "initial"
    embed_text: str = "trajectory"
    projection: str = "tsne"
    max_failures: int = 500
    max_critiques: int = 100
    permutations: int = 200
    seed: int = 0
    drift: bool = True

    def __post_init__(self) -> None:
        if self.stages < 1:
            raise ConfigError("stages must be >= 1")
        if self.failures not in FAILURE_SOURCES:
            raise ConfigError(f"failures must be one of {', '.join(FAILURE_SOURCES)}, not {self.failures!r}")
        if self.embed_text not in EMBED_TEXTS:
            raise ConfigError(f"embed_text must be one of {', '.join(EMBED_TEXTS)}, not {self.embed_text!r}")
        if self.embed_text == "critique" and self.failures != "initial":
            raise ConfigError("embed_text: critique needs failures: initial (evaluations are not critiqued)")
        if min(self.max_failures, self.max_critiques, self.permutations) < 0:
            raise ConfigError("max_failures, max_critiques and permutations must be >= 0")


@dataclass(frozen=True)
class EchoLogs:
    """What an ECHO run logged: initial attempts, refinements, and (step, trajectory) of its evaluations."""

    run: Path
    initial: tuple[Trajectory, ...]
    refinements: tuple[Trajectory, ...]
    evaluations: tuple[tuple[int, Trajectory], ...]
    skipped_lines: int

    def updates(self, failures: str) -> list[int]:
        """Every update the logs of this failure source (and the refinements) mention."""
        found = [_update(t) for t in (*self.initial, *self.refinements)]
        if failures == "eval":
            found += [step for step, _ in self.evaluations]
        return sorted({u for u in found if u is not None})


def _update(trajectory: Trajectory) -> int | None:
    update = trajectory.meta.get("update")
    return update if isinstance(update, int) and not isinstance(update, bool) else None


def _echo(trajectory: Trajectory) -> dict[str, Any]:
    echo = trajectory.meta.get("echo")
    return echo if isinstance(echo, dict) else {}


def read_echo_logs(run_dir: str | Path) -> EchoLogs:
    """The logs of an ECHO run directory; ConfigError (one line) when it is not one."""
    from hindsight.diagnostics.runs import read_run_config

    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"{run} is not a directory")
    if read_run_config(run).get("kind") != "echo":
        raise ConfigError(f"{run} is not an ECHO run directory (its config.yaml has no kind: echo)")
    trajectories = run / "trajectories"
    if not (trajectories / "initial.jsonl").is_file():
        raise ConfigError(f"{run} has no trajectories/initial.jsonl: the run logged no update yet")
    skipped = []
    initial = tuple(read_trajectories(trajectories / "initial.jsonl", skipped.append))
    train = trajectories / "train.jsonl"
    refinements = tuple(t for t in (read_trajectories(train, skipped.append) if train.is_file() else ())
                        if _echo(t))
    evaluations = []
    for path in sorted(trajectories.glob("eval-validation-*.jsonl")):
        match = _EVAL_FILE.search(path.name)
        if match:
            evaluations += [(int(match.group(1)), t) for t in read_trajectories(path, skipped.append)]
    return EchoLogs(run, initial, refinements, tuple(evaluations), len(skipped))


def trajectory_text(trajectory: Trajectory) -> str:
    """A failure as text: its last TEXT_MOVES moves with the first line of each answer, and how it ended.

    The task's instruction is left out: it is the same for every task of an environment and
    would pull every failure towards it.
    """
    lines = []
    for step in trajectory.steps[-TEXT_MOVES:]:
        answer = next((line.strip() for line in step.feedback.splitlines() if line.strip()), "")
        lines.append(f"{step.action if step.action is not None else '(unreadable answer)'} -> {answer}")
    ending = next((line.strip() for line in trajectory.final_observation.splitlines() if line.strip()), "")
    skipped = trajectory.num_steps - TEXT_MOVES
    head = f"({skipped} earlier moves)\n" if skipped > 0 else ""
    return head + "\n".join(lines) + f"\nEnd: {ending}" + f" (score {trajectory.score:.2f})"


def _advice(trajectory: Trajectory) -> str:
    """The critique a refinement was made with, or "" when it gave no advice ("none", empty)."""
    from hindsight.agent.critic import ParsedCritique

    critique = _echo(trajectory).get("critique")
    return ParsedCritique(None, critique).advice.strip() if isinstance(critique, str) else ""


# -- failure drift -------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A failed attempt placed in a stage, with the texts that stand for it."""

    trajectory: Trajectory
    update: int
    stage: int
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailurePoint:
    """One failure on the 2-D map (failure-embedding.json)."""

    id: str
    seed: int
    update: int
    stage: int
    score: float
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class FailureAnalysis:
    """The failure-drift half of analysis.json."""

    source: str
    embed_text: str
    embedder: str
    projection: str
    failures_per_stage: tuple[int, ...]
    analysed_per_stage: tuple[int, ...]
    without_text: int
    drift: Drift
    excess_drift: float | None
    points: tuple[FailurePoint, ...]


def collect_failures(logs: EchoLogs, stages: Sequence[Stage], source: str) -> list[Failure]:
    """The unsolved attempts of `source` that fall in a stage, in log order."""
    pairs = ([(_update(t), t) for t in logs.initial] if source == "initial"
             else [(step, t) for step, t in logs.evaluations])
    failures = []
    for update, trajectory in pairs:
        stage = stage_of(update, stages) if update is not None else None
        if stage is not None and not trajectory.success:
            failures.append(Failure(trajectory, update, stage))
    return failures


def attach_texts(failures: Sequence[Failure], logs: EchoLogs, embed_text: str,
                 judge: CritiqueJudge | None) -> list[Failure]:
    """Each failure with its texts (`embed_text`); failures left without any text are dropped."""
    if embed_text == "trajectory":
        texts = [(trajectory_text(f.trajectory),) for f in failures]
    elif embed_text == "critique":
        by_group: dict[tuple[int | None, str], list[str]] = {}
        for refinement in logs.refinements:
            advice = _advice(refinement)
            if advice:
                by_group.setdefault((_update(refinement), str(_echo(refinement).get("group"))), []).append(advice)
        texts = [tuple(by_group.get((f.update, str(_echo(f.trajectory).get("group"))), ())) for f in failures]
    else:
        if judge is None:
            raise ConfigError("embed_text: diagnosis needs a judge (--judge SPEC) to write the diagnoses")
        verdicts = judge.diagnose([f.trajectory for f in failures])
        texts = [(v.value,) if v.value else () for v in verdicts]
    return [Failure(f.trajectory, f.update, f.stage, t) for f, t in zip(failures, texts, strict=True) if t]


def embed_failures(failures: Sequence[Failure], embedder: Embedder) -> np.ndarray:
    """[n, d]: each failure's texts embedded, the rows of one failure averaged (then made unit length)."""
    flat = [text for f in failures for text in f.texts]
    vectors = np.asarray(embedder.embed(flat), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(flat):
        raise ValueError(f"the embedder returned shape {vectors.shape} for {len(flat)} texts")
    rows, start = [], 0
    for failure in failures:
        mean = vectors[start:start + len(failure.texts)].mean(axis=0)
        norm = np.linalg.norm(mean)
        rows.append(mean / norm if norm > 0 else mean)
        start += len(failure.texts)
    return np.stack(rows) if rows else np.zeros((0, vectors.shape[1]))


def analyse_failures(logs: EchoLogs, stages: Sequence[Stage], options: AnalysisOptions,
                     load_embedder: Callable[[], Embedder], judge: CritiqueJudge | None) -> FailureAnalysis:
    found = collect_failures(logs, stages, options.failures)
    if not found:
        where = "initial attempts" if options.failures == "initial" else "validation evaluations"
        raise ConfigError(f"{logs.run}: no unsolved {where}, so there is no failure to embed "
                          "(try --failures eval or --failures initial, or --no-drift)")
    per_stage = tuple(sum(f.stage == s.index for f in found) for s in stages)
    sampled = sample_per_stage(found, lambda f: f.stage, options.max_failures, options.seed)
    with_text = attach_texts(sampled, logs, options.embed_text, judge)
    if not with_text:
        raise ConfigError(f"{logs.run}: none of the {len(sampled)} failures has a {options.embed_text} text to embed")
    embedder = load_embedder()
    vectors = embed_failures(with_text, embedder)
    drift = failure_drift(vectors, [f.stage for f in with_text], len(stages), permutations=options.permutations,
                          seed=options.seed)
    coords, method = project_2d(vectors, options.projection, options.seed)
    points = tuple(FailurePoint(f.trajectory.id, f.trajectory.seed, f.update, f.stage, f.trajectory.score,
                                float(x), float(y), f.texts[0][:SHOWN_CHARS])
                   for f, (x, y) in zip(with_text, coords))
    return FailureAnalysis(
        source=options.failures, embed_text=options.embed_text, embedder=embedder.name, projection=method,
        failures_per_stage=per_stage, analysed_per_stage=tuple(sum(f.stage == s.index for f in with_text)
                                                               for s in stages),
        without_text=len(sampled) - len(with_text), drift=drift, excess_drift=drift.excess, points=points)


# -- critiques -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RatedCase:
    """One rated critique (a line of critique-ratings.jsonl)."""

    update: int
    stage: int
    group: str
    sample: int | None
    s_o: float
    s_r: float
    improved: bool
    critique: str
    granularity: str | None
    granularity_error: str | None
    granularity_answer: str
    addressed: str | None
    addressed_error: str | None
    addressed_answer: str


@dataclass(frozen=True)
class StageCritiques:
    """How many critiques a stage logged, how many gave advice, and how many of those were rated."""

    stage: int
    logged: int
    with_advice: int
    rated: int


@dataclass(frozen=True)
class CritiqueAnalysis:
    """The critique half of analysis.json."""

    judge: str
    counts: tuple[StageCritiques, ...]
    tables: RatingTables
    unread_granularity: int
    unread_addressed: int
    cases: tuple[RatedCase, ...]


def _score(echo: dict[str, Any], key: str) -> float | None:
    value = echo.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def analyse_critiques(logs: EchoLogs, stages: Sequence[Stage], options: AnalysisOptions,
                      judge: CritiqueJudge, judge_name: str) -> CritiqueAnalysis:
    attempts = {(_update(t), str(_echo(t).get("group"))): t for t in logs.initial}
    entries = []  # (stage, refinement, advice)
    logged = [0] * len(stages)
    for refinement in logs.refinements:
        update = _update(refinement)
        stage = stage_of(update, stages) if update is not None else None
        echo = _echo(refinement)
        if stage is None or _score(echo, "s_o") is None or _score(echo, "s_r") is None:
            continue
        logged[stage] += 1
        advice = _advice(refinement)
        if advice:
            entries.append((stage, refinement, advice))
    if not entries:
        raise ConfigError(f"{logs.run}: no critique with advice in trajectories/train.jsonl, so there is nothing "
                          "for the judge to rate (a no_critic run, or a critic that only wrote 'none')")
    with_advice = [sum(e[0] == k for e in entries) for k in range(len(stages))]
    chosen = sample_per_stage(entries, lambda e: e[0], options.max_critiques, options.seed)
    cases = [CritiqueCase(attempts.get((_update(r), str(_echo(r).get("group")))), advice, r) for _, r, advice in chosen]
    granularity = judge.granularity(cases)
    addressed = judge.addressed(cases)
    rated, records = [], []
    for (stage, refinement, advice), level, verdict in zip(chosen, granularity, addressed, strict=True):
        echo = _echo(refinement)
        s_o, s_r = _score(echo, "s_o"), _score(echo, "s_r")
        sample = echo.get("sample")
        rated.append(RatedCritique(stage, s_r > s_o, level.value, verdict.value))
        records.append(RatedCase(
            update=_update(refinement), stage=stage, group=str(echo.get("group")),
            sample=sample if isinstance(sample, int) else None, s_o=s_o, s_r=s_r, improved=s_r > s_o,
            critique=advice, granularity=level.value.value if level.value else None, granularity_error=level.error,
            granularity_answer=level.text, addressed=verdict.value.value if verdict.value else None,
            addressed_error=verdict.error, addressed_answer=verdict.text))
    counts = tuple(StageCritiques(k, logged[k], with_advice[k], sum(r.stage == k for r in rated))
                   for k in range(len(stages)))
    return CritiqueAnalysis(judge_name, counts, tally_ratings(rated, len(stages)),
                            sum(r.granularity is None for r in rated), sum(r.addressed is None for r in rated),
                            tuple(records))


# -- the whole analysis --------------------------------------------------------------------


@dataclass(frozen=True)
class EchoAnalysis:
    """Everything `hindsight echo-analyze` found; `failures` / `critiques` are None when not asked for."""

    run: str
    options: AnalysisOptions
    stages: tuple[Stage, ...]
    failures: FailureAnalysis | None
    critiques: CritiqueAnalysis | None
    skipped_lines: int


def tally_json(tally: RatingTally) -> dict[str, Any]:
    """A tally's counts with its derived shares and rates, for analysis.json."""
    from hindsight.algos.echo_analysis import Granularity

    return {**asdict(tally), "mean_granularity": tally.mean_granularity,
            "issue_addressed_rate": tally.issue_addressed_rate,
            **{f"{level.value}_share": tally.granularity_share(level) for level in Granularity}}


def analysis_json(analysis: EchoAnalysis) -> dict[str, Any]:
    """analysis.json: the numbers, without the per-point and per-critique lists (they have files of their own)."""
    out: dict[str, Any] = {
        "run": analysis.run, "options": asdict(analysis.options),
        "stages": [{**asdict(s), "label": s.label} for s in analysis.stages],
        "skipped_log_lines": analysis.skipped_lines, "failure_drift": None, "critiques": None,
    }
    if analysis.failures is not None:
        failures = asdict(analysis.failures)
        failures.pop("points")
        out["failure_drift"] = {**failures, "definition": DRIFT_DEFINITION}
    if analysis.critiques is not None:
        critiques = analysis.critiques
        out["critiques"] = {
            "judge": critiques.judge, "counts": [asdict(c) for c in critiques.counts],
            "unread_granularity": critiques.unread_granularity, "unread_addressed": critiques.unread_addressed,
            "per_stage": [{"stage": s.stage, "all": tally_json(s.all), "improved": tally_json(s.improved),
                           "not_improved": tally_json(s.not_improved)} for s in critiques.tables.stages],
            "overall": {"all": tally_json(critiques.tables.overall.all),
                        "improved": tally_json(critiques.tables.overall.improved),
                        "not_improved": tally_json(critiques.tables.overall.not_improved)},
        }
    return out


def analyse_echo_run(
    run_dir: str | Path, out: str | Path, options: AnalysisOptions = AnalysisOptions(), *,
    embedder: Callable[[], Embedder] | None = None, judge: CritiqueJudge | None = None,
    judge_name: str = "",
) -> EchoAnalysis:
    """Both analyses of an ECHO run, their data written to `out` (module docstring). `embedder` loads the
    encoder; it is called only once the logs have been read and the drift is asked for, so a
    bad run directory fails before a model loads. The critiques are rated only with a `judge`."""
    if not options.drift and judge is None:
        raise ConfigError("nothing to do: the drift is off and no judge was given to rate critiques")
    logs = read_echo_logs(run_dir)
    updates = logs.updates(options.failures)
    if not updates:
        raise ConfigError(f"{logs.run}: its logs name no update")
    stages = split_stages(updates[0], updates[-1], options.stages)
    failures = None
    if options.drift:
        if embedder is None:
            raise ConfigError("the failure drift needs an embedder")
        failures = analyse_failures(logs, stages, options, embedder, judge)
    critiques = analyse_critiques(logs, stages, options, judge, judge_name) if judge is not None else None
    analysis = EchoAnalysis(str(run_dir), options, stages, failures, critiques, logs.skipped_lines)
    write_analysis(analysis, Path(out))
    return analysis


def write_analysis(analysis: EchoAnalysis, out: Path) -> None:
    """The data files of an analysis in `out`: analysis.json, and the points and ratings it has.

    The charts and the page that show them are the command's (`hindsight.cli.echo_page`).
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(analysis_json(analysis), indent=2) + "\n", encoding="utf-8")
    if analysis.failures is not None:
        points = {"run": analysis.run, "embedder": analysis.failures.embedder,
                  "projection": analysis.failures.projection, "embed_text": analysis.failures.embed_text,
                  "stages": [{**asdict(s), "label": s.label} for s in analysis.stages],
                  "points": [asdict(p) for p in analysis.failures.points]}
        (out / "failure-embedding.json").write_text(json.dumps(points, indent=1) + "\n", encoding="utf-8")
    if analysis.critiques is not None:
        rewrite_jsonl(out / "critique-ratings.jsonl", [asdict(c) for c in analysis.critiques.cases])
