"""Test doubles for the runtime: an oracle draft that proposes the base's own greedy continuation, and a tiny
in-memory base + draft with a small vocabulary for the statistical sampling tests."""

from __future__ import annotations

import torch

from eagle_trt.runtime.draft import DraftHead, Eagle1Draft
from eagle_trt.runtime.decoder import EagleDecoder
from eagle_trt.runtime.model import Llama, LlamaArgs
from eagle_trt.tree_config import resolve


class OracleDraft(DraftHead):
    """Knows the whole greedy sequence S (prompt + plain output). The row at draft position t that consumes token
    x == S[t+1] proposes S[t+2] as its top-1 token; the other ranks are fillers. Accepted length must reach the
    tree depth + 1 on every step (until the budget ends)."""

    format = "eagle1"

    def __init__(self, sequence: list[int], vocab_size: int, unknown_log_prob: float = 0.0):
        super().__init__()
        self.seq, self.vocab = sequence, vocab_size
        self.unknown = unknown_log_prob  # the top log-prob of a row the oracle does not know (another sequence's)
        self.fc = torch.nn.Linear(1, 1)  # DraftHead.setup_cache reads fc.weight's dtype/device
        self.cache = self.rope = None

    def setup_cache(self, max_len: int) -> None:
        pass

    def new_cache(self, max_len: int) -> None:  # a batch's request: it keeps no K/V either
        return None

    def base_features(self, hidden, captured):
        return hidden

    def hidden_packed(self, calls):
        return [torch.stack((c.positions.float(), c.input_ids.float()), dim=-1) for c in calls]  # [T, 2] each

    def log_probs(self, out):
        """[T, V]: 0 for the oracle's token, then -1, -2, ... for the others in id order (their top-k order); a row
        it does not know proposes a filler at `unknown_log_prob`, the others below it."""
        rows = []
        for pos, tok in out.long().tolist():
            known = pos + 2 < len(self.seq) and self.seq[pos + 1] == tok
            best = self.seq[pos + 2] if known else (tok + 1) % self.vocab
            top = 0.0 if known else self.unknown
            row = torch.empty(self.vocab)
            row[[t for t in range(self.vocab) if t != best]] = top - torch.arange(1, self.vocab, dtype=torch.float32)
            row[best] = top
            rows.append(row)
        return torch.stack(rows).to(out.device)  # [T, V]


def tiny_decoder(tree: str, vocab: int = 8, seed: int = 0, draft: bool = True) -> EagleDecoder:
    """A 1-layer base with a small vocabulary and a random EAGLE-1 draft, built in memory."""
    torch.manual_seed(seed)
    args = LlamaArgs(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                     intermediate_size=32, vocab_size=vocab)
    # the draws Llama's embedding init took before the embedding was left uninitialised: each seed keeps its model
    torch.empty(vocab, args.hidden_size).normal_()
    base = Llama(args)
    with torch.no_grad():
        for p in base.parameters():
            p.normal_(0, 0.6)
        base.norm.weight.fill_(1.0)
    base.eval().requires_grad_(False)
    head = None
    if draft:
        head = Eagle1Draft(args, base.embed_tokens, base.lm_head, bias=True)
        with torch.no_grad():
            for name, p in head.named_parameters():
                if not name.startswith(("embed_tokens", "lm_head")):
                    p.normal_(0, 0.3)
        head.eval().requires_grad_(False)
    return EagleDecoder(base, head, None, resolve(tree), "cpu", max_seq_len=64)
