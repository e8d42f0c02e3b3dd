"""Offline models: answered in this process, through the production wire path.

A provider with `type: offline` (and the built-in `test` alias) sends its
requests, built by LiteLLM as for a live OpenAI-compatible provider, to
`IN_PROCESS_BASE_URL`. `in_process_client` gives LiteLLM's own HTTP handler on an
in-memory transport for that URL, so the SSE bytes a `ScriptedModel` serves are
read by the same parser as a live stream, and nothing is patched globally
(respx-served models in tests and cassettes keep working beside it).

The request's `model` names what answers:

- `test`: `providers.test_model.TestModel` (calls every tool once, then sums up);
- a path ending in `.yaml`, `.yml` or `.json`: a script of turns (`Script`),
  relative to the working directory;
- `module:function` or `path/to/file.py:function`: a function taking the request
  body (a dict) and returning a `ScriptedResponse`, a `ResponseSpec`-shaped dict
  or a plain string (the answer's text).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from providers.config import IN_PROCESS_BASE_URL
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedModel, ScriptedResponse
from providers.yaml_source import parse_yaml

__all__ = ["ResponseSpec", "Script", "describe_answerer", "in_process_client", "load_script", "offline_answerer"]

OFFLINE_SUFFIXES = (".yaml", ".yml", ".json")

Answerer = Callable[[dict[str, Any]], ScriptedResponse | ScriptedFault]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallSpec(_Strict):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ResponseSpec(_Strict):
    """One answer: text, tool calls, or both. The one format of a scripted answer, in script files,
    a function's answer and eval scripts (`orchestrator.eval.sources`)."""

    text: str = ""
    tool_calls: list[CallSpec] = Field(default_factory=list)
    chunk_size: int | None = Field(default=None, ge=1)  # characters per streamed chunk (None: the caller's default)
    usage: tuple[int, int] = (10, 5)  # input, output tokens the answer reports

    def scripted(self, *, chunk_size: int = 8) -> ScriptedResponse:
        """The answer to serve; `chunk_size` applies unless the answer says its own."""
        calls = [ScriptedCall(c.name, c.arguments) for c in self.tool_calls]
        size = self.chunk_size or chunk_size
        return ScriptedResponse(text=self.text, tool_calls=calls, chunk_size=size, usage=self.usage)


class SideScript(_Strict):
    match: str = Field(min_length=1)
    responses: list[ResponseSpec]


class Script(_Strict):
    """Stateless turns: each request is answered from what the request shows.

    The first side whose `match` occurs in the request's system prompt answers
    with `responses[n]`, n = the assistant messages already in the request;
    with no matching side, `turns[n]` does (a file that is just a list of
    responses is read as `turns`); past the end of a list, `default` answers.
    """

    sides: list[SideScript] = Field(default_factory=list)
    turns: list[ResponseSpec] = Field(default_factory=list)
    default: ResponseSpec = Field(default_factory=lambda: ResponseSpec(text="OK."))

    def answer(self, body: dict[str, Any]) -> ScriptedResponse:
        messages = body.get("messages") or []
        system = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
        done = sum(1 for m in messages if m.get("role") == "assistant")
        responses = next((side.responses for side in self.sides if side.match in system), self.turns)
        return (responses[done] if done < len(responses) else self.default).scripted()


