"""Collapsed Gibbs sampling for LDA with torch and torch_wrs, on the GPU (or the CPU).

Every sweep resamples the tokens in a few interleaved groups, each group all at once from
the counts left by the groups before it (the parallel scheme of GPU LDA systems; more
groups, closer to sequential Gibbs), and updates the counts after each group. Samplers:

  --sampler mh     Metropolis-Hastings in the style of AliasLDA / LightLDA: per-word alias
                   tables over topics, rebuilt every sweep with one batched
                   torch_wrs.alias_table call, propose a topic from the word side; a second
                   proposal comes from the document (the topic of a random token of the
                   document, or a uniform topic); both are accepted or rejected for all
                   tokens at once, --mh-cycles times per sweep. O(1) per token, whatever K.
                   Each phase is one torch.ops.wrs._lda_mh call (csrc/lda/mh.h), every
                   cycle of a token in one thread: nothing to compile.
  --sampler mh-torch  the same chain in torch ops (mh_start, mh_cycle below), which
                   torch.compile fuses on the GPU into a kernel a cycle.
  --sampler exact  the full conditional of every token (K probabilities), drawn with
                   torch_wrs.multinomial.
  --sampler torch  the same with torch.multinomial: the baseline.

--estimate-alpha re-estimates alpha after every sweep from Dirichlet draws of the
documents' topic proportions (torch_wrs.dirichlet).

Corpora: the UCI bag-of-words format (--docword docword.X.txt --vocab vocab.X.txt, as
NYTimes and PubMed ship), plain text with one document per paragraph (--text; the
public-domain tests/data/state_of_the_union_2023.txt is the small real one), or a
synthetic corpus drawn from the LDA model itself with known topics and a Zipf vocabulary
(--synthetic small|medium|nytimes; the default, which needs no download).
At the end: the top words per topic, on synthetic data the topic-recovery score against
the planted topics, and with --plot a PNG of the log-likelihood per token against time
and against sweeps for the samplers run.

    python examples/lda_gibbs.py --synthetic nytimes --iters 50 --sampler mh
    python examples/lda_gibbs.py --synthetic small --sampler mh exact torch --plot lda.png
    python examples/lda_gibbs.py --text tests/data/state_of_the_union_2023.txt --topics 8 --iters 200

Data-parallel (AD-LDA style) over torch.distributed, one process per GPU (NCCL) or per CPU
process (gloo): the documents are sharded across ranks (contiguous, about equal tokens);
each rank keeps its documents' n_dk and a full copy of the word-topic counts n_wk, and
after each phase applies every rank's moves with one all_reduce of the count deltas. The
MH sampler's per-word alias tables are rebuilt from the global counts each sweep. Rank 0
prints and writes the history and plot. --target LL reports the time (sweeps only) to
reach that log-likelihood per token.

    torchrun --nproc_per_node=2 examples/lda_gibbs.py --synthetic nytimes --iters 50 --sampler mh
"""
import time

COMMAND_START = time.perf_counter()  # wall time to the target counts from here: imports, corpus, set-up

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
from dataclasses import dataclass
from typing import List, NamedTuple, Optional  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_wrs  # noqa: E402

IMPORTED = time.perf_counter()

SYNTHETIC = {  # documents, vocabulary, mean document length, topics (planted and fitted)
    "small": (2_000, 2_000, 100, 20),
    "medium": (50_000, 20_000, 200, 100),
    "nytimes": (300_000, 102_660, 333, 1_024),  # about 100M tokens, the shape of UCI NYTimes
    "pubmed": (8_200_000, 141_043, 90, 1_024),  # about 738M tokens, the shape of UCI PubMed
}
# Drawn in blocks of this many documents (synthetic_corpus_blocks), each rank only its own
# blocks on its own device: small enough blocks that ranks get about equal tokens.
BLOCK_GENERATED = {"nytimes": 1_024, "pubmed": 1 << 16}


@dataclass
class Corpus:
    doc: torch.Tensor  # int64 [N], sorted
    word: torch.Tensor  # int64 [N]
    num_docs: int
    vocab_size: int
    vocab: Optional[List[str]] = None
    true_topics: Optional[torch.Tensor] = None  # [K, V] word distributions of a synthetic corpus
    # Sharded over ranks: this rank's documents are global documents [first_doc, first_doc + num_docs).
    global_num_docs: Optional[int] = None
    global_num_tokens: Optional[int] = None
    first_doc: int = 0

    @property
    def num_tokens(self) -> int:
        return self.doc.numel()

    @property
    def total_tokens(self) -> int:
        return self.num_tokens if self.global_num_tokens is None else self.global_num_tokens

    @property
    def total_docs(self) -> int:
        return self.num_docs if self.global_num_docs is None else self.global_num_docs


