"""Fuzz the OpenAPI document with schemathesis against a live server.

Every operation gets a bounded number of generated requests; half of those
naming a thread get a real thread id (one dual_ai, one ai_human thread), so
runs, messages, values and env are reached, not just 404s. Checks: no 5xx,
status codes, content types and bodies as documented.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.scripted import DEMO_SCRIPT, scripted_model
from orchestrator.server.testing import LiveServer

ROOT = Path(__file__).resolve().parent.parent
TOKEN = {"Authorization": "Bearer fuzz-token"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _app(storage: str) -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runtime = Runtime.from_path(ROOT / "agents", config=ROOT / "configs/default.yaml", storage=storage)
    return create_app(runtime, tokens={"fuzz-token": "fuzzer"}, max_body_bytes=20_000, own_runtime=True)


# The document depends on the definitions only: build it at collection, serve it live per module.
schema = schemathesis.openapi.from_dict(_app("sqlite://:memory:").openapi())


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, list[str]]]:
    app = _app(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}")
    with scripted_model(DEMO_SCRIPT).serving(), LiveServer(app) as server:
        threads = [
            requests.post(f"{server.url}/threads", json={"agent": agent}, headers=TOKEN, timeout=10).json()["id"]
            for agent in ("support_demo", "support_chat")
        ]
        yield server, threads


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_openapi_fuzz(case: Any, live_server: tuple[LiveServer, list[str]]) -> None:
    server, threads = live_server
    if (
        case.path_parameters
        and "thread_id" in case.path_parameters
        and random.Random(str(case.path_parameters)).random() < 0.5
    ):
        case.path_parameters["thread_id"] = random.Random(str(case.query)).choice(threads)
    case.call_and_validate(base_url=server.url, headers=TOKEN, checks=CHECKS, timeout=30)
