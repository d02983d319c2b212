import json
from pathlib import Path

import pytest


@pytest.fixture
def instance_file(tmp_path):
    """Write hand-made instances to an instance file: (env_id, [(seed, split, instance), ...], kwargs) -> path."""

    def write(env_id: str, records: list[tuple[int, str, dict]], kwargs: dict | None = None) -> Path:
        path = tmp_path / f"{env_id}-handmade.jsonl"
        header = {
            "kind": "header",
            "format": "hindsight.instances",
            "version": 1,
            "env": env_id,
            "kwargs": kwargs or {},
        }
        lines = [json.dumps(header)]
        lines += [json.dumps({"kind": "instance", "seed": s, "split": sp, "instance": inst}) for s, sp, inst in records]
        path.write_text("\n".join(lines) + "\n")
        return path

    return write