def shard_corpus(corpus, rank, world_size):
    """Rank `rank`'s contiguous range of documents, cut so that ranks get about equal tokens;
    document ids start at 0 on every rank."""
    if world_size == 1:
        return corpus
    lengths = torch.bincount(corpus.doc, minlength=corpus.num_docs)
    ends = torch.cumsum(lengths, 0)
    targets = torch.tensor([corpus.num_tokens * r // world_size for r in range(world_size + 1)], device=ends.device)
    cuts = torch.searchsorted(ends, targets, right=True).tolist()
    cuts[0], cuts[-1] = 0, corpus.num_docs
    lo, hi = cuts[rank], cuts[rank + 1]
    t0, t1 = (int(ends[lo - 1]) if lo else 0), (int(ends[hi - 1]) if hi else 0)
    return Corpus(corpus.doc[t0:t1] - lo, corpus.word[t0:t1], hi - lo, corpus.vocab_size, corpus.vocab,
                  corpus.true_topics, corpus.num_docs, corpus.num_tokens, lo)


def zipf_weights(vocab_size, exponent=1.07, device="cpu"):
    return torch.arange(1, vocab_size + 1, dtype=torch.float64, device=device) ** -exponent


def planted_topics(vocab_size, num_topics, gen, device):
    """[K, V] topics: topic k's words follow a Zipf law over its own random ordering of the
    vocabulary, phi_k ~ Dirichlet(0.05 * V * zipf[perm_k])."""
    base = zipf_weights(vocab_size, device=device)
    perm = torch.argsort(torch.rand(num_topics, vocab_size, generator=gen, device=device), dim=1)
    return torch_wrs.dirichlet((0.05 * vocab_size * base / base.sum())[perm].float(), generator=gen)


def synthetic_corpus(num_docs, vocab_size, mean_length, num_topics, alpha=0.1, seed=0, device="cpu"):
    """A corpus drawn from LDA: topic k's words follow a Zipf law over its own random
    ordering of the vocabulary, phi_k ~ Dirichlet(0.05 * V * zipf[perm_k]); theta_d
    ~ Dirichlet(alpha), lengths ~ Poisson(mean_length), z ~ theta_d, w ~ phi_z. Uses
    torch_wrs's Dirichlet and alias sampling."""
    gen = torch.Generator(device=device).manual_seed(seed)
    phi = planted_topics(vocab_size, num_topics, gen, device)
    theta = torch_wrs.dirichlet(torch.full((num_docs, num_topics), alpha, device=device), generator=gen)
    lengths = torch.poisson(torch.full((num_docs,), float(mean_length), device=device), generator=gen).long().clamp(min=1)
    doc = torch.repeat_interleave(torch.arange(num_docs, device=device), lengths)
    # Topics: each document draws max(lengths) from its theta row; keep the first lengths[d].
    keep = torch.arange(int(lengths.max()), device=device)[None, :] < lengths[:, None]
    z = torch.cat([torch_wrs.alias_sample(torch_wrs.alias_table(theta[d0:d0 + 4096]), keep.shape[1], generator=gen)
                   [keep[d0:d0 + 4096]] for d0 in range(0, num_docs, 4096)])
    # Words: group tokens by topic, draw each topic's words from its alias table.
    order = torch.argsort(z)
    per_topic = torch.bincount(z, minlength=num_topics)
    draws = torch_wrs.alias_sample(torch_wrs.alias_table(phi), int(per_topic.max()), generator=gen)
    taken = torch.arange(draws.shape[1], device=device)[None, :] < per_topic[:, None]
    word = torch.empty_like(z)
    word[order] = draws[taken]
    return Corpus(doc, word, num_docs, vocab_size, None, phi.double())


def synthetic_corpus_blocks(num_docs, vocab_size, mean_length, num_topics, alpha=0.1, seed=0, device="cpu",
                            rank=0, world_size=1, block_docs=1 << 16, ready=None):
    """The LDA model of synthetic_corpus, drawn in blocks of `block_docs` documents, each
    from its own generator (seed, block): memory stays O(block) and rank r of world_size
    draws only its contiguous range of blocks, the same documents whatever the world size.
    Each token's word is one draw from its topic's alias table (a bucket, then the 32-bit
    threshold against a 53-bit uniform). `ready()`, if given, is called before the one
    collective (the sum of the ranks' tokens), so the process group may start meanwhile."""
    gen = torch.Generator(device=device).manual_seed(seed)
    phi = planted_topics(vocab_size, num_topics, gen, device)
    table = torch_wrs.alias_table(phi).view(-1)
    blocks = (num_docs + block_docs - 1) // block_docs
    lo, hi = blocks * rank // world_size, blocks * (rank + 1) // world_size
    docs, words = [], []
    for b in range(lo, hi):
        g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + b + 1)
        n = min(block_docs, num_docs - b * block_docs)
        theta = torch_wrs.dirichlet(torch.full((n, num_topics), alpha, device=device), generator=g)
        lengths = torch.poisson(torch.full((n,), float(mean_length), device=device), generator=g).long().clamp(min=1)
        doc = torch.repeat_interleave(torch.arange(n, device=device), lengths)
        z = torch_wrs.alias_sample(torch_wrs.alias_table(theta), int(lengths.max()), generator=g)
        z = z[torch.arange(z.shape[1], device=device)[None, :] < lengths[:, None]]
        bucket = torch.randint(vocab_size, z.shape, device=device, generator=g)
        entry = table[z * vocab_size + bucket]
        coin = torch.rand(z.shape, dtype=torch.float64, device=device, generator=g) * 2.0**32
        words.append(torch.where(coin < (entry & 0xFFFFFFFF).double(), bucket, entry >> 32))
        docs.append(doc + (b - lo) * block_docs)
    doc = torch.cat(docs) if docs else torch.zeros(0, dtype=torch.int64, device=device)
    word = torch.cat(words) if words else torch.zeros(0, dtype=torch.int64, device=device)
    first = lo * block_docs
    local_docs = min(hi * block_docs, num_docs) - first
    global_tokens = None
    if world_size > 1:
        if ready is not None:
            ready()
        total = torch.tensor([doc.numel()], device=device)
        dist.all_reduce(total)
        global_tokens = int(total)
    return Corpus(doc, word, local_docs, vocab_size, None, phi.double(),
                  num_docs if world_size > 1 else None, global_tokens, first)


def load_uci(docword_path, vocab_path=None, device="cpu"):
    """UCI bag-of-words: a header of three lines (D, W, NNZ), then "docID wordID count"
    (1-based) per line; vocab.X.txt has one word per line."""
    import numpy as np

    with open(docword_path) as f:
        num_docs, vocab_size, _ = (int(f.readline()) for _ in range(3))
        triples = np.loadtxt(f, dtype=np.int64, ndmin=2)
    d, w, c = (torch.from_numpy(triples[:, i].copy()) for i in range(3))
    doc = torch.repeat_interleave(d - 1, c)
    word = torch.repeat_interleave(w - 1, c)
    order = torch.argsort(doc, stable=True)
    vocab = None
    if vocab_path:
        with open(vocab_path) as f:
            vocab = [line.strip() for line in f]
    return Corpus(doc[order].to(device), word[order].to(device), num_docs, vocab_size, vocab)


STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between both
but by can could did do does doing down during each even every few for from further get had has have having he her
here hers him his how i if in into is it its just let like made make many may me more most much must my no nor not
now of off on once one only or other our ours out over own same she should so some such than that the their them
then there these they this those through to too under until up upon us very was we were what when where which while
who whom why will with would yet you your
""".split())


def load_text(path, min_count=2, device="cpu"):
    """A plain-text corpus: each blank-line-separated paragraph is a document; words are
    lowercased runs of letters of 3 or more, without common English stopwords, kept if
    they occur at least `min_count` times."""
    import re

    with open(path, encoding="utf-8") as f:
        paragraphs = [p for p in re.split(r"\n\s*\n", f.read()) if p.strip()]
    docs = [[t for t in re.findall(r"[a-z]+", p.lower()) if len(t) >= 3 and t not in STOPWORDS] for p in paragraphs]
    counts = {}
    for doc in docs:
        for t in doc:
            counts[t] = counts.get(t, 0) + 1
    vocab = sorted(t for t, c in counts.items() if c >= min_count)
    index = {t: i for i, t in enumerate(vocab)}
    docs = [[index[t] for t in doc if t in index] for doc in docs]
    docs = [doc for doc in docs if doc]
    doc = torch.repeat_interleave(torch.arange(len(docs)), torch.tensor([len(d) for d in docs]))
    word = torch.tensor([i for d in docs for i in d], dtype=torch.int64)
    return Corpus(doc.to(device), word.to(device), len(docs), len(vocab), vocab)


def conditional(counts, d, w, s0, k, alpha, beta):
    """Unnormalised full conditional p(z_t = k | the other tokens) of tokens (d, w) whose
    topic in `counts` (n_dk, n_wk, n_k) is s0, at topics k."""
    n_dk, n_wk, n_k = counts
    own = (k == s0).float()
    vb = n_wk.shape[0] * beta
    return (n_dk[d, k] - own + alpha) * (n_wk[w, k] - own + beta) / (n_k[k] - own + vb)


class MHTables(NamedTuple):
    """What the MH proposals of a sweep are drawn from: the counts at the sweep's start,
    the word proposal q_word [V, K] built from them with its alias table, and z then."""
    n_dk: torch.Tensor
    n_wk: torch.Tensor
    n_k: torch.Tensor
    q_word: torch.Tensor
    word_table: torch.Tensor
    z: torch.Tensor
    doc_start: torch.Tensor
    doc_length: torch.Tensor


# The MH sampler, for tokens (index t, document d, word w, topic s0 at the sweep's start),
# all at once. Only elementwise ops and gathers, with random numbers from torch's global
# generator, so that torch.compile turns each mh_cycle into one kernel
# (with inductor's Philox draws).

def q_word_others(tables, w, s0, x, beta):
    """The word proposal over the word's other tokens: the token's own topic s0 left out."""
    own = (x == s0).float()
    return (tables.n_wk[w, x] - own + beta) / (tables.n_k[x] - own + tables.n_wk.shape[0] * beta)


def q_doc_others(tables, d, s0, x, alpha):
    """The document proposal, n_dk + alpha over the document's other tokens."""
    return tables.n_dk[d, x] - (x == s0).float() + alpha


def mh_start(counts, tables, d, w, s0, alpha, beta):
    """(keep_own, pi(s0)): the probability of keeping a table draw of s0 (see mh_cycle) and
    the full conditional at the chain's starting point s0."""
    keep_own = q_word_others(tables, w, s0, s0, beta) / tables.q_word[w, s0]
    return keep_own, conditional(counts, d, w, s0, s0, alpha, beta)


def mh_cycle(counts, tables, phase, phases, d, w, s0, keep_own, s, pi_s, alpha, beta):
    """One word-proposal and one document-proposal MH step from topics s (where the full
    conditional is pi_s) towards the conditional at `counts`; returns the new (s, pi_s).
    The tokens are t = phase, phase + phases, ..."""
    K, n, device = tables.n_k.shape[0], d.shape[0], d.device
    t = phase + phases * torch.arange(n, device=device)

    def uniform():
        return torch.rand(n, device=device)

    def metropolis(k, q, s, pi_s):  # accept k with probability min(1, pi(k) q(s) / (pi(s) q(k)))
        pi_k = conditional(counts, d, w, s0, k, alpha, beta)
        accept = uniform() * pi_s * q(k) < pi_k * q(s)
        return torch.where(accept, k, s), torch.where(accept, pi_k, pi_s)

    # Word step. The alias table counts the token itself at s0, so a draw of s0 is kept with
    # probability keep_own = q_word_others(s0) / table(s0) and otherwise drawn again (twice;
    # what is left has probability below table(s0)^3): the proposal is q_word_others, which
    # does not depend on the chain's state, so the step is exact MH.
    def table_draw():  # a 24-bit coin against the 32-bit threshold: exact to 6e-8
        bucket = (uniform() * K).long().clamp(max=K - 1)
        entry = tables.word_table[w, bucket]
        take_bucket = uniform().double() * 2.0**32 < (entry & 0xFFFFFFFF).double()
        return torch.where(take_bucket, bucket, entry >> 32)

    k = table_draw()
    for _ in range(2):
        k = torch.where((k == s0) & (uniform() >= keep_own), table_draw(), k)
    s, pi_s = metropolis(k, lambda x: q_word_others(tables, w, s0, x, beta), s, pi_s)

    # Document step: the topic z had at the sweep's start on one of the document's other
    # tokens at random, or a uniform topic, in proportion to their masses in q_doc_others.
    others = tables.doc_length[d] - 1
    pick = tables.doc_start[d] + torch.minimum((uniform() * others).long(), others - 1).clamp(min=0)
    pick = pick + (pick >= t).long()  # skip the token itself
    from_doc = uniform() * (others + K * alpha) < others
    uniform_topic = (uniform() * K).long().clamp(max=K - 1)
    k = torch.where(from_doc, tables.z[pick.clamp(max=tables.z.shape[0] - 1)], uniform_topic)
    return metropolis(k, lambda x: q_doc_others(tables, d, s0, x, alpha), s, pi_s)


def move_tokens(counts, d, w, old, new):
    """Moves tokens from topics `old` to `new` in the count tables (n_dk, n_wk, n_k)."""
    n_dk, n_wk, n_k = counts
    K = n_k.shape[0]
    one = torch.ones(d.shape[0], dtype=n_dk.dtype, device=d.device)
    for table, row in ((n_dk.view(-1), d), (n_wk.view(-1), w)):
        table.index_add_(0, row * K + old, one, alpha=-1)
        table.index_add_(0, row * K + new, one)
    n_k.copy_(n_wk.sum(0))  # cheaper than 2 x tokens atomics on K counters


_COMPILED = {}


def compiled(fn):
    """torch.compile(fn), once per function."""
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn, dynamic=True)
    return _COMPILED[fn]


