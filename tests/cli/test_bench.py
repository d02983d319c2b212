"""`hindsight bench`: the plan's commands, resuming and skipping cells, failures, the report, the CLI.

Most tests run the bench with a fake executor that plays `hindsight` by writing the files each
command would write, so they take milliseconds; one runs a real evaluation cell end to end.
"""

import html
import json
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from hindsight.bench.cells import BLOCKED, DONE, FAILED, CellRecord, Diagnose, Evaluate, Metrics, ReadoutError, Train
from hindsight.bench.page import render_page
from hindsight.bench.plan import FULL, QUICK, Target, build_plan, yaml_text
from hindsight.bench.published import ECHO_MAIN, TIDE_AUV
from hindsight.bench.runner import check_settings, read_records, run_bench, run_cell
from hindsight.cli.main import build_parser, main


def _after(args, flag):
    return Path(args[args.index(flag) + 1])


class FakeHindsight:
    """Plays `hindsight` for the runner: records each invocation and writes what the real command
    would leave behind (run summaries, metrics, echo-compare numbers, a diagnosis, a report).
    Cells whose names are in `fail` exit with code 1 after writing an error to the log."""

    def __init__(self, fail=(), interrupt=(), ctrl_c=()):
        self.calls, self.cores = [], []
        self.fail, self.interrupt, self.ctrl_c = set(fail), set(interrupt), set(ctrl_c)
        self.stopped = False
        self._lock = threading.Lock()

    def run(self, invocation, log, core):
        args = invocation.args
        with self._lock:
            self.calls.append(args)
            self.cores.append(core)
        cell = log.parent.name
        if cell in self.interrupt:
            raise KeyboardInterrupt
        if cell in self.ctrl_c:
            return 130  # what `hindsight` returns when Ctrl-C stops it
        if cell in self.fail:
            log.write_text("Traceback (most recent call last):\nValueError: boom\n", encoding="utf-8")
            return 1
        command = args[0]
        if command in ("train", "eval"):
            run = _after(args, "--resume") if "--resume" in args else _after(args, "--out")
            run.mkdir(parents=True, exist_ok=True)
            (run / "config.yaml").write_text("kind: fake\n", encoding="utf-8")
            (run / "summary.json").write_text(json.dumps({"success_rate": 0.5, "mean_score": 0.75, "episodes": 4}))
            rows = [{"step": 1, "timing/policy_rollout_s": 2.0, "timing/critic_rollout_s": 3.0, "timing/refine_s": 4.0,
                     "timing/update_s": 1.0, "timing/rollout_s": 5.0, "cso/pairs": 3}]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif command == "echo-compare":
            out = _after(args, "--out")
            out.mkdir(parents=True, exist_ok=True)
            (out / "summary.json").write_text(json.dumps({"regeneration_gain": 0.01, "critic_gain": 0.05,
                                                           "relative_gain": 0.04}))
        elif command == "diagnose":
            invocation.stdout.write_text(json.dumps({"success_rate": 0.25, "auv": 0.125, "loop_ratio": 0.5}) + "\n")
        elif command == "report":
            out = _after(args, "-o")
            out.mkdir(parents=True, exist_ok=True)
            (out / "index.html").write_text("<html></html>")
        return 0

    def stop(self):
        self.stopped = True


def _plan(tmp_path, scale=QUICK, target=Target()):
    plan = build_plan(scale, target, tmp_path / "bench")
    check_settings(plan)
    return plan


def _select(plan, prefix):
    return [c.name for c in plan.cells if c.name.startswith(prefix)]


def _parse(args):
    return build_parser().parse_args(list(args))


@pytest.mark.parametrize("scale,target", [(QUICK, Target()), (FULL, Target()),
                                          (QUICK, Target("hf:/models/tiny+runs/x", "blocksworld"))])
