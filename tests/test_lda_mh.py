"""torch.ops.wrs._lda_mh, the LDA example's Metropolis-Hastings phase (csrc/lda/mh.h):
with the counts held fixed, each token's chain has the full conditional under the counts
`now` as its stationary law, whatever the sweep-start counts its proposals come from. After
enough cycles the tokens that share (word, start topic) are i.i.d. draws from it."""
import pytest
import torch

import torch_wrs  # noqa: F401  (registers torch.ops.wrs)
from helpers import g_test_pvalue

P_MIN = 1e-4
K, V = 6, 2
ALPHA, BETA = 0.3, 0.05


def problem(n, device, perturb):
    """One document of n tokens over two words, topics drawn non-uniformly; the count tables
    consistent with z (the start), and `now` the start plus a perturbation (as after earlier
    phases)."""
    g = torch.Generator().manual_seed(3)
    word = torch.randint(V, (n,), generator=g)
    z = torch.multinomial(torch.tensor([5.0, 1, 3, 0.5, 2, 1]), n, True, generator=g)
    n_dk = torch.bincount(z, minlength=K).int().view(1, K)
    n_wk = torch.bincount(word * K + z, minlength=V * K).int().view(V, K)
    n_k = n_wk.sum(0)
    now = [n_dk.clone(), n_wk.clone(), n_k.clone()]
    if perturb:
        now[0] += torch.tensor([[400, 0, 7, 900, 0, 30]], dtype=torch.int32)
        now[1] += torch.tensor([[300, 0, 5, 500, 0, 10], [100, 0, 2, 400, 0, 20]], dtype=torch.int32)
        now[2] = now[1].sum(0)
    q_word = (n_wk.float() + BETA) / (n_k.float() + V * BETA)
    table = torch_wrs.alias_table(q_word)
    doc = torch.zeros(n, dtype=torch.int64)
    args = [doc, word, z, *now, n_dk, n_wk, n_k, q_word, table, z, torch.zeros(1, dtype=torch.int64),
            torch.tensor([n])]
    return [a.to(device) for a in args], now


def conditional(now, w, s0):
    n_dk, n_wk, n_k = (t.double() for t in now)
    own = torch.zeros(K, dtype=torch.float64)
    own[s0] = 1
    return (n_dk[0] - own + ALPHA) * (n_wk[w] - own + BETA) / (n_k - own + V * BETA)


@pytest.mark.parametrize("perturb", [False, True])
def test_chains_reach_the_full_conditional(device, perturb):
    n = 8_000_000 if device.type == "cuda" else 200_000
    args, now = problem(n, device, perturb)
    new = torch.ops.wrs._lda_mh(*args, 0, 1, 40, ALPHA, BETA, generator=torch.Generator(device).manual_seed(1)).cpu()
    word, z = args[1].cpu(), args[2].cpu()
    assert new.dtype == torch.int64 and new.shape == (n,) and int(new.min()) >= 0 and int(new.max()) < K
    for w in range(V):
        for s0 in range(K):
            group = new[(word == w) & (z == s0)]
            if group.numel() > 1000:
                p = g_test_pvalue(torch.bincount(group, minlength=K), conditional(now, w, s0))
                assert p > P_MIN, f"word {w}, start topic {s0}: p = {p}"


def test_reproducible_zero_cycles_and_errors(device):
    args, _ = problem(5000, device, False)
    run = lambda seed, cycles=3: torch.ops.wrs._lda_mh(*args, 0, 1, cycles, ALPHA, BETA,  # noqa: E731
                                                        generator=torch.Generator(device).manual_seed(seed))
    assert torch.equal(run(4), run(4)) and not torch.equal(run(4), run(5))
    assert torch.equal(run(4, cycles=0), args[2])  # no cycle: every token keeps its topic
    bad = list(args)
    bad[3] = bad[3].long()
    with pytest.raises(RuntimeError, match="n_dk must be a 2-D Int tensor"):
        torch.ops.wrs._lda_mh(*bad, 0, 1, 3, ALPHA, BETA)
    with pytest.raises(RuntimeError, match="phase must be in"):
        torch.ops.wrs._lda_mh(*args, 2, 2, 3, ALPHA, BETA)
    with pytest.raises(RuntimeError, match="d, w and s0 must have one length"):
        torch.ops.wrs._lda_mh(args[0][:10], *args[1:], 0, 1, 3, ALPHA, BETA)


def test_kernel_follows_the_examples_torch_chain(device):
    """Small counts (documents of 5 tokens, words of about 4), where a token's own count and
    the word step's redraws matter: the kernel's new topics and those of the example's torch
    chain (mh_start, then mh_cycle) agree in law, tokens grouped by start topic and by
    whether the token is its word's only one of that topic (two-sample chi-square)."""
    import os
    import sys

    import scipy.stats

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import lda_gibbs

    docs = 400_000 if device.type == "cuda" else 40_000
    n, words, k = 5 * docs, 5 * docs // 4, 6
    g = torch.Generator().manual_seed(11)
    doc = torch.arange(docs).repeat_interleave(5)
    word = torch.randint(words, (n,), generator=g)
    z = torch.multinomial(torch.tensor([5.0, 1, 3, 0.5, 2, 1]), n, True, generator=g)
    n_dk = torch.bincount(doc * k + z, minlength=docs * k).int().view(docs, k)
    n_wk = torch.bincount(word * k + z, minlength=words * k).int().view(words, k)
    n_k = n_wk.sum(0)
    q_word = (n_wk.float() + BETA) / (n_k.float() + words * BETA)
    tables = lda_gibbs.MHTables(n_dk, n_wk, n_k, q_word, torch_wrs.alias_table(q_word), z,
                                torch.arange(docs) * 5, torch.full((docs,), 5))
    tables = lda_gibbs.MHTables(*(t.to(device) for t in tables))
    counts = (tables.n_dk, tables.n_wk, tables.n_k)
    d, w, s = doc.to(device), word.to(device), z.to(device)
    cycles = 3
    ours = torch.ops.wrs._lda_mh(d, w, s, *counts, *counts, tables.q_word, tables.word_table, tables.z,
                                 tables.doc_start, tables.doc_length, 0, 1, cycles, ALPHA, BETA,
                                 generator=torch.Generator(device).manual_seed(2)).cpu()
    torch.manual_seed(2)
    keep_own, pi_s = lda_gibbs.mh_start(counts, tables, d, w, s, ALPHA, BETA)
    theirs = s.clone()
    for _ in range(cycles):
        theirs, pi_s = lda_gibbs.mh_cycle(counts, tables, 0, 1, d, w, s, keep_own, theirs, pi_s, ALPHA, BETA)
    theirs = theirs.cpu()
    alone = n_wk[word, z] == 1
    for s0 in range(k):
        for lonely in (False, True):
            group = (z == s0) & (alone == lonely)
            if group.sum() < 2000:
                continue
            table = torch.stack([torch.bincount(x[group], minlength=k) for x in (ours, theirs)])
            table = table[:, table.sum(0) > 0]
            p = scipy.stats.chi2_contingency(table.numpy())[1]
            assert p > P_MIN, f"start topic {s0}, alone {lonely}: p = {p}"
