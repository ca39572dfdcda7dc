"""Registries of strategies filled by subclassing: adding an oracle, a diagnosis or a readiness
check is one new class, and, where it has no better home, one new file.

`class Oracle(Registered, root=True)` starts a registry; every subclass that sets `name`
registers in it. `Oracle.every()` imports every module of the root's `package` first, so a
class in a new file there is found without being listed anywhere, then returns one instance of
each registered class, ordered by `order`.

Example:

    class Check(Registered, root=True):
        package = "harness.oracles"

    class Loud(Check):
        name, order = "loud", 10

    Check.every()  # [Loud()] plus any Check subclass in a module of harness/oracles/
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar, Self

_IMPORTED: set[str] = set()


def import_submodules(package: str) -> None:
    """Import every module of `package` (not its subpackages' modules), once per process."""
    if package in _IMPORTED:
        return
    module = importlib.import_module(package)
    for found in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{found.name}")
    _IMPORTED.add(package)


def forget_imported(package: str) -> None:
    """The next `every()` looks at `package`'s modules again (a test that adds a module)."""
    _IMPORTED.discard(package)


class Registered:
    """Base of a registry (see the module's docstring)."""

    name: ClassVar[str]  # concrete classes set it; it is how they are listed
    order: ClassVar[int]  # ascending: where it runs among the others
    package: ClassVar[str]  # the root's: where new classes may live
    registered: ClassVar[list[type[Any]]]
    _instances: ClassVar[dict[type[Any], Any]]

    def __init_subclass__(cls, root: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if root:
            cls.registered, cls._instances = [], {}
        elif "name" in cls.__dict__:
            cls.registered.append(cls)

    @classmethod
    def every(cls) -> list[Self]:
        """One instance of every registered class (the same one each call), by `order`."""
        import_submodules(cls.package)
        ordered = sorted(cls.registered, key=lambda c: c.order)
        return [cls._instances.setdefault(c, c()) for c in ordered]

    @classmethod
    def unregister(cls, member: type[Any]) -> None:
        """Take a class out of its registry (a test's own class, after the test)."""
        cls.registered.remove(member)
        cls._instances.pop(member, None)