def test_every_command_of_the_plan_is_valid_for_the_cli_and_its_config(tmp_path, scale, target):
    from hindsight.configs import load_config, parse_overrides
    from hindsight.envs import make
    from hindsight.llm import parse_spec
    from hindsight.methods.registry import load_training_methods

    plan = build_plan(scale, target, tmp_path / "bench")
    for cell in plan.cells:
        for step in cell.steps:
            args = _parse(step.command().args)
            assert args.command == step.command().args[0]
            if isinstance(step, Train):
                # What `hindsight train` does before it trains: load the recipe with the overrides.
                config = load_config(load_training_methods().get(args.method).config, args.config, args.overrides)
                assert config.env == ("blocksworld" if target.env else "frozenlake")
                run = step.run
                run.mkdir(parents=True)
                (run / "config.yaml").write_text("kind: x\n")
                assert _parse(step.next().args).resume == str(run)
            elif isinstance(step, Evaluate):
                make(args.env, **parse_overrides(args.env_kwargs))
                parse_spec(args.model)
            elif isinstance(step, Diagnose):
                assert args.json and args.paths == [str(step.run)]


def test_the_quick_plan_fits_thirty_minutes_on_two_cores(tmp_path):
    # The budgets are measured times (27m43s for the whole quick bench on 2026-11-24, idle, 2 jobs).
    plan = build_plan(QUICK, Target(), tmp_path)
    assert sum(c.budget_s for c in plan.cells) / 2 <= 30 * 60


def test_the_quick_plan_says_it_is_a_smoke_scale_and_covers_every_table(tmp_path):
    plan = build_plan(QUICK, Target(), tmp_path)
    assert QUICK.smoke and not FULL.smoke
    assert len(FULL.seeds) >= 3 and FULL.test_tasks >= 300
    papers = {c.paper for c in plan.cells}
    assert papers == {"ECHO", "Self-Guide", "CSO", "TIDE"}
    tables = {(t.published.paper, t.published.table) for t in plan.tables}
    assert ("ECHO", "Table 7") in tables and ("CSO", "Table 4") in tables and ("TIDE", "Table 2") in tables
    assert len(plan.tables) == 10


@pytest.mark.parametrize("native", [True, False])
def test_self_guide_cells_train_in_bfloat16_only_where_the_cpu_has_it(tmp_path, monkeypatch, native):
    from hindsight.llm import hf

    monkeypatch.setattr(hf, "cpu_has_bf16", lambda: native)
    plan = build_plan(QUICK, Target(), tmp_path)
    trained = [step.command().args for cell in plan.cells if cell.paper == "Self-Guide" for step in cell.steps
               if isinstance(step, Train)]
    assert len(trained) >= 7  # the start and the six GRPO arms of a seed
    for args in trained:
        # The recipes say bfloat16; without bf16 instructions every run overrides it with auto.
        assert ("dtype=auto" in args) is not native
    # ECHO's and CSO's recipes leave the dtype at auto: no override either way.
    assert not any("dtype=auto" in step.command().args for cell in plan.cells if cell.paper != "Self-Guide"
                   for step in cell.steps if isinstance(step, Train))


def test_values_given_with_set_read_back_as_themselves():
    for value in ("oracle", "", "Reply with one move: <action>up</action>.", 5e-5, 0.1, 3, True,
                  {"size": 5, "max_steps": 10, "score": "progress"}, "runs/a b"):
        assert yaml.safe_load(yaml_text(value)) == value


def test_cells_that_cannot_run_here_say_why(tmp_path):
    api = build_plan(QUICK, Target("openai:gpt-4o-mini"), tmp_path)
    blocked = {c.name: c.blocker for c in api.cells if c.blocker}
    assert "cannot be trained" in blocked["cso-cso-s0"]
    assert "needs echo-echo-s0" in blocked["echo-compare"]
    assert "sg-react" not in blocked and "tide-webshop" not in blocked  # prompting and evaluation still run
    no_oracle = build_plan(QUICK, Target("smollm2", "webshop-site"), tmp_path)
    reason = no_oracle.cell("cso-cso-s0").blocker
    assert "oracle" in reason and "webshop-site" in reason
    assert not no_oracle.cell("cso-rft-s0").blocker  # RFT needs no oracle


