"""The lock files (requirements/, written by scripts/lock.sh) against pyproject.toml.

The README's commands, CI and scripts/wheel_check.sh install only from them, hashes checked, so a
dependency pyproject.toml names but no lock file pins would be missing from every install, and a pin
outside pyproject's range would be a release its tests never accepted.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")


def pins(name: str) -> dict[str, tuple[Version, int]]:
    """Package -> (pinned version, hashes given) in one lock file."""
    found: dict[str, tuple[Version, int]] = {}
    current = None
    for line in (ROOT / "requirements" / name).read_text(encoding="utf-8").splitlines():
        pin = _PIN.match(line)
        if pin:
            current = canonicalize_name(pin.group(1))
            found[current] = (Version(pin.group(2)), 0)
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
        elif not line.startswith(" "):
            current = None
    return found


def wanted(extras: tuple[str, ...]) -> list[Requirement]:
    """What pyproject.toml asks for with these extras (its own extras followed, as pip would)."""
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    seen = set(extras)
    todo += [Requirement(r) for extra in extras for r in PROJECT["optional-dependencies"][extra]]
    out = []
    for requirement in todo:
        if canonicalize_name(requirement.name) == canonicalize_name(PROJECT["name"]):
            for extra in sorted(requirement.extras - seen):
                seen.add(extra)
                todo += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
        else:
            out.append(requirement)
    return out


@pytest.mark.parametrize(("lock", "extras"), [("base.txt", ()), ("test.txt", ("test",)), ("server.txt", ("server",))])
def test_a_lock_pins_every_dependency_in_range_with_hashes(lock: str, extras: tuple[str, ...]) -> None:
    pinned = pins(lock)
    problems = []
    for requirement in wanted(extras):
        name = canonicalize_name(requirement.name)
        if name not in pinned:
            problems.append(f"{requirement} is not in requirements/{lock}")
        elif pinned[name][0] not in requirement.specifier:
            problems.append(f"requirements/{lock} pins {name}=={pinned[name][0]}, outside {requirement}")
    problems += [f"{name} has no hash in requirements/{lock}" for name, (_, hashes) in pinned.items() if not hashes]
    assert not problems, "run `bash scripts/lock.sh` and review its diff:\n" + "\n".join(problems)


def test_the_locks_agree_on_every_version() -> None:
    everything = pins("test.txt")
    for lock in ("base.txt", "server.txt", "init-tests.txt"):
        differ = {n: v for n, (v, _) in pins(lock).items() if n in everything and everything[n][0] != v}
        assert not differ, f"requirements/{lock} pins other versions than requirements/test.txt: {differ}"


def test_the_build_backend_is_locked_too() -> None:
    """Editable installs run without build isolation (a build would otherwise resolve setuptools afresh)."""
    backend = Requirement(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"][0]
    )
    for lock in ("base.txt", "test.txt"):
        assert pins(lock)["setuptools"][0] in backend.specifier
