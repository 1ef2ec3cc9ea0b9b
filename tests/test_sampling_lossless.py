"""Stochastic EAGLE verification is lossless.

1. One verify step (fast, many configurations): for fixed base logits at every tree node, the first two committed
   tokens (t1, t2) must follow the base: P(t1 = x) = p_root(x) and, when x is a child in the tree, P(t2 = y | x) =
   p_x(y); when x is not in the tree, the step ends after the bonus token (t2 = "none").
2. End to end (slow): the first three sampled tokens of EAGLE generation on a tiny model follow the exact base
   distribution computed from its conditionals.
The end-to-end check runs with suffix-automaton candidates too (deterministic proposals merged into the tree).
Both use Pearson's chi-square test (cells with expected count < 5 pooled) rejected at p < 1e-4; over the 10 checks
below the family-wise false-alarm rate is under 1e-3. A lossy rule is shown to fail the same test (power check).
"""

import pytest
import torch

from eagle_trt.runtime import SamplingParams
from eagle_trt.runtime.drafting import DraftTree
from eagle_trt.runtime.verify import Acceptance, accept_sampling, sampling_probs
from runtime_helpers import tiny_decoder

ALPHA = 1e-4


def chisquare(observed, expected):
    """Pearson chi-square statistic and its p-value (df = cells - 1), via the regularized upper gamma."""
    o, e = torch.tensor(observed, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64)
    e = e * o.sum() / e.sum()
    stat = float(((o - e) ** 2 / e).sum())
    return stat, float(torch.special.gammaincc(torch.tensor((len(observed) - 1) / 2, dtype=torch.float64),
                                               torch.tensor(stat / 2, dtype=torch.float64)))


def goodness_of_fit(counts: dict, exact: dict, n: int) -> float:
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for outcome, p in exact.items():
        if p * n < 5:
            pool_o, pool_e = pool_o + counts.get(outcome, 0), pool_e + p * n
        else:
            observed.append(counts.get(outcome, 0))
            expected.append(p * n)
    if sum(counts.values()) != sum(counts.get(o, 0) for o in exact):
        return 0.0  # an outcome of probability 0 occurred
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    return chisquare(observed, expected)[1]


# ---- 1. one verify step ------------------------------------------------------------------------------------------
# parents and tokens of a small tree (root first); node 3 repeats its sibling's token 1 (dedupe must hold)
PARENTS = [-1, 0, 0, 0, 1, 1, 2]
TOKENS = [0, 1, 2, 1, 3, 4, 0]
VOCAB, N_STEP = 6, 40_000


def step_exact(logits, params):
    tree_children = {}
    for node, parent in enumerate(PARENTS[1:], start=1):
        tree_children.setdefault(parent, {}).setdefault(TOKENS[node], node)  # first sibling with a token wins
    p_root = sampling_probs(logits[0], params)
    exact = {}
    for x in range(VOCAB):
        if p_root[x] == 0:
            continue
        child = tree_children.get(0, {}).get(x)
        if child is None:
            exact[(x, None)] = float(p_root[x])
            continue
        p_child = sampling_probs(logits[child], params)
        for y in range(VOCAB):
            exact[(x, y)] = float(p_root[x] * p_child[y])
    return exact


def run_steps(logits, params, rule, n=N_STEP):
    tree = DraftTree.from_parents(torch.tensor(TOKENS), PARENTS, "cpu")
    gen = torch.Generator().manual_seed(0)
    counts = {}
    for _ in range(n):
        accepted = rule(logits, tree, params, gen)
        committed = accepted.tokens
        assert committed[:-1] == [TOKENS[i] for i in accepted.path[1:]]
        key = (committed[0], committed[1] if len(committed) > 1 else None)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9),
                                    SamplingParams(temperature=1.3, top_k=3)], ids=["T1", "T0.7-top_p", "T1.3-top_k"])
def test_one_verify_step_is_lossless(params):
    torch.manual_seed(1)
    logits = torch.randn(len(PARENTS), VOCAB) * 1.5
    exact = step_exact(logits, params)
    assert goodness_of_fit(run_steps(logits, params, accept_sampling), exact, N_STEP) > ALPHA


def test_power_a_rule_without_residual_is_caught():
    """Accept child x with probability p(x) but draw the bonus from the fresh p (no zeroing of rejected
    siblings): a classic bug. The test must reject it."""
    def no_residual(logits, tree, params, gen):
        tokens = tree.tokens.tolist()
        node, path = 0, [0]
        while True:
            p = sampling_probs(logits[node], params)
            nxt = None
            for c in tree.children[node]:
                if torch.rand((), generator=gen, dtype=torch.float64).item() < p[tokens[c]].item():
                    nxt = c
                    break
            if nxt is None:
                bonus = int(torch.multinomial(p, 1, generator=gen).item())
                return Acceptance(path, [tokens[i] for i in path[1:]] + [bonus])
            path.append(nxt)
            node = nxt

    torch.manual_seed(1)
    logits = torch.randn(len(PARENTS), VOCAB) * 1.5
    params = SamplingParams(temperature=1.0)
    assert goodness_of_fit(run_steps(logits, params, no_residual, 20_000), step_exact(logits, params), 20_000) < ALPHA


# ---- 2. end to end -------------------------------------------------------------------------------------------------
PROMPT, E2E_VOCAB, E2E_SAMPLES = [1, 5, 2, 7], 8, 10_000


def exact_three_tokens(decoder, params):
    base = decoder.base
    base.setup_cache(64)

    def cond(seq):
        logits, _, _ = base(torch.tensor(seq), torch.arange(len(seq)), 0)
        return sampling_probs(logits[-1], params)

    exact, p1 = {}, cond(PROMPT)
    for a in range(E2E_VOCAB):
        p2 = cond(PROMPT + [a])
        for b in range(E2E_VOCAB):
            p3 = cond(PROMPT + [a, b])
            for c in range(E2E_VOCAB):
                exact[(a, b, c)] = float(p1[a] * p2[b] * p3[c])
    return exact


@pytest.mark.slow
@pytest.mark.parametrize("tree, params", [("dynamic:2,3,6", SamplingParams(temperature=1.0)),
                                          ("static:[[0],[1],[0,0],[0,1]]", SamplingParams(temperature=0.7, top_p=0.9)),
                                          ("chain:1+suffix:1,3", SamplingParams(temperature=1.0))])
def test_generation_is_lossless_end_to_end(tree, params):
    decoder = tiny_decoder(tree, vocab=E2E_VOCAB, seed=3)
    exact = exact_three_tokens(decoder, params)
    counts, accepted, suffix_accepted = {}, 0, 0
    for seed in range(E2E_SAMPLES):
        result = decoder.generate_all(PROMPT, 3, SamplingParams(params.temperature, params.top_k, params.top_p, seed))
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
        accepted += result.stats.num_accepted_draft_tokens
        suffix_accepted += result.stats.num_accepted_suffix_tokens
    assert accepted > E2E_SAMPLES * 0.2, "drafts must get accepted, or the test checks nothing"
    if "+suffix" in tree:  # the automaton's deterministic candidates must be tried and accepted, not just drafted
        assert suffix_accepted > E2E_SAMPLES * 0.05, suffix_accepted
    assert goodness_of_fit(counts, exact, E2E_SAMPLES) > ALPHA