def test_a_finished_cell_is_not_run_again_and_an_interrupted_run_resumes(tmp_path):
    plan = _plan(tmp_path)
    echo = _select(plan, "echo-")
    fake = FakeHindsight()
    outcome = run_bench(plan, echo, fake, say=lambda line: None)
    assert outcome.ok and sorted(outcome.done) == sorted(echo)
    assert [a[0] for a in fake.calls].count("echo-compare") == 2  # the two phases of the quick scale
    records = read_records(plan)
    assert records["echo-compare"].values == {f"{p}/{k}": v for p in ("early", "late") for k, v in
                                              (("regeneration_gain", 0.01), ("critic_gain", 0.05),
                                               ("relative_gain", 0.04))}
    assert records["echo-echo-s0"].values["timing/refine_s"] == 4.0

    again = FakeHindsight()
    outcome = run_bench(plan, echo, again, say=lambda line: None)
    assert again.calls == [] and sorted(outcome.earlier) == sorted(echo)

    # A crash mid-run: no record, no summary, but the run's config is there: it resumes.
    grpo = plan.cell("echo-grpo-s0")
    grpo.record_path.unlink()
    (grpo.steps[0].run / "summary.json").unlink()
    resumed = FakeHindsight()
    run_bench(plan, echo, resumed, say=lambda line: None)
    assert resumed.calls == [("train", "grpo", "--resume", str(grpo.steps[0].run))]  # its report exists already


def test_an_interrupted_evaluation_continues_with_resume(tmp_path):
    plan = _plan(tmp_path)
    cell = plan.cell("tide-frozenlake")
    run = cell.steps[0].run
    (run / "trajectories").mkdir(parents=True)
    (run / "trajectories" / "eval.jsonl").write_text("")
    (run / "summary.json").write_text(json.dumps({"interrupted": True}))
    fake = FakeHindsight()
    record = run_cell(cell, fake, None, threading.Event())
    assert fake.calls[0] == ("eval", "--resume", str(run), "--json")
    assert fake.calls[1][0] == "diagnose" and record.status == DONE
    assert record.values == {"success_rate": 0.25, "auv": 0.125, "loop_ratio": 0.5}


def test_a_failed_cell_is_recorded_the_others_go_on_and_its_users_are_blocked(tmp_path):
    plan = _plan(tmp_path)
    chosen = _select(plan, "sg-")
    fake = FakeHindsight(fail={"sg-start"})
    lines = []
    outcome = run_bench(plan, chosen, fake, say=lines.append)
    assert not outcome.ok and outcome.failed == ["sg-start"]
    users = [c.name for c in plan.cells if "sg-start" in c.needs]
    assert sorted(outcome.blocked) == sorted(users)
    record = CellRecord.read(plan.cell("sg-start").record_path)
    assert record.status == FAILED and "exited with code 1" in record.error and "ValueError: boom" in record.error
    assert record.commands == plan.cell("sg-start").commands()
    assert CellRecord.read(plan.cell("sg-react").record_path).status == BLOCKED
    assert any(line.split(" ", 2)[1] == "FAILED" for line in lines)
    assert all("ETA" in line for line in lines if " start " in line)

    # The next bench retries the failed cell and, once it works, the cells it blocked.
    retry = FakeHindsight()
    outcome = run_bench(plan, chosen, retry, say=lambda line: None)
    assert outcome.ok and "sg-start" in outcome.done and "sg-attempts" in outcome.earlier


