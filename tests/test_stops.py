"""When an output stops (runtime.stops, the one implementation every front end uses): stop tokens are kept, stop
sequences cut before themselves (taking back tokens an earlier step handed out when they began there), stop strings
cut after the token completing them, the earliest stop wins; and the decoder answers exactly plain decoding cut there,
whatever the tree."""

import pytest

from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.stops import Stops


class Chars:
    """A tokenizer stand-in: token t decodes to chr(96 + t)."""

    @staticmethod
    def decode(ids):
        return "".join(chr(96 + t) for t in ids)


@pytest.mark.parametrize("stops, done, new, budget, expected", [
    (Stops.of(token_ids=[3]), [1], [2, 3, 4], 10, ([2, 3], "stop", 0)),  # kept
    (Stops.of(sequences=[[3, 4]]), [1], [2, 3, 4, 5], 10, ([2], "stop", 0)),  # cut before it
    (Stops.of(sequences=[[2, 3, 4]]), [1, 2], [3, 4, 5], 10, ([], "stop", 1)),  # it began in a handed-out token
    (Stops.of(sequences=[[4, 5]]), [4], [6, 4], 10, ([6, 4], None, 0)),  # not yet complete
    (Stops.of(strings=["cd"], tokenizer=Chars), [1, 2], [3, 4, 5], 10, ([3, 4], "stop", 0)),  # after its last token
    (Stops.of(token_ids=[5], sequences=[[2, 3]]), [1], [2, 3, 5], 10, ([], "stop", 0)),  # the earliest stop wins
    (Stops.of(token_ids=[9]), [1, 2], [3, 4, 5], 4, ([3, 4], "length", 0)),  # the budget
    (Stops.of(token_ids=[4]), [1, 2], [3, 4, 5], 4, ([3, 4], "stop", 0)),  # a stop on the budget's last token
])
def test_cut(stops, done, new, budget, expected):
    assert stops.cut(done, new, budget) == expected


@pytest.mark.parametrize("tree", ["chain:4", "dynamic:3,2,4"])
def test_the_decoder_answers_plain_decoding_cut_before_a_stop_sequence(tiny_base, eagle1_draft, tree):
    prompt = list(range(5, 25))
    plain = EagleDecoder.load(tiny_base, None).generate_all(prompt, 32).token_ids
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree=tree)
    for start in (3, 10, 17):  # sequences of 2 and 3 tokens taken from the output itself
        for length in (2, 3):
            sequence = plain[start:start + length]
            first = next(i for i in range(len(plain)) if plain[i:i + length] == sequence)
            result = decoder.generate_all(prompt, 32, stop_sequences=[sequence])
            assert result.token_ids == plain[:first] and result.finish_reason == "stop", (start, length)
