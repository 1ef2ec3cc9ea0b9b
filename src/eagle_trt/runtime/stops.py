"""When a request's output stops: the one reading of stop conditions, for every front end (the python engine model,
`generate`, the benchmarks) through EagleDecoder.generate.

A stop token (the end-of-sequence and end-of-turn ids) ends the output and is kept; a stop sequence (a stop word's
token ids, TensorRT-LLM's `stop_words_list`) ends it before the sequence, which is not part of the answer; a stop
string ends it after the token that completes the string (matched on decoded text). The earliest stop in the output
wins. A stop sequence can begin in tokens an earlier verify step already handed out: `cut` then says how many to take
back (a streamed answer has sent them; a whole answer drops them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Stops:
    token_ids: frozenset[int] = frozenset()
    sequences: tuple[tuple[int, ...], ...] = ()
    strings: tuple[str, ...] = ()
    tokenizer: object = field(default=None, compare=False)  # decodes the output for stop strings

    @classmethod
    def of(cls, token_ids: Sequence[int] = (), sequences: Sequence[Sequence[int]] = (), strings: Sequence[str] = (),
           tokenizer=None) -> Stops:
        return cls(frozenset(int(t) for t in token_ids), tuple(tuple(int(t) for t in s) for s in sequences if s),
                   tuple(strings), tokenizer)

    def cut(self, done: list[int], new: list[int], max_new_tokens: int) -> tuple[list[int], str | None, int]:
        """(the tokens of `new` to hand out, "stop" / "length" / None, how many of `done` to take back), for a step
        that committed `new` after `done` were handed out."""
        step = list(new[: max_new_tokens - len(done)])
        for i, tok in enumerate(step):
            if tok in self.token_ids:
                return step[: i + 1], "stop", 0
            end = len(done) + i + 1  # the output's length with this token
            for seq in self.sequences:
                if len(seq) <= end and (done + step[: i + 1])[end - len(seq):] == list(seq):
                    start = end - len(seq)  # the output ends before the sequence
                    return (step[: start - len(done)], "stop", 0) if start >= len(done) else ([], "stop",
                                                                                            len(done) - start)
            if self.strings and any(s in self.tokenizer.decode(done + step[: i + 1]) for s in self.strings):
                return step[: i + 1], "stop", 0
        return step, ("length" if len(done) + len(step) >= max_new_tokens else None), 0
