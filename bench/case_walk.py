"""The walk a reader takes following one case through the harness, measured on a real run.

Method (the same on any tree of this repo, so a base and a branch compare):
- One real case runs through `pytest -m post_merge` in TREE with this file loaded as a pytest
  plugin (`-p case_walk`). While `run_case` (harness/cases/case.py) runs, every call into a
  function defined under TREE/harness/ is seen (`sys.setprofile`, main thread).
- The case's own data are followed: `sc` itself, its case, its profile and its requests, and
  any object that holds one of them as an attribute when it is passed on (a scope, an answer,
  a run of the case): such an object is followed from then on too.
- A **stop** is a function that receives followed data as an argument (`self` included), once,
  in the order first entered. A reader reads an interface once, not each implementation: the
  same method name on several classes of one module (each registered oracle's `applies`) is one
  stop. Dunder methods (construction, comparison) and property getters are not stops.
- A stop **entered from another file** (marked `>`) is where the reader opens another file: the
  nearest harness function on the stack is in another module. Helpers of the same module are
  read with the module.
- A **climb** is a stop called from a higher layer's module than the nearest harness function
  on the stack (docs/explanation/architecture.md's table: core, tiny_models, profiles, machine,
  topology, payloads, oracles, report, audit, cases, plugin, cli): a call back up the layers, which
  only a callback or an injected object can make.
- A **return** is a stop in a file the walk had left for another file since its last stop there.
Usage: python bench/case_walk.py [--tree PATH] [--case ID]   (one real launch: ~1 min on CPU)
Prints the stops in order, then the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last: tests
from tests.harness.test_layers import LAYERS

LAYER_ALIASES = {"requests": "payloads"}  # payloads/ at trees before 2026-12-04
OUT_ENV = "CASE_WALK_OUT"
DEFAULT_CASE = "mm_agg_qwen3-vl-2b"


class Walk:
    """The profile hook: follows the case's data through calls into TREE/harness/."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.harness_dir = str(root / "harness") + os.sep
        self.active: FrameType | None = None
        self.followed: dict[int, object] = {}  # id -> object, kept alive so ids stay unique
        self.stops: list[tuple[str, str]] = []
        self.callers: list[tuple[str, str, str]] = []  # (stop's file, stop, caller's file)

    def follow(self, obj: object) -> None:
        self.followed[id(obj)] = obj

    def holds_followed(self, obj: object) -> bool:
        if id(obj) in self.followed:
            return True
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            return False
        if any(id(v) in self.followed for v in attrs.values()):
            self.follow(obj)
            return True
        return False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if not code.co_filename.startswith(self.harness_dir):
            return
        if event == "return":
            if frame is self.active:
                self.active = None
            return
        if event != "call":
            return
        rel = os.path.relpath(code.co_filename, self.root)
        if self.active is None:
            if code.co_name == "run_case" and rel == os.path.join("harness", "cases", "case.py"):
                self.active = frame
                sc = frame.f_locals["sc"]
                for obj in (sc, sc.case, sc.profile, *sc.requests):
                    self.follow(obj)
                self.stops.append((rel, code.co_qualname))
            return
        if code.co_name.startswith("__") and code.co_name.endswith("__"):
            return
        nargs = code.co_argcount + code.co_kwonlyargcount
        args = [frame.f_locals.get(name) for name in code.co_varnames[:nargs]]
        if is_property(args, code.co_name) or not any(self.holds_followed(a) for a in args):
            return
        owner, _, method = code.co_qualname.rpartition(".")
        stop = (rel, code.co_qualname)
        if stop in self.stops or (rel, f"*.{method}") in self.stops:
            return
        polymorphic = owner and "<locals>" not in owner
        if polymorphic and any(p == rel and n.endswith(f".{method}") for p, n in self.stops):
            self.stops = [
                (p, f"*.{method}" if p == rel and n.endswith(f".{method}") else n)
                for p, n in self.stops
            ]
            return
        self.stops.append(stop)
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(self.harness_dir):
            caller = caller.f_back
        if caller is None:
            return
        from_rel = os.path.relpath(caller.f_code.co_filename, self.root)
        self.callers.append((rel, code.co_qualname, from_rel))


def is_property(args: list[object], name: str) -> bool:
    if not args or args[0] is None:
        return False
    for klass in type(args[0]).__mro__:
        if name in vars(klass):
            return isinstance(vars(klass)[name], property | functools.cached_property)
    return False


def pytest_configure(config: pytest.Config) -> None:
    walk = Walk(Path(config.rootpath))
    sys.setprofile(walk)
    threading.setprofile(None)  # the main thread runs run_case; helpers' threads are not read
    config.stash[WALK_KEY] = walk


def pytest_unconfigure(config: pytest.Config) -> None:
    sys.setprofile(None)
    walk = config.stash.get(WALK_KEY, None)
    if walk is not None and os.environ.get(OUT_ENV):
        Path(os.environ[OUT_ENV]).write_text(
            json.dumps({"stops": walk.stops, "callers": walk.callers})
        )


WALK_KEY = pytest.StashKey[Walk]()


def layer_of(path: str) -> int:
    package = Path(path).parts[1]
    return LAYERS.index(LAYER_ALIASES.get(package, package))


def same(stop: tuple[str, str], called: tuple[str, str]) -> bool:
    """`called` is `stop`, or one implementation of the interface `stop` collapsed to (`*.m`)."""
    (path, name), (called_path, called_name) = stop, called
    if path != called_path:
        return False
    return name == called_name or (name.startswith("*.") and called_name.endswith(name[1:]))


def climbs(callers: list[tuple[str, str, str]]) -> list[str]:
    return [f"{c} -> {p}:{n}" for p, n, c in callers if layer_of(p) > layer_of(c)]


def figures(stops: list[tuple[str, str]]) -> dict[str, int]:
    returns, left, current = 0, set(), None
    for path, _ in stops:
        if path != current:
            if path in left:
                returns += 1
            if current is not None:
                left.add(current)
            current = path
    return {
        "stops": len(stops),
        "files": len({p for p, _ in stops}),
        "returns": returns,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--case", default=DEFAULT_CASE)
    args = parser.parse_args()
    tree = args.tree.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "walk.json"
        env = {
            **os.environ,
            OUT_ENV: str(out),
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), str(tree)]),
        }
        argv = [str(tree / ".venv/bin/python"), "-m", "pytest", "-m", "post_merge", "-q"]
        argv += [f"tests/serve/test_serve.py::test_serve[{args.case}]"]
        argv += ["-p", "case_walk", "-p", "no:cacheprovider"]
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
        if not out.exists():
            print("no walk recorded", file=sys.stderr)
            return 1
        walk = json.loads(out.read_text())
    stops = [(str(path), str(name)) for path, name in walk["stops"]]
    callers = [(str(p), str(n), str(c)) for p, n, c in walk["callers"]]
    handoffs = {stop for stop in stops for p, n, c in callers if p != c and same(stop, (p, n))}
    for n, (path, name) in enumerate(stops, 1):
        print(f"{n:3d} {'>' if (path, name) in handoffs else ' '} {path}:{name}")
    upward = climbs(callers)
    for climb in upward:
        print(f"climb: {climb}")
    f = figures(stops)
    print(
        f"stops {f['stops']} in {f['files']} files ({len(handoffs)} entered from another file, "
        f"marked >), {len(upward)} climbs, {f['returns']} returns ({tree}, {args.case})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