class LDA:
    """State (z and the count tables n_dk, n_wk, n_k) and the three samplers.

    All draws come from torch's global generator, seeded here: the MH kernel takes its
    stream from it, and torch.compile (used for mh-torch on the GPU unless compile=False)
    fuses those draws into its kernels."""

    def __init__(self, corpus, num_topics, alpha, beta, seed=0, compile=None):
        self.c, self.K, self.alpha, self.beta = corpus, num_topics, alpha, beta
        device = corpus.doc.device
        self.compile = device.type == "cuda" if compile is None else compile
        # Data-parallel when torch.distributed is set up: n_dk and z hold this rank's
        # documents, n_wk and n_k the global counts. Each rank seeds its own stream.
        self.world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        torch.manual_seed(seed + (dist.get_rank() if self.world_size > 1 else 0))
        self._phases = None
        self.doc_length = torch.bincount(corpus.doc, minlength=corpus.num_docs)
        self.doc_start = torch.cumsum(self.doc_length, 0) - self.doc_length
        self.z = torch.randint(num_topics, (corpus.num_tokens,), device=device)
        self.count()

    def count(self):
        c, K = self.c, self.K
        ones = torch.ones(c.num_tokens, dtype=torch.int32, device=c.doc.device)
        self.n_dk = torch.zeros(c.num_docs * K, dtype=torch.int32, device=c.doc.device)
        self.n_dk.index_add_(0, c.doc * K + self.z, ones)
        self.n_wk = torch.zeros(c.vocab_size * K, dtype=torch.int32, device=c.doc.device)
        self.n_wk.index_add_(0, c.word * K + self.z, ones)
        self.n_dk, self.n_wk = self.n_dk.view(c.num_docs, K), self.n_wk.view(c.vocab_size, K)
        if self.world_size > 1:
            dist.all_reduce(self.n_wk)
        self.n_k = self.n_wk.sum(0)

    def sweep(self, sampler, phases=4, mh_cycles=1, chunk=1 << 16):
        """One pass over all tokens, in `phases` interleaved groups (token t in group t mod
        phases): each group is resampled at once from the counts left by the groups
        before it, then the counts are updated. More phases, closer to sequential Gibbs."""
        # Only the MH cycle, run cycles x phases times a sweep, is compiled: compiling the
        # start and the count updates too saved little and cost seconds of set-up.
        fused = compiled if self.compile else (lambda fn: fn)
        counts = (self.n_dk, self.n_wk, self.n_k)
        if sampler in ("mh", "mh-torch"):
            tables = self._mh_tables()
        for p, (d, w) in enumerate(self._phase_tokens(phases)):
            s = self.z[p::phases].contiguous()
            if sampler == "mh":
                new = torch.ops.wrs._lda_mh(d, w, s, *counts, tables.n_dk, tables.n_wk, tables.n_k, tables.q_word,
                                            tables.word_table, tables.z, tables.doc_start, tables.doc_length, p,
                                            phases, mh_cycles, self.alpha, self.beta)
            elif sampler == "mh-torch":
                keep_own, pi_s = mh_start(counts, tables, d, w, s, self.alpha, self.beta)
                new = s.clone()  # not s itself: one compiled graph for every cycle
                for _ in range(mh_cycles):
                    new, pi_s = fused(mh_cycle)(counts, tables, p, phases, d, w, s, keep_own, new, pi_s,
                                                self.alpha, self.beta)
            else:
                multinomial = torch_wrs.multinomial if sampler == "exact" else torch.multinomial
                new = torch.cat([self._resample_exact(d[i:i + chunk], w[i:i + chunk], s[i:i + chunk], multinomial)
                                 for i in range(0, d.numel(), chunk)])
            if self.world_size == 1:
                move_tokens(counts, d, w, s, new)
            else:  # this rank's moves into a delta of n_wk, then everyone's with one all_reduce
                delta = torch.zeros_like(self.n_wk)
                move_tokens((self.n_dk, delta, torch.empty_like(self.n_k)), d, w, s, new)
                dist.all_reduce(delta)
                self.n_wk += delta
                self.n_k.copy_(self.n_wk.sum(0))
            self.z[p::phases] = new

    def _phase_tokens(self, phases):
        """(document, word) of the tokens of each phase, contiguous (strided reads would
        fetch every phase's tokens)."""
        if self._phases is None or len(self._phases) != phases:
            c = self.c
            self._phases = [(c.doc[p::phases].contiguous(), c.word[p::phases].contiguous()) for p in range(phases)]
        return self._phases

    def _resample_exact(self, d, w, s, multinomial):
        own = torch.nn.functional.one_hot(s, self.K).float()
        p = (self.n_dk[d].float() - own + self.alpha) * (self.n_wk[w].float() - own + self.beta)
        p /= self.n_k.float() - own + self.c.vocab_size * self.beta
        return multinomial(p, 1, True).squeeze(1)

    def _mh_tables(self):
        """The sweep's proposals: an alias table per word over q_word(k) ~ (n_wk + beta) /
        (n_k + V beta), and the document side from z and n_dk as they are now."""
        q_word = (self.n_wk.float() + self.beta) / (self.n_k.float() + self.c.vocab_size * self.beta)
        return MHTables(self.n_dk.clone(), self.n_wk.clone(), self.n_k.clone(), q_word,
                        torch_wrs.alias_table(q_word, validate=False), self.z.clone(), self.doc_start, self.doc_length)

    def estimate_alpha(self, newton_steps=20, docs_per_chunk=16384):
        """Stochastic EM for the symmetric document prior: draws theta_d ~ Dirichlet(n_dk +
        alpha) with torch_wrs.dirichlet, then sets alpha to the maximum of the Dirichlet
        likelihood of those draws, D (lgamma(K a) - K lgamma(a)) + (a - 1) sum log theta,
        by Newton's method (the likelihood is concave in a)."""
        D, K = self.c.total_docs, self.K
        sum_log_theta = sum(
            (torch_wrs.dirichlet(self.n_dk[i:i + docs_per_chunk].double() + self.alpha)
             .clamp(min=torch.finfo(torch.float64).tiny).log().sum()
             for i in range(0, self.c.num_docs, docs_per_chunk)),
            torch.zeros((), dtype=torch.float64, device=self.n_dk.device))
        if self.world_size > 1:
            dist.all_reduce(sum_log_theta)
        a = torch.tensor(self.alpha, dtype=torch.float64, device=sum_log_theta.device)
        for _ in range(newton_steps):
            grad = D * K * (torch.digamma(K * a) - torch.digamma(a)) + sum_log_theta
            hess = D * K * (K * torch.polygamma(1, K * a) - torch.polygamma(1, a))
            a = torch.where(a - grad / hess > 0, a - grad / hess, a / 2)
        self.alpha = float(a)
        return self.alpha

    # -- diagnostics --
    def log_likelihood_per_token(self):
        """log p(w | z) / N under the collapsed model (Dirichlet(beta) topics)."""
        V, K, b = self.c.vocab_size, self.K, self.beta
        ll = K * (math.lgamma(V * b) - V * math.lgamma(b))
        ll += torch.lgamma(self.n_wk.double() + b).sum().item() - torch.lgamma(self.n_k.double() + V * b).sum().item()
        return ll / self.c.total_tokens

    def topics(self):
        """[K, V] estimated word distributions."""
        return ((self.n_wk.double() + self.beta) / (self.n_k.double() + self.c.vocab_size * self.beta)).t()

    def check_counts(self):
        """The tables agree with z and the corpus (row and column sums)."""
        c = self.c
        n_k_docs = self.n_dk.sum(0).long()
        word_counts = torch.bincount(c.word, minlength=c.vocab_size)
        recount = torch.zeros_like(self.n_wk).view(-1).index_add_(
            0, c.word * self.K + self.z, torch.ones_like(self.z, dtype=self.n_wk.dtype)).view_as(self.n_wk)
        if self.world_size > 1:  # every rank's documents
            for t in (n_k_docs, word_counts, recount):
                dist.all_reduce(t)
        assert int(self.n_k.sum()) == c.total_tokens
        assert torch.equal(self.n_dk.sum(1).long(), self.doc_length)
        assert torch.equal(self.n_wk.sum(0).long(), self.n_k) and torch.equal(n_k_docs, self.n_k)
        assert torch.equal(self.n_wk.sum(1).long(), word_counts)
        assert torch.equal(self.n_wk, recount), "n_wk differs from the counts of z"


