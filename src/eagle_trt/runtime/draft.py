"""EAGLE draft heads over the base's features (docs/eagle_algorithms.md §2, §4).

EAGLE-1/2: out = layer0(fc(cat(embed(x_{t+1}), f_t))), layer 0 without input norm; logits = base lm_head(out).
EAGLE-3:   g = fc(cat(h_low, h_mid, h_high)) for base rows, else the parent's draft output (pre-norm);
           out = midlayer(cat(input_norm(embed(x)), hidden_norm(g))) with residual g; logits = lm_head(norm(out))
           over the draft vocabulary, mapped to base ids by d2t. The published layouts' switches (draft_layouts):
           an RMSNorm over the captures (`input_norm`) or per capture (`fc_norm`) before fc, the residual taken
           after hidden_norm (`norm_before_residual`), the normed output carried to the next step (`norm_output`),
           no final norm (`final_norm` false).
Both heads keep a one-layer KV cache per request: rows 0..n-1 hold the accepted prefix ("stable"), tree expansion
writes after it and is thrown away each step. The cache is passed with every call (a DraftCall carries its
request's), never swapped on the module: `forward_packed` runs the draft calls of several requests as one forward
(their rows packed through every linear layer, attention per request over its own cache) and, in the same pass,
the top-k of the rows each call asks for (one head matmul for all of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eagle_trt.runtime.model import MLP, Attention, DecoderLayer, KVCache, LlamaArgs, RMSNorm, Segment, block_mask
from eagle_trt.runtime.rope import Rope


@dataclass(frozen=True)
class DraftCall:
    """One request's part of a draft forward: input_ids, positions [T], features [T, H]; K/V land in `cache` at
    slots start..start+T-1; mask [T, start+T] bool or None (causal over the block, all of the prefix visible).
    top_k > 0: also the k best next tokens of the output rows (of the last row only with `last_only`)."""

    input_ids: torch.Tensor
    features: torch.Tensor
    positions: torch.Tensor
    start: int
    cache: KVCache | None = None  # None: the head's own (setup_cache)
    mask: torch.Tensor | None = None
    top_k: int = 0
    last_only: bool = False


def joined(first: DraftCall, then: DraftCall) -> DraftCall:
    """One draft call for two consecutive ones of a request (`then` starts where `first` ends): the draft catching
    up on positions it skipped (runtime.backoff's plain steps)."""
    return DraftCall(torch.cat((first.input_ids, then.input_ids)), torch.cat((first.features, then.features)),
                     torch.cat((first.positions, then.positions)), first.start, first.cache, None, then.top_k,
                     then.last_only)  # [T1 + T2] ids and positions, [T1 + T2, H] features


@dataclass(frozen=True)
class DraftOut:
    """A DraftCall's answer: out [T, H] (or [1, H], `last_only`), the draft output the next draft rows read; scores,
    ids [rows of out, top_k]: log-probs and base token ids of the k best next tokens (None when top_k is 0)."""

    out: torch.Tensor
    scores: torch.Tensor | None = None
    ids: torch.Tensor | None = None


class DraftHead(nn.Module):
    """The interface the engine drafts through."""

    format = "?"
    native = None  # runtime.native.NativeDraft: the layer and head run in C (precisions native, native-q8)

    def setup_cache(self, max_len: int) -> None:
        p = self.embed_tokens.weight  # float (fc may be an Int8Linear)
        if self.cache is not None and self.cache.max_len >= max_len and self.cache.k.dtype == self.cache_dtype():
            return
        self.cache = self.new_cache(max_len)
        self.rope = Rope(self.args, max_len, p.dtype, p.device)

    def new_cache(self, max_len: int) -> KVCache:
        """A one-layer KV cache for a request (several run at once in runtime.batching)."""
        return KVCache(1, self.args.num_key_value_heads, max_len, self.args.head_dim, self.cache_dtype(),
                       self.embed_tokens.weight.device)

    def cache_dtype(self) -> torch.dtype:
        """The C layer's own (runtime.native), else the embeddings' (float; fc may be an Int8Linear)."""
        return self.native.cache_dtype if self.native is not None else self.embed_tokens.weight.dtype

    def base_features(self, hidden: torch.Tensor, captured: torch.Tensor | None) -> torch.Tensor:
        """[T, H] feature per base-processed position, from the base forward's outputs."""
        raise NotImplementedError

    def forward(self, input_ids, features, positions, start: int, mask=None, cache: KVCache | None = None):
        """input_ids, positions: [T]; features: [T, H]; mask: [T, start+T] bool or None (causal over the block,
        all of the prefix visible); K/V land in `cache` (None: the head's own). Returns the draft output [T, H]."""
        return self.hidden_packed([DraftCall(input_ids, features, positions, start, cache, mask)])[0]

    def hidden_packed(self, calls: list[DraftCall]) -> list[torch.Tensor]:
        """The draft outputs [T_i, H] of several calls from one forward: rows packed through the linear layers,
        attention per call over its own cache (int8/packed linears: each row as if it ran alone)."""
        ids = calls[0].input_ids if len(calls) == 1 else torch.cat([c.input_ids for c in calls])  # [sum T]
        feats = calls[0].features if len(calls) == 1 else torch.cat([c.features for c in calls])  # [sum T, H]
        positions = calls[0].positions if len(calls) == 1 else torch.cat([c.positions for c in calls])  # [sum T]
        segments = []
        for c in calls:
            t = c.input_ids.shape[0]
            mask = c.mask if c.mask is not None else block_mask(c.start, None, t, feats.device)  # [T, start+T]
            segments.append(Segment(c.cache if c.cache is not None else self.cache, c.start, t, mask))
        cos, sin = self.rope(positions)
        out = self.rows(ids, feats, cos, sin, segments)  # [sum T, H]
        return list(out.split([s.rows for s in segments]))

    def rows(self, input_ids, features, cos, sin, segments: list[Segment]) -> torch.Tensor:
        """The head's layer over packed rows: input_ids [sum T], features [sum T, H] -> draft outputs [sum T, H]."""
        raise NotImplementedError

    def forward_packed(self, calls: list[DraftCall]) -> list[DraftOut]:
        """Several requests' draft calls as one forward (`hidden_packed`), then one head matmul over every row whose
        top-k a call asks for, each call's top-k taken over its own rows. One DraftOut per call (a draft in C: all
        of it in one call)."""
        if self.native is not None:
            return [DraftOut(*answer) for answer in self.native.forward_packed(self, calls)]
        outs = self.hidden_packed(calls)
        outs = [o[-1:] if c.last_only else o for c, o in zip(calls, outs)]
        wanted = [o for c, o in zip(calls, outs) if c.top_k > 0]
        if not wanted:
            return [DraftOut(o) for o in outs]
        rows = wanted[0] if len(wanted) == 1 else torch.cat(wanted)  # [rows, H]
        log_probs = self.log_probs(rows)  # [rows, V_draft]
        answers, row = [], 0
        for c, o in zip(calls, outs):
            if c.top_k <= 0:
                answers.append(DraftOut(o))
                continue
            scores, idx = log_probs[row:row + o.shape[0]].topk(c.top_k, dim=-1)  # [T_i, k]
            answers.append(DraftOut(o, scores, self.to_base_ids(idx)))
            row += o.shape[0]
        return answers

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        """[T, V_draft] log-probabilities of the draft's next token."""
        raise NotImplementedError

    def to_base_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def hf_names(self, layer_prefix: str) -> dict[str, str]:
        """our parameter/buffer name -> the checkpoint's, for every tensor this head loads from the draft's files
        (its decoder layer under `layer_prefix`; the shared embedding and base head excluded)."""
        names = {}
        shared = ("embed_tokens.", "lm_head.") if self.shares_head else ("embed_tokens.",)
        for name, _ in (*self.named_parameters(), *self.named_buffers()):
            if name.startswith(shared):
                continue
            names[name] = layer_prefix + name.split(".", 1)[1] if name.startswith(self.layer_module + ".") else name
        return names

    def topk(self, out: torch.Tensor, k: int):
        """(log-probs [T, k], base token ids [T, k]) of the k best next tokens per row."""
        values, idx = self.log_probs(out).topk(k, dim=-1)
        return values, self.to_base_ids(idx)


class Eagle1Draft(DraftHead):
    format = "eagle1"
    layer_module, shares_head = "layer", True  # the base's lm_head

    def __init__(self, args: LlamaArgs, embed: nn.Embedding, lm_head: nn.Linear, bias: bool):
        super().__init__()
        self.args = args
        self.fc = nn.Linear(2 * args.hidden_size, args.hidden_size, bias=bias)
        self.layer = DecoderLayer(args, input_norm=False)
        self.embed_tokens, self.lm_head = embed, lm_head  # shared with the base (frozen)
        self.vocab_ids: torch.Tensor | None = None  # [n] base ids of the head's rows when truncated (FR-Spec)
        self.cache = self.rope = None

    def base_features(self, hidden, captured):
        return hidden

    def rows(self, input_ids, features, cos, sin, segments):
        if self.native is not None:
            return self.native.rows(input_ids, features, cos, sin, segments)
        x = self.fc(torch.cat((self.embed_tokens(input_ids), features), dim=-1))  # [sum T, H]
        return self.layer.forward_segments(x, cos, sin, segments, 0)

    def log_probs(self, out):
        logits = self.native.logits(out) if self.native is not None else self.lm_head(out)  # [T, V_draft]
        return F.log_softmax(logits.float(), dim=-1)

    def to_base_ids(self, draft_ids):
        return draft_ids if self.vocab_ids is None else self.vocab_ids[draft_ids]


@dataclass(frozen=True)
class Eagle3Options:
    """The published EAGLE-3 layouts' switches (module docstring); the defaults are SafeAILab's EAGLE-3."""

    captures: int = 3  # base hidden states concatenated into fc
    norm_before_residual: bool = False
    input_norm: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    final_norm: bool = True


class Eagle3MidLayer(nn.Module):
    def __init__(self, args: LlamaArgs, norm_before_residual: bool = False):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.hidden_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, in_features=2 * args.hidden_size)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args)
        self.norm_before_residual = norm_before_residual

    def forward(self, emb, g, cos, sin, segments: list[Segment]):
        hidden = self.hidden_norm(g)  # [sum T, H]
        a = torch.cat((self.input_layernorm(emb), hidden), dim=-1)  # [sum T, 2H], embedding first
        h = (hidden if self.norm_before_residual else g) + self.self_attn.forward_segments(a, cos, sin, segments, 0)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(DraftHead):
    format = "eagle3"
    layer_module, shares_head = "midlayer", False  # its own lm_head over the draft vocabulary

    def __init__(self, args: LlamaArgs, embed: nn.Embedding, draft_vocab_size: int, target_hidden_size: int,
                 options: Eagle3Options = Eagle3Options()):
        super().__init__()
        self.args, self.options = args, options
        n = options.captures * target_hidden_size
        self.input_norm = RMSNorm(n, args.rms_norm_eps) if options.input_norm else None
        self.fc_norm = nn.ModuleList(RMSNorm(target_hidden_size, args.rms_norm_eps) for _ in range(options.captures)) \
            if options.fc_norm else None
        self.fc = nn.Linear(n, args.hidden_size, bias=False)
        self.midlayer = Eagle3MidLayer(args, options.norm_before_residual)
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps) if options.final_norm else None
        self.lm_head = nn.Linear(args.hidden_size, draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab_size, dtype=torch.long))
        self.embed_tokens = embed
        self.capture: tuple[int, ...] = ()  # base layers whose input fc reads; set by runtime.loading.build_draft
        self.cache = self.rope = None

    def base_features(self, hidden, captured):
        x = captured  # [T, captures * H_t]
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.fc_norm is not None:
            x = torch.cat([norm(part) for norm, part in zip(self.fc_norm, x.chunk(len(self.fc_norm), dim=-1))], -1)
        return self.fc(x)

    def rows(self, input_ids, features, cos, sin, segments):
        out = self.midlayer(self.embed_tokens(input_ids), features, cos, sin, segments)  # [sum T, H]
        return self.norm(out) if self.options.norm_output else out  # what the next draft step reads

    def log_probs(self, out):
        normed = out if self.norm is None or self.options.norm_output else self.norm(out)
        return F.log_softmax(self.lm_head(normed).float(), dim=-1)

    def to_base_ids(self, draft_ids):
        return draft_ids + self.d2t[draft_ids]
