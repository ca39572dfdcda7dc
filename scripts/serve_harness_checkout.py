"""Which checkout's `harness` an interpreter of the shared venv imports (bootstrap.sh copies this
module into the venv's site-packages with a .pth line that imports it at start-up).

One cached venv serves every checkout of the same lock, so the editable install's finder points
at whichever checkout bootstrapped last. This finder runs first and answers for `harness` from
the checkout the process was started through: `SERVE_HARNESS_ROOT`; else the checkout whose
`.venv` link the interpreter or the script was invoked by (`<checkout>/.venv/bin/python`,
`<checkout>/.venv/bin/serve-harness`, kept unresolved in sys.executable and sys.orig_argv); else
the checkout holding the working directory. Where none is found the editable finder answers, as
before. Stdlib only: it runs in every process of the venv, engine roles included."""

from __future__ import annotations

import importlib.machinery
import os
import sys

LINKS = ("/.venv/bin/", "/.venv-next/bin/")


def _is_checkout(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "harness", "__init__.py")) and os.path.isfile(
        os.path.join(path, "scripts", "bootstrap.sh")
    )


def checkout_root() -> str | None:
    root = os.environ.get("SERVE_HARNESS_ROOT")
    if root:
        return root
    invoked = [sys.executable, *getattr(sys, "orig_argv", [])[:2]]
    for path in invoked:
        for link in LINKS:
            if link in path:
                candidate = path.split(link, 1)[0]
                if _is_checkout(candidate):
                    return candidate
    here = os.getcwd() if os.path.isdir(".") else ""
    while here and here != os.path.dirname(here):
        if _is_checkout(here):
            return here
        here = os.path.dirname(here)
    return None


class CheckoutFinder:
    """Finds the `harness` package (and its submodules, through its __path__) in one checkout."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "harness":
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.root])


_root = checkout_root()
if _root is not None:
    sys.meta_path.insert(0, CheckoutFinder(_root))