def topic_recovery(estimated, true):
    """Mean cosine similarity of estimated topics matched one-to-one to the planted ones."""
    from scipy.optimize import linear_sum_assignment

    a = torch.nn.functional.normalize(estimated.double(), dim=1)
    b = torch.nn.functional.normalize(true.double().to(a.device), dim=1)
    sim = (a @ b.t()).cpu()
    rows, cols = linear_sum_assignment(-sim.numpy())
    return float(sim[rows, cols].mean())


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train(corpus, sampler, iters, num_topics, alpha, beta, seed=0, phases=4, mh_cycles=1, check=False,
          progress=True, compile=None, estimate_alpha=False, start=None):
    """Runs `iters` sweeps; returns the model and a history of (seconds of sweeps, tokens/s,
    ll/token, wall seconds since `start`), `start` a time.perf_counter() reading (default:
    now), so that the last column counts whatever came before the sweeps (corpus, set-up)."""
    start = time.perf_counter() if start is None else start
    model = LDA(corpus, num_topics, alpha, beta, seed, compile)
    device = corpus.doc.device
    history, elapsed = [], 0.0
    try:
        from tqdm import tqdm

        bar = tqdm(range(iters), desc=sampler, disable=not progress)
    except ImportError:
        bar = range(iters)
    for it in bar:
        _sync(device)
        t0 = time.perf_counter()
        model.sweep(sampler, phases, mh_cycles)
        _sync(device)
        dt = time.perf_counter() - t0
        elapsed += dt
        if estimate_alpha:
            model.estimate_alpha()
        ll = model.log_likelihood_per_token()
        history.append((elapsed, corpus.total_tokens / dt, ll, time.perf_counter() - start))
        if check:
            model.check_counts()
        if progress:
            text = f"{corpus.total_tokens / dt / 1e6:8.1f}M tokens/s  ll/token {ll:.4f}"
            if estimate_alpha:
                text += f"  alpha {model.alpha:.4g}"
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(text)
            else:
                print(f"{sampler} iter {it + 1:3d}/{iters}: {text}", flush=True)
    return model, history