def test_a_metrics_readout_refuses_a_log_with_a_broken_line(tmp_path):
    rows = [{"step": 1, "timing/update_s": 2.0}, {"step": 2, "timing/update_s": 4.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    readout = Metrics(tmp_path, ("timing/update_s",))
    assert readout.read() == {"timing/update_s": 3.0}
    with (tmp_path / "metrics.jsonl").open("a") as log:
        log.write('{"step": 3, "timing/upd\n[1]\n')
    with pytest.raises(ReadoutError, match=r"metrics\.jsonl:3: invalid JSON: .* \(and 1 more\)$"):
        readout.read()


def test_two_jobs_run_on_their_own_cores_the_longest_chain_first(tmp_path):
    plan = _plan(tmp_path)
    fake = FakeHindsight()
    lines = []
    run_bench(plan, _select(plan, "sg-") + ["tide-sudoku"], fake, jobs=2, say=lines.append)
    assert set(fake.cores) == {0, 1}
    starts = [line.split()[2] for line in lines if line.split()[1] == "start"]
    assert starts[0] == "sg-attempts"  # every Self-Guide cell waits on it


def test_an_interrupt_stops_the_commands_and_leaves_the_cell_unrecorded(tmp_path):
    plan = _plan(tmp_path)
    fake = FakeHindsight(interrupt={"tide-sudoku"})
    with pytest.raises(KeyboardInterrupt):
        run_bench(plan, ["tide-sudoku"], fake, say=lambda line: None)
    assert fake.stopped and not plan.cell("tide-sudoku").record_path.exists()

    # A command stopped by Ctrl-C on its own: the cell stays unfinished, not failed, and the bench says so.
    lines = []
    outcome = run_bench(plan, ["tide-sudoku", "tide-webshop"], FakeHindsight(ctrl_c={"tide-sudoku"}), say=lines.append)
    assert outcome.interrupted and not outcome.ok and outcome.done == ["tide-webshop"] and not outcome.failed
    assert not plan.cell("tide-sudoku").record_path.exists()
    assert any("interrupted tide-sudoku" in line for line in lines)


class _Tables(HTMLParser):
    """The text of every table cell, per table class (published / ours), in document order."""

    def __init__(self):
        super().__init__()
        self.tables, self._cls, self._cell = [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "bench" in (attrs.get("class") or ""):
            self._cls = attrs["class"].split()[1]
            self.tables.append((self._cls, []))
        elif tag in ("td", "th") and self._cls:
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1].append(self._cell.strip())
            self._cell = None
        elif tag == "table":
            self._cls = None


def test_the_report_shows_the_published_table_beside_ours_with_the_commands(tmp_path):
    plan = _plan(tmp_path)
    records = {
        "echo-start": CellRecord("echo-start", DONE, {"success_rate": 0.5, "mean_score": 0.625}, wall_s=30),
        "echo-grpo-s0": CellRecord("echo-grpo-s0", DONE, {"success_rate": 0.75, "mean_score": 0.75}, wall_s=90),
        "echo-echo-s0": CellRecord("echo-echo-s0", FAILED, error="boom <script>"),
        "tide-sudoku": CellRecord("tide-sudoku", DONE, {"success_rate": 0.0, "auv": 0.0, "loop_ratio": 0.25}),
    }
    page = render_page(plan, records)
    parser = _Tables()
    parser.feed(page)
    kinds = [kind for kind, _ in parser.tables]
    assert kinds == ["published", "ours"] * len(plan.tables)
    echo_published, echo_ours = parser.tables[0][1], parser.tables[1][1]
    assert "90.03" in echo_published and ECHO_MAIN.rows[2].label in echo_published
    assert echo_ours[echo_ours.index("start (before RL)") + 1: echo_ours.index("start (before RL)") + 3] == ["50.0",
                                                                                                          "62.5"]
    assert echo_ours[echo_ours.index("GRPO") + 1] == "75.0"
    assert echo_ours[echo_ours.index("ECHO") + 1] == "–"  # its cell failed
    published = [t.published for t in plan.tables]
    tide_ours = parser.tables[2 * published.index(TIDE_AUV) + 1][1]
    header, row = tide_ours[:len(tide_ours) // 2], tide_ours[len(tide_ours) // 2:]
    assert row[0] == "smollm2" and row[header.index("sudoku SR")] == "0.0" and row[header.index("frozenlake SR")] == "–"
    assert "Smoke scale" in page and "not comparable" in page
    assert "boom &lt;script&gt;" in page and "<script>" not in page
    for command in plan.cell("echo-grpo-s0").commands():
        assert html.escape(command) in page
    full = render_page(build_plan(FULL, Target(), tmp_path / "full"), {})
    assert "Smoke scale" not in full


def test_cli_mistakes_are_one_line_errors(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("x")
    cases = [
        (["bench", "--quick", "--out", str(file)], "is a file"),
        (["bench", "--quick", "--out", str(tmp_path / "b"), "--only", "nosuch-*"], "no cell matches"),
        (["bench", "--quick", "--out", str(tmp_path / "b"), "--jobs", "0"], "--jobs"),
        (["bench", "--quick", "--out", str(tmp_path / "b"), "--model", "bogus:x"], "model"),
        (["bench", "--quick", "--out", str(tmp_path / "b"), "--env", "nosuchenv"], "unknown environment"),
        (["bench", "--quick"], "--out DIR is required"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err


def test_a_folder_holds_one_bench(tmp_path, capsys):
    check_settings(build_plan(QUICK, Target(), tmp_path / "b"))
    assert main(["bench", "--out", str(tmp_path / "b"), "--only", "tide-sudoku"]) == 2
    assert "choose another --out" in capsys.readouterr().err


def test_list_names_the_cells_their_budgets_and_what_they_need(capsys):
    assert main(["bench", "--quick", "--list", "--only", "echo-compare"]) == 0
    out = capsys.readouterr().out
    assert "echo-compare" in out and "needs echo-echo-s0" in out and "job(s) at once" in out


def test_a_real_evaluation_cell_end_to_end(tmp_path, capsys):
    """The TIDE cell on FrozenLake with the random policy: `hindsight eval` and `hindsight diagnose`
    as child processes, its record, and the report."""
    out = tmp_path / "bench"
    code = main(["bench", "--quick", "--out", str(out), "--model", "random", "--only", "tide-frozenlake", "--jobs", "1"])
    assert code == 0, capsys.readouterr()
    record = CellRecord.read(out / "cells" / "tide-frozenlake" / "cell.json")
    assert record.status == DONE and set(record.values) == {"success_rate", "auv", "loop_ratio"}
    assert record.executed == record.commands and "--model random" in record.commands[0]
    summary = json.loads((out / "cells" / "tide-frozenlake" / "run" / "summary.json").read_text())
    assert summary["episodes"] == QUICK.tide.tasks
    page = (out / "report" / "index.html").read_text()
    assert "tide-frozenlake" in page and "Smoke scale" in page
    assert main(["bench", "--quick", "--out", str(out), "--model", "random", "--only", "tide-frozenlake"]) == 0
    assert "finished before, skipped: tide-frozenlake" in capsys.readouterr().out


@pytest.mark.slow
def test_a_real_training_cell_with_a_tiny_model(tmp_path, tiny_model_dir):
    """ECHO's GRPO arm with a 2-layer random Llama: `hindsight train grpo` and `hindsight report` as child
    processes, its final evaluation and stage timings read, and a second bench that skips it."""
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--out", str(out), "--model", f"hf:{tiny_model_dir}", "--only", "echo-grpo-s0"]
    assert main(argv) == 0
    record = CellRecord.read(out / "cells" / "echo-grpo-s0" / "cell.json")
    assert record.status == DONE and record.values["episodes"] == QUICK.test_tasks
    assert {"timing/rollout_s", "timing/update_s"} <= set(record.values)
    assert (out / "cells" / "echo-grpo-s0" / "report" / "index.html").is_file()
    assert main(argv) == 0 and CellRecord.read(out / "cells" / "echo-grpo-s0" / "cell.json") == record
