"""Logs with hostile model text, for the report tests."""

from __future__ import annotations

import json
from pathlib import Path

from hindsight.diagnostics.synthetic import WalkerSpec, write_run

HOSTILE = "<script>alert(1)</script>"


def hostile_run(folder: Path) -> Path:
    """A run whose model output, observations, instruction, ids and model name are all hostile."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(f"env: frozenlake\nmodel: '{HOSTILE}'\nmemory: full\n")
    steps = [
        {"observation": f"obs {HOSTILE} A", "state": "A", "action": f"right {HOSTILE}", "raw": f"raw {HOSTILE}",
         "analysis": f"why {HOSTILE}", "valid": True},
        {"observation": "B & </script><img src=x onerror=alert(2)>", "state": "B", "action": "left", "valid": False},
        {"observation": f"obs {HOSTILE} A", "state": "A", "action": f"right {HOSTILE}", "valid": True},
        {"observation": "B & </script><img src=x onerror=alert(2)>", "state": "B", "action": "left", "valid": True},
    ]
    record = {"env": "frozenlake", "success": False, "id": f"id {HOSTILE}", "instruction": f"task {HOSTILE}",
              "steps": steps, "final_observation": f"end {HOSTILE}"}
    path = folder / "trajectories" / "log.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "success": True, "id": "fine"}) + "\n")
    return folder


def sweep_runs(folder: Path) -> Path:
    """Three synthetic runs of one model at different history windows."""
    for memory, skill in (("none", 0.3), ("2", 0.6), ("full", 0.7)):
        write_run(folder / f"memory-{memory}", 10, WalkerSpec(skill=skill), model="sim", memory=memory, seed=4)
    return folder