def time_to_target(history, target, wall=False):
    """Seconds of sweeps (or, with `wall`, wall seconds since the history's start) until the
    log-likelihood per token first reaches `target` (None if never)."""
    if target is None:
        return None
    return next((h[3] if wall else h[0] for h in history if h[2] >= target), None)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", choices=sorted(SYNTHETIC), default="small")
    parser.add_argument("--docword", help="UCI docword.X.txt (instead of a synthetic corpus)")
    parser.add_argument("--vocab", help="UCI vocab.X.txt")
    parser.add_argument("--text", help="a plain-text file, one document per paragraph (e.g. tests/data/*.txt)")
    parser.add_argument("--sampler", nargs="+", choices=["mh", "mh-torch", "exact", "torch"], default=["mh"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--topics", type=int, help="K (default: the synthetic preset's, or 100)")
    parser.add_argument("--alpha", type=float, help="document prior (default 50 / K)")
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phases", type=int, default=4, help="token groups resampled in turn per sweep")
    parser.add_argument("--mh-cycles", type=int, default=4,
                        help="word + document MH step pairs per token per sweep (more: closer to an exact draw)")
    parser.add_argument("--history", help="write each sampler's (seconds, tokens/s, ll/token) per sweep here (JSON)")
    parser.add_argument("--estimate-alpha", action="store_true",
                        help="re-estimate alpha after every sweep from Dirichlet draws of the document topics")
    parser.add_argument("--no-compile", action="store_true", help="run mh-torch eagerly on the GPU too")
    parser.add_argument("--plot", help="PNG of log-likelihood per token against time")
    parser.add_argument("--target", type=float,
                        help="report the time (sweeps only) to reach this log-likelihood per token")
    parser.add_argument("--check", action="store_true", help="check the count tables after every sweep")
    args = parser.parse_args()
    device = torch.device(args.device)

    # Under torchrun: one process per GPU (NCCL) or CPU process (gloo), documents sharded.
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    starting = None
    if world_size > 1:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        # The process group (rendezvous, then NCCL's communicator: device_id starts it now)
        # starts in a thread while this rank draws or reads its corpus.
        def start_group():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    device_id=device if device.type == "cuda" else None)
            return time.perf_counter()

        starting = concurrent.futures.ThreadPoolExecutor(1).submit(start_group)
    say = print if rank == 0 else (lambda *a, **k: None)

    waited = []  # when this rank first waited for the group: its corpus drawn or read

    def group_ready():
        waited.append(time.perf_counter())
        return starting.result() if starting is not None else None  # re-raises what the start raised

    if args.docword:
        corpus = shard_corpus(load_uci(args.docword, args.vocab, device), rank, world_size)
        k = args.topics or 100
    elif args.text:
        corpus = shard_corpus(load_text(args.text, device=device), rank, world_size)
        k = args.topics or 10
    else:
        docs, vocab, length, k_true = SYNTHETIC[args.synthetic]
        if args.synthetic in BLOCK_GENERATED:
            corpus = synthetic_corpus_blocks(docs, vocab, length, k_true, seed=args.seed, device=device,
                                             rank=rank, world_size=world_size,
                                             block_docs=BLOCK_GENERATED[args.synthetic], ready=group_ready)
        else:
            corpus = shard_corpus(synthetic_corpus(docs, vocab, length, k_true, seed=args.seed, device=device),
                                  rank, world_size)
        k = args.topics or k_true
    grouped = group_ready()
    drawn = waited[0]
    alpha = args.alpha if args.alpha is not None else 50.0 / k
    say(f"corpus: {corpus.total_docs:,} documents, {corpus.vocab_size:,} words, {corpus.total_tokens:,} tokens; "
        f"K = {k}, alpha = {alpha:.4g}, beta = {args.beta}, on {device}"
        + (f" and {world_size - 1} more ranks (data-parallel)" if world_size > 1 else ""))

    results = {}
    setup = time.perf_counter() - COMMAND_START  # imports, process group, corpus
    for sampler in args.sampler:
        # Each sampler's wall time counts the shared set-up, then its own run (compilation too).
        model, history = train(corpus, sampler, args.iters, k, alpha, args.beta, args.seed, args.phases,
                               args.mh_cycles, check=args.check, progress=rank == 0,
                               compile=False if args.no_compile else None, estimate_alpha=args.estimate_alpha,
                               start=time.perf_counter() - setup)
        steady = [h[1] for h in history[min(10, len(history) - 1):]]
        rate = sorted(steady)[len(steady) // 2]
        results[sampler] = (model, history, rate)
        first = history[0][0]
        later = corpus.total_tokens / rate if len(history) > 1 else first
        group = "" if grouped is None else f", the process group ready at {grouped - COMMAND_START:.1f} s"
        say(f"  set-up: {setup:.1f} s to the corpus (imports {IMPORTED - COMMAND_START:.1f} s, the corpus drawn or read at "
            f"{drawn - COMMAND_START:.1f} s{group}); the first sweep "
            f"took {first:.1f} s against {later:.2f} s for a later one (compilation, or loading it from "
            f"torch.compile's cache: {max(first - later, 0):.1f} s)")
        if device.type == "cuda":
            say(f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB (rank 0)")

    target = "time to target ll" if args.target is None else f"sweeps' time to ll {args.target}"
    say(f"\n| sampler | GPUs/ranks | tokens/s (median of iterations 10+) | log-likelihood per token | "
        f"{target} | wall time to it, from the command's start | topic recovery |")
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for sampler, (model, history, rate) in results.items():
        recovery = "n/a"
        if corpus.true_topics is not None and rank == 0:
            recovery = f"{topic_recovery(model.topics(), corpus.true_topics):.3f}"
        reached, wall = time_to_target(history, args.target), time_to_target(history, args.target, wall=True)
        reached = "n/a" if args.target is None else "not reached" if reached is None else f"{reached:.2f} s"
        wall = "n/a" if args.target is None else "not reached" if wall is None else f"{wall:.1f} s"
        say(f"| {sampler} | {world_size} | {rate / 1e6:.1f}M | {history[-1][2]:.4f} | {reached} | {wall} | "
            f"{recovery} |")
    if rank != 0:
        dist.destroy_process_group()
        return

    if world_size > 1:
        dist.destroy_process_group()
    model = next(iter(results.values()))[0]
    top = model.topics().topk(8, dim=1).indices.cpu()
    print(f"\ntop words of the first topics ({next(iter(results))}):")
    for t in range(min(10, k)):
        words = [corpus.vocab[i] if corpus.vocab else str(int(i)) for i in top[t]]
        print(f"  topic {t:3d}: {' '.join(words)}")

    if args.history:
        import json

        with open(args.history, "w") as f:
            json.dump({sampler: history for sampler, (_, history, _) in results.items()}, f)
    if args.plot:
        plot_histories({sampler: history for sampler, (_, history, _) in results.items()}, args.plot)


def plot_histories(histories, path):
    """A PNG of log-likelihood per token against seconds and against sweeps, one line per
    sampler."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib is not installed: no plot written to {path})")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, history in histories.items():
        axes[0].plot([h[0] for h in history], [h[2] for h in history], label=label)
        axes[1].plot(range(1, len(history) + 1), [h[2] for h in history], label=label)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("seconds")
    axes[1].set_xlabel("sweeps")
    axes[0].set_ylabel("log-likelihood per token")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
