"""Collapsed Gibbs sampling for LDA with torch and torch_wrs, on the GPU (or the CPU).

Every sweep resamples the tokens in a few interleaved groups, each group all at once from
the counts left by the groups before it (the parallel scheme of GPU LDA systems; more
groups, closer to sequential Gibbs), and updates the counts after each group. Samplers:

  --sampler mh     Metropolis-Hastings in the style of AliasLDA / LightLDA: per-word alias
                   tables over topics, rebuilt every sweep with one batched
                   torch_wrs.alias_table call, propose a topic from the word side; a second
                   proposal comes from the document (the topic of a random token of the
                   document, or a uniform topic); both are accepted or rejected for all
                   tokens at once. O(1) per token, whatever K.
  --sampler exact  the full conditional of every token (K probabilities), drawn with
                   torch_wrs.multinomial.
  --sampler torch  the same with torch.multinomial: the baseline.

Corpora: the UCI bag-of-words format (--docword docword.X.txt --vocab vocab.X.txt, as
NYTimes and PubMed ship), plain text with one document per paragraph (--text; the
public-domain tests/data/state_of_the_union_2023.txt is the small real one), or a synthetic corpus drawn from the LDA model itself with known
topics and a Zipf vocabulary (--synthetic small|medium|nytimes; the default, since these
machines have no internet). At the end: the top words per topic, on synthetic data the
topic-recovery score against the planted topics, and with --plot a PNG of the
log-likelihood per token against time for the samplers run.

    python examples/lda_gibbs.py --synthetic nytimes --iters 50 --sampler mh
    python examples/lda_gibbs.py --synthetic small --sampler mh exact torch --plot lda.png
    python examples/lda_gibbs.py --text tests/data/state_of_the_union_2023.txt --topics 8 --iters 200
"""
import argparse
import math
import time
from dataclasses import dataclass
from typing import List, Optional

import torch

import torch_wrs

SYNTHETIC = {  # documents, vocabulary, mean document length, topics (planted and fitted)
    "small": (2_000, 2_000, 100, 20),
    "medium": (50_000, 20_000, 200, 100),
    "nytimes": (300_000, 102_660, 333, 1_024),  # about 100M tokens, the shape of UCI NYTimes
}


@dataclass
class Corpus:
    doc: torch.Tensor  # int64 [N], sorted
    word: torch.Tensor  # int64 [N]
    num_docs: int
    vocab_size: int
    vocab: Optional[List[str]] = None
    true_topics: Optional[torch.Tensor] = None  # [K, V] word distributions of a synthetic corpus

    @property
    def num_tokens(self) -> int:
        return self.doc.numel()


def zipf_weights(vocab_size, exponent=1.07, device="cpu"):
    return torch.arange(1, vocab_size + 1, dtype=torch.float64, device=device) ** -exponent


def synthetic_corpus(num_docs, vocab_size, mean_length, num_topics, alpha=0.1, seed=0, device="cpu"):
    """A corpus drawn from LDA: topic k's words follow a Zipf law over its own random
    ordering of the vocabulary, phi_k ~ Dirichlet(0.05 * V * zipf[perm_k]); theta_d
    ~ Dirichlet(alpha), lengths ~ Poisson(mean_length), z ~ theta_d, w ~ phi_z. Uses
    torch_wrs's Dirichlet and alias sampling."""
    gen = torch.Generator(device=device).manual_seed(seed)
    base = zipf_weights(vocab_size, device=device)
    perm = torch.argsort(torch.rand(num_topics, vocab_size, generator=gen, device=device), dim=1)
    phi = torch_wrs.dirichlet((0.05 * vocab_size * base / base.sum())[perm].float(), generator=gen)
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


