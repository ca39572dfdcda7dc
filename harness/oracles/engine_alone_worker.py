"""The engine alone: the engine a stack serves with (vLLM's offline `LLM`, SGLang's offline
`Engine`), started once with the checkpoint, dtype and engine arguments a serving role ran with,
answering one request at a time. Run as a script by the stack's own interpreter (the SGLang venv
has no harness installed): standard library and the engine only, no Dynamo.

    python engine_alone_worker.py '{"stack": "dynamo-vllm", "model": DIR, "argv": ["--dtype",
                                     "float32", ...], "env": {...}}'

(`argv`: the serving role's engine flags, read by the engine's own parser, as its server reads
them),

then one JSON request per line on stdin, one JSON answer per line on the stdout it was given
(the engine's own output goes to stderr): first `{"ready": true, "engine": "vllm 0.31.0"}`, then
per request `{"ids": [...], "logprobs": [...], "top": [{id: logprob}, ...], "prompt_ids": [...]}`
or `{"error": "..."}`. A request: `{"messages": OpenAI messages with data: URLs, "max_tokens": N,
"top_logprobs": K}`, greedy."""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any


class VllmAlone:
    """vLLM's offline `LLM`, its chat entry (the model's chat template, vLLM's own media loading,
    as the engine's OpenAI server does), with prefix caching off: every answer is computed from
    its whole prompt, so it depends on nothing but its inputs."""

    def __init__(self, model: str, argv: list[str]) -> None:
        import vllm
        from vllm.engine.arg_utils import EngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        self.version = f"vllm {vllm.__version__}"
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        given = EngineArgs.from_cli_args(parser.parse_args(["--model", model, *argv]))
        default = EngineArgs.from_cli_args(parser.parse_args(["--model", model]))
        args = changed(given, default)
        args["enable_prefix_caching"] = False
        self.llm = vllm.LLM(**args)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams

        params = self.llm.get_default_sampling_params()  # the checkpoint's generation_config
        params = SamplingParams.from_optional(
            **{
                **{k: getattr(params, k) for k in ("repetition_penalty", "top_k", "top_p")},
                "temperature": 0.0,
                "seed": 0,
                "max_tokens": request["max_tokens"],
                "logprobs": request["top_logprobs"],
            }
        )
        [out] = self.llm.chat(request["messages"], params, use_tqdm=False)
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        chosen, top = [], []
        for token, step in zip(ids, completion.logprobs or [], strict=False):
            chosen.append(step[token].logprob)
            ranked = sorted(step.items(), key=lambda kv: kv[1].rank or 0)
            top.append(
                {
                    str(t): lp.logprob
                    for t, lp in ranked
                    if lp.rank is not None and lp.rank <= request["top_logprobs"]
                }
            )
        return {
            "ids": ids,
            "logprobs": chosen,
            "top": top,
            "prompt_ids": list(out.prompt_token_ids or []),
        }


class SglangAlone:
    """SGLang's offline `Engine` on the prompt the model's chat template renders (the text a
    request's messages give) and the media as sent, greedy, with the radix cache off (every
    answer computed from its whole prompt)."""

    def __init__(self, model: str, argv: list[str]) -> None:
        import argparse

        import sglang
        from sglang.srt.server_args import ServerArgs

        self.version = f"sglang {sglang.__version__}"
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        given = ServerArgs.from_cli_args(parser.parse_args(["--model-path", model, *argv]))
        default = ServerArgs.from_cli_args(parser.parse_args(["--model-path", model]))
        args = changed(given, default)
        args["disable_radix_cache"] = True
        # an idle scheduler otherwise polls without blocking: a whole core while it waits for
        # the next request (the served roles get the same, role_adapter.py SGLANG_SLEEP_ON_IDLE)
        args["sleep_on_idle"] = True
        self.engine = sglang.Engine(**args)
        from transformers import AutoProcessor

        self.processor = AutoProcessor.from_pretrained(model)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        chat: list[dict[str, Any]] = []
        images: list[str] = []
        videos: list[str] = []
        for message in request["messages"]:
            content = message["content"]
            if not isinstance(content, list):
                chat.append(message)
                continue
            parts = []
            for part in content:
                kind = part["type"]
                if kind == "text":
                    parts.append(part)
                else:
                    media = kind.removesuffix("_url")
                    (images if media == "image" else videos).append(part[kind]["url"])
                    parts.append({"type": media})
            chat.append({"role": message["role"], "content": parts})
        prompt = self.processor.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True
        )
        out = self.engine.generate(
            prompt=prompt,
            image_data=images or None,
            video_data=videos or None,
            sampling_params={"temperature": 0.0, "max_new_tokens": request["max_tokens"]},
            return_logprob=True,
            top_logprobs_num=request["top_logprobs"],
        )
        meta = out["meta_info"]
        steps = meta.get("output_token_logprobs") or []
        tops = meta.get("output_top_logprobs") or []
        return {
            "ids": [int(t) for _, t, _ in steps],
            "logprobs": [float(lp) for lp, _, _ in steps],
            "top": [{str(int(t)): float(lp) for lp, t, _ in row} for row in tops],
            "prompt_ids": [],
        }


def changed(given: Any, default: Any) -> dict[str, Any]:
    """The fields of an engine's arguments the flags set (the model's always): a dataclass
    (vLLM's EngineArgs) or a msgspec struct (SGLang's ServerArgs)."""
    import dataclasses

    if dataclasses.is_dataclass(given):
        names = [f.name for f in dataclasses.fields(given)]
    else:
        names = list(type(given).__struct_fields__)
    out = {}
    for name in names:
        value = getattr(given, name)
        if value != getattr(default, name) or name in ("model", "model_path"):
            out[name] = value
    return out


ENGINES: dict[str, type[VllmAlone | SglangAlone]] = {
    "dynamo-vllm": VllmAlone,
    "dynamo-sglang": SglangAlone,
}


def main() -> None:
    config = json.loads(sys.argv[1])
    answers = os.fdopen(os.dup(1), "w")  # ours alone: the engine's prints go to stderr
    os.dup2(2, 1)
    os.environ.update(config.get("env") or {})
    try:
        engine = ENGINES[config["stack"]](config["model"], list(config["argv"]))
    except Exception as exc:  # the engine's own refusal, in its words, for the oracle to quote
        traceback.print_exc()
        print(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}), file=answers)
        answers.flush()
        sys.exit(1)
    print(json.dumps({"ready": True, "engine": engine.version}), file=answers, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = engine.answer(json.loads(line))
        except Exception as exc:
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(result), file=answers, flush=True)


if __name__ == "__main__":
    main()