def load_script(path: str | Path) -> Script:
    """Read and check a script file (YAML or JSON); errors name the file and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else parse_yaml(text)[0]  # aliases refused
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}, line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise ValueError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if isinstance(raw, list):
        raw = {"turns": raw}
    try:
        return Script.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {problems}") from None


# -- which answerer a model name means -------------------------------------------


def describe_answerer(model: str) -> str | None:
    """Why `model` cannot answer offline, or None if it may (checked when a config loads).

    Script files are read and checked; a function's module is not imported
    here (importing runs the user's code), only its name's shape and file."""
    try:
        if model == "test":
            return None
        if model.endswith(OFFLINE_SUFFIXES):
            load_script(model)
            return None
        module, sep, name = model.rpartition(":")
        if not sep or not module or not name.isidentifier():
            raise ValueError(
                f"expected 'test', a script file (.yaml/.yml/.json) or a function 'module:function', got {model!r}"
            )
        if module.endswith(".py") and not Path(module).is_file():
            raise ValueError(f"no Python file {module} (paths are relative to the working directory)")
    except ValueError as exc:
        return str(exc)
    return None


_CACHE: dict[str, Answerer] = {}


def offline_answerer(model: str) -> Answerer:
    """The answerer `model` names (cached per name); ValueError says what is wrong."""
    if model not in _CACHE:
        _CACHE[model] = _resolve(model)
    return _CACHE[model]


def _resolve(model: str) -> Answerer:
    if model == "test":
        from providers.test_model import TestModel

        return TestModel()
    if model.endswith(OFFLINE_SUFFIXES):
        return load_script(model).answer
    module, sep, name = model.rpartition(":")
    if not sep or not module or not name:
        raise ValueError(
            f"offline model {model!r}: expected 'test', a script file (.yaml/.yml/.json) "
            "or a function 'module:function'"
        )
    return _guarded(_import_function(module, name), model)


def _import_function(module: str, name: str) -> Callable[[dict[str, Any]], Any]:
    try:
        if module.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(module).stem, module)
            if spec is None or spec.loader is None or not Path(module).is_file():
                raise ValueError(f"offline model '{module}:{name}': no Python file {module}")
            loaded = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded)
        else:
            if os.getcwd() not in sys.path:  # as `python -m`: modules next to where the command runs
                sys.path.insert(0, os.getcwd())
            loaded = importlib.import_module(module)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(
            f"offline model '{module}:{name}': cannot import {module}: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(loaded, name, None)
    if not callable(function):
        raise ValueError(f"offline model '{module}:{name}': {module} has no function {name!r}")
    answerer: Callable[[dict[str, Any]], Any] = function  # the user's function: its signature is theirs to keep
    return answerer


def _guarded(function: Callable[[dict[str, Any]], Any], model: str) -> Answerer:
    """A user's function: its answer in any accepted shape; its failure an HTTP 400 naming it
    (not retried: the same request would fail the same way)."""

    def answer(body: dict[str, Any]) -> ScriptedResponse | ScriptedFault:
        try:
            out = function(body)
            if isinstance(out, (ScriptedResponse, ScriptedFault)):
                return out
            if isinstance(out, str):
                return ScriptedResponse(text=out)
            return ResponseSpec.model_validate(out).scripted()
        except Exception as exc:
            return ScriptedFault(400, message=f"offline model {model!r} raised {type(exc).__name__}: {exc}")

    return answer


# -- serving -----------------------------------------------------------------------


def _dispatch(body: dict[str, Any]) -> ScriptedResponse | ScriptedFault:
    model = str(body.get("model") or "")
    try:
        answerer = offline_answerer(model)
    except ValueError as exc:
        return ScriptedFault(400, message=str(exc))
    return answerer(body)


_HANDLER: Any = None
_TRANSPORT: httpx.AsyncBaseTransport | None = None


def in_process_client(url: str) -> Any:
    """LiteLLM's HTTP handler on the in-memory transport when `url` is offline, else None."""
    global _HANDLER
    transport = in_process_transport(url)
    if transport is None:
        return None
    if _HANDLER is None:
        from providers._litellm_internal import AsyncHTTPHandler

        _HANDLER = AsyncHTTPHandler(transport=transport)
    return _HANDLER


def in_process_transport(url: str) -> httpx.AsyncBaseTransport | None:
    """The in-memory transport that answers offline models, when `url` is offline (else None)."""
    global _TRANSPORT
    if not url.startswith(IN_PROCESS_BASE_URL):
        return None
    if _TRANSPORT is None:
        _TRANSPORT = ScriptedModel(_dispatch, keep_requests=False).transport()
    return _TRANSPORT
