"""Shared by the attack tests: a runtime over the shipped agents and default config, on SQLite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return Runtime.from_path(
        ROOT / "agents", config=ROOT / "configs/default.yaml", storage=f"sqlite:///{tmp_path / 'sec.db'}"
    )