class LDA:
    """State (z and the count tables n_dk, n_wk, n_k) and the three samplers."""

    def __init__(self, corpus, num_topics, alpha, beta, seed=0):
        self.c, self.K, self.alpha, self.beta = corpus, num_topics, alpha, beta
        device = corpus.doc.device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.doc_length = torch.bincount(corpus.doc, minlength=corpus.num_docs)
        self.doc_start = torch.cumsum(self.doc_length, 0) - self.doc_length
        self.z = torch.randint(num_topics, (corpus.num_tokens,), device=device, generator=self.gen)
        self.count()

    def count(self):
        c, K = self.c, self.K
        ones = torch.ones(c.num_tokens, dtype=torch.int32, device=c.doc.device)
        self.n_dk = torch.zeros(c.num_docs * K, dtype=torch.int32, device=c.doc.device)
        self.n_dk.index_add_(0, c.doc * K + self.z, ones)
        self.n_wk = torch.zeros(c.vocab_size * K, dtype=torch.int32, device=c.doc.device)
        self.n_wk.index_add_(0, c.word * K + self.z, ones)
        self.n_dk, self.n_wk = self.n_dk.view(c.num_docs, K), self.n_wk.view(c.vocab_size, K)
        self.n_k = torch.bincount(self.z, minlength=K)

    # -- the target: p(z_t = k | everything else), up to a constant, at the sweep's counts --
    def _conditional(self, d, w, s, k):
        """Unnormalised full conditional of tokens (d, w, current topic s) at topics k."""
        own = (k == s).to(torch.float32)
        vb = self.c.vocab_size * self.beta
        ndk = self.n_dk[d, k].float() - own
        nwk = self.n_wk[w, k].float() - own
        nk = self.n_k[k].float() - own
        return (ndk + self.alpha) * (nwk + self.beta) / (nk + vb)

    def sweep(self, sampler, phases=4, mh_cycles=1, chunk=1 << 16):
        """One pass over all tokens, in `phases` interleaved groups (token t in group t mod
        phases): each group is resampled at once from the counts left by the groups
        before it, then the counts are updated. More phases, closer to sequential Gibbs."""
        if sampler == "mh":
            self._prepare_mh()
        for p in range(phases):
            t = slice(p, None, phases)
            d, w, s = self.c.doc[t], self.c.word[t], self.z[t]
            if sampler == "mh":
                t_index = torch.arange(p, self.c.num_tokens, phases, device=d.device)
                new = self._resample_mh(t_index, d, w, s, mh_cycles)
            else:
                multinomial = torch_wrs.multinomial if sampler == "exact" else torch.multinomial
                new = torch.cat([self._resample_exact(d[i:i + chunk], w[i:i + chunk], s[i:i + chunk], multinomial)
                                 for i in range(0, d.numel(), chunk)])
            self._move(d, w, s, new)
            self.z[t] = new

    def _move(self, d, w, old, new):
        """Moves tokens from topics `old` to `new` in the count tables."""
        K = self.K
        one = torch.ones(d.numel(), dtype=torch.int32, device=d.device)
        for table, row in ((self.n_dk.view(-1), d), (self.n_wk.view(-1), w)):
            table.index_add_(0, row * K + old, one, alpha=-1)
            table.index_add_(0, row * K + new, one)
        self.n_k.index_add_(0, old, one.long(), alpha=-1)
        self.n_k.index_add_(0, new, one.long())

    def _resample_exact(self, d, w, s, multinomial):
        own = torch.nn.functional.one_hot(s, self.K).float()
        p = (self.n_dk[d].float() - own + self.alpha) * (self.n_wk[w].float() - own + self.beta)
        p /= self.n_k.float() - own + self.c.vocab_size * self.beta
        return multinomial(p, 1, True, generator=self.gen).squeeze(1)

    def _prepare_mh(self):
        """The sweep's proposals: an alias table per word over q_w(k) ~ (n_wk + beta) /
        (n_k + V beta), and the document side from z and n_dk as they are now."""
        c = self.c
        self.q_word = (self.n_wk.float() + self.beta) / (self.n_k.float() + c.vocab_size * self.beta)
        self.word_table = torch_wrs.alias_table(self.q_word, validate=False)
        self.z_start, self.n_dk_start = self.z.clone(), self.n_dk.clone()
        self.n_wk_start, self.n_k_start = self.n_wk.clone(), self.n_k.clone()

    def _resample_mh(self, t, d, w, s0, cycles=1):
        """`cycles` rounds of a word-proposal and a document-proposal MH step per token."""
        K, gen, n, device = self.K, self.gen, d.numel(), d.device
        vb = self.c.vocab_size * self.beta

        # The word tables count the token itself (at s0, the sweep's start). Proposing from
        # the other tokens only, q_w below, keeps the proposal independent of the token's
        # own topic (so the step is exact MH): a draw of s0 is kept with probability
        # q_w(s0) / table(s0) and otherwise drawn again (twice; what is left after that
        # has probability below table(s0)^3).
        def q_w(x):
            own = (x == s0).float()
            return (self.n_wk_start[w, x].float() - own + self.beta) / (self.n_k_start[x].float() - own + vb)

        keep_own = q_w(s0) / self.q_word[w, s0]

        def word_proposal():
            bucket = torch.randint(K, (n,), device=device, generator=gen)
            coin = torch.randint(1 << 32, (n,), device=device, generator=gen)
            entry = self.word_table[w, bucket]
            return torch.where(coin < (entry & 0xFFFFFFFF), bucket, entry >> 32)

        # Document proposal, q_d(k) ~ n_dk + alpha over the document's other tokens at the
        # sweep's start: the topic of one of them at random, or a uniform topic. It does not
        # depend on the token's own topic, so this step is exact MH.
        def q_d(x):
            return self.n_dk_start[d, x].float() - (x == s0).float() + self.alpha

        others = self.doc_length[d].float() - 1
        s = s0
        for _ in range(cycles):
            k = word_proposal()
            for _ in range(2):
                again = (k == s0) & (torch.rand(n, device=device, generator=gen) >= keep_own)
                k = torch.where(again, word_proposal(), k)
            s = self._accept(d, w, s0, s, k, q_w(s), q_w(k))
            from_doc = torch.rand(n, device=device, generator=gen) * (others + K * self.alpha) < others
            pick = self.doc_start[d] + (torch.rand(n, device=device, generator=gen) * others).long()
            pick += (pick >= t).long()  # skip the token itself
            uniform = torch.randint(K, (n,), device=device, generator=gen)
            k = torch.where(from_doc, self.z_start[pick.clamp(max=self.c.num_tokens - 1)], uniform)
            s = self._accept(d, w, s0, s, k, q_d(s), q_d(k))
        return s

    def _accept(self, d, w, s0, s, k, q_s, q_k):
        """MH step from s to proposal k for every token: accept with min(1, pi(k) q(s) / (pi(s) q(k)))."""
        ratio = self._conditional(d, w, s0, k) * q_s / (self._conditional(d, w, s0, s) * q_k)
        u = torch.rand(ratio.shape, device=ratio.device, generator=self.gen)
        return torch.where(u < ratio, k, s)

    # -- diagnostics --
    def log_likelihood_per_token(self):
        """log p(w | z) / N under the collapsed model (Dirichlet(beta) topics)."""
        V, K, b = self.c.vocab_size, self.K, self.beta
        ll = K * (math.lgamma(V * b) - V * math.lgamma(b))
        ll += torch.lgamma(self.n_wk.double() + b).sum().item() - torch.lgamma(self.n_k.double() + V * b).sum().item()
        return ll / self.c.num_tokens

    def topics(self):
        """[K, V] estimated word distributions."""
        return ((self.n_wk.double() + self.beta) / (self.n_k.double() + self.c.vocab_size * self.beta)).t()

    def check_counts(self):
        """The tables agree with z and the corpus (row and column sums)."""
        c = self.c
        assert int(self.n_k.sum()) == c.num_tokens
        assert torch.equal(self.n_dk.sum(1).long(), self.doc_length)
        assert torch.equal(self.n_wk.sum(0).long(), self.n_k) and torch.equal(self.n_dk.sum(0).long(), self.n_k)
        assert torch.equal(self.n_wk.sum(1).long(), torch.bincount(c.word, minlength=c.vocab_size))


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
          progress=True):
    """Runs `iters` sweeps; returns the model and a history of (seconds, tokens/s, ll/token)."""
    model = LDA(corpus, num_topics, alpha, beta, seed)
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
        ll = model.log_likelihood_per_token()
        history.append((elapsed, corpus.num_tokens / dt, ll))
        if check:
            model.check_counts()
        if progress:
            text = f"{corpus.num_tokens / dt / 1e6:8.1f}M tokens/s  ll/token {ll:.4f}"
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(text)
            else:
                print(f"{sampler} iter {it + 1:3d}/{iters}: {text}", flush=True)
    return model, history


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", choices=sorted(SYNTHETIC), default="small")
    parser.add_argument("--docword", help="UCI docword.X.txt (instead of a synthetic corpus)")
    parser.add_argument("--vocab", help="UCI vocab.X.txt")
    parser.add_argument("--text", help="a plain-text file, one document per paragraph (e.g. tests/data/*.txt)")
    parser.add_argument("--sampler", nargs="+", choices=["mh", "exact", "torch"], default=["mh"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--topics", type=int, help="K (default: the synthetic preset's, or 100)")
    parser.add_argument("--alpha", type=float, help="document prior (default 50 / K)")
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phases", type=int, default=4, help="token groups resampled in turn per sweep")
    parser.add_argument("--mh-cycles", type=int, default=1, help="word + document MH steps per token per sweep")
    parser.add_argument("--plot", help="PNG of log-likelihood per token against time")
    args = parser.parse_args()
    device = torch.device(args.device)

    if args.docword:
        corpus = load_uci(args.docword, args.vocab, device)
        k = args.topics or 100
    elif args.text:
        corpus = load_text(args.text, device=device)
        k = args.topics or 10
    else:
        docs, vocab, length, k_true = SYNTHETIC[args.synthetic]
        corpus = synthetic_corpus(docs, vocab, length, k_true, seed=args.seed, device=device)
        k = args.topics or k_true
    alpha = args.alpha if args.alpha is not None else 50.0 / k
    print(f"corpus: {corpus.num_docs:,} documents, {corpus.vocab_size:,} words, {corpus.num_tokens:,} tokens; "
          f"K = {k}, alpha = {alpha:.4g}, beta = {args.beta}, on {device}")

    results = {}
    for sampler in args.sampler:
        model, history = train(corpus, sampler, args.iters, k, alpha, args.beta, args.seed, args.phases,
                               args.mh_cycles)
        steady = [h[1] for h in history[min(10, len(history) - 1):]]
        rate = sorted(steady)[len(steady) // 2]
        results[sampler] = (model, history, rate)
        if device.type == "cuda":
            print(f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")

    print("\n| sampler | tokens/s (median of iterations 10+) | log-likelihood per token | topic recovery |")
    print("| --- | ---: | ---: | ---: |")
    for sampler, (model, history, rate) in results.items():
        recovery = f"{topic_recovery(model.topics(), corpus.true_topics):.3f}" if corpus.true_topics is not None else "n/a"
        print(f"| {sampler} | {rate / 1e6:.1f}M | {history[-1][2]:.4f} | {recovery} |")

    model = next(iter(results.values()))[0]
    top = model.topics().topk(8, dim=1).indices.cpu()
    print(f"\ntop words of the first topics ({next(iter(results))}):")
    for t in range(min(10, k)):
        words = [corpus.vocab[i] if corpus.vocab else str(int(i)) for i in top[t]]
        print(f"  topic {t:3d}: {' '.join(words)}")

    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"(matplotlib is not installed: no plot written to {args.plot})")
            return
        fig, ax = plt.subplots(figsize=(6, 4))
        for sampler, (_, history, _) in results.items():
            ax.plot([h[0] for h in history], [h[2] for h in history], label=sampler)
        ax.set_xlabel("seconds")
        ax.set_ylabel("log-likelihood per token")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
