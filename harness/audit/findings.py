"""What the audit reports: one finding per problem (file, role, what, fix), and a recorded call."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    file: str
    role: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.file}: [{self.role}] {self.what} -> fix: {self.fix}"


@dataclass(frozen=True)
class Invocation:
    """One role's engine command as the launcher ran it (argv after $PYTHON, its env subset)."""

    role: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    pid: int = 0

    @property
    def module(self) -> str:
        """`dynamo.vllm` for `-m dynamo.vllm …`, else the script path."""
        if len(self.argv) >= 2 and self.argv[0] == "-m":
            return self.argv[1]
        return self.argv[0] if self.argv else ""

    @property
    def engine_args(self) -> list[str]:
        return self.argv[2:] if self.argv[:1] == ["-m"] else self.argv[1:]

    def flag(self, *names: str) -> str | None:
        """Last value of `--name V` / `--name=V` for any of the names (argparse: last wins)."""
        value = None
        args = self.engine_args
        for i, arg in enumerate(args):
            for name in names:
                if arg == name and i + 1 < len(args):
                    value = args[i + 1]
                elif arg.startswith(f"{name}="):
                    value = arg.split("=", 1)[1]
        return value
