// The one place where every torch.ops.wrs schema is defined. Kernels register
// themselves per device next to their code (csrc/<family>/*_cpu.cpp, *_cuda.cu).
#include <torch/library.h>

TORCH_LIBRARY(wrs, m) {
  // Alias tables: weights [..., N] -> int64 table [..., N] (threshold | alias << 32).
  // validate=True checks the weight values; on CUDA that costs one host sync, so pass
  // validate=False inside CUDA graphs or wherever a sync is unwelcome.
  m.def("alias_table(Tensor weights, *, bool validate=True) -> Tensor");
  // Samples: [..., num_samples] indices, int64 (default) or int32 (half the write traffic).
  // ordered=True: i.i.d. draws in order. ordered=False: the same multiset law, but draws
  // may come grouped by table section (much faster for large tables). method: "auto",
  // "baseline", or the sectioned "cached" / "shared" (these need ordered=False).
  m.def("alias_sample(Tensor table, SymInt num_samples, *, bool ordered=True, str method=\"auto\", "
        "ScalarType? dtype=None, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Independent multisets from buckets [begin, end) of one 1-D table in one pass (end -1:
  // the last bucket): segment a of the output holds counts[a] draws, grouped by section,
  // from the law of those buckets: a uniform bucket, then its coin (w / W over the whole table).
  m.def("_alias_sample_segments(Tensor table, int[] counts, int begin=0, int end=-1, *, ScalarType? dtype=None, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // torch.multinomial's contract (1-D or 2-D input, int64 [..., num_samples]) without its
  // 2^24-category limit; float64 sums.
  m.def("multinomial(Tensor input, SymInt num_samples, bool replacement=False, *, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Draws from softmax(logits / temperature) over the last dimension without writing the
  // softmax: logits [..., V] (any float dtype) -> int64 [..., num_samples].
  m.def("sample_logits(Tensor logits, SymInt num_samples=1, *, float temperature=1.0, bool replacement=True, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // Sharded sampling in i.i.d. order (torch_wrs.distributed; csrc/distributed/place.h states
  // the law). _ordered_labels: each of `count` positions' part under the float64 CDF `cdf`
  // [P] (P <= 256), uint8 [count], and each block of 4,096 positions' counts per part, int64
  // [blocks, P]. _ordered_place: draws grouped by part placed at their part's positions in
  // order: out[t] = grouped[start[b, p] + earlier positions of block b labelled p].
  m.def("_ordered_labels(Tensor cdf, SymInt count, *, Generator? generator=None) -> (Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
  m.def("_ordered_place(Tensor grouped, Tensor labels, Tensor start) -> Tensor");
  // _ordered_fill: int64 [labels.numel()]; as _ordered_place for the parts other than `own`
  // (received: their draws grouped by part; out[t] = offsets[p] + the draw), and draws of
  // its own from the alias `table` at the positions labelled `own` (-1: none).
  m.def("_ordered_fill(Tensor received, Tensor labels, Tensor start, Tensor offsets, Tensor table, int own, *, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // The LDA example's Metropolis-Hastings phase (csrc/lda/mh.h states the chain): the new
  // topics of tokens (d, w, s0) after `cycles` word and document steps towards the full
  // conditional under the counts now, proposals from the sweep's start, int64 [tokens].
  m.def("_lda_mh(Tensor d, Tensor w, Tensor s0, Tensor n_dk, Tensor n_wk, Tensor n_k, Tensor start_n_dk, "
        "Tensor start_n_wk, Tensor start_n_k, Tensor q_word, Tensor word_table, Tensor z, Tensor doc_start, "
        "Tensor doc_length, int phase, int phases, int cycles, float alpha, float beta, *, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Which method multinomial (or sample_logits, with logits=True) takes for a call of this
  // shape on `device` ("cpu" or "cuda"), by the method tables (csrc/multinomial/dispatch_*):
  // for tests and the docs. On CUDA, `sms` is the GPU's multiprocessors and `capturing`
  // whether the call is being captured into a CUDA graph.
  m.def("_multinomial_route(str device, int rows, int n, int num_samples, bool replacement, *, bool logits=False, "
        "bool float64=False, bool capturing=False, int sms=132) -> str");
  // Counts of total_count i.i.d. draws per category of each row of weights [..., M]
  // (int64 [..., M], exactly multinomial: a chain of exact binomials), without drawing them.
  m.def("multinomial_counts(Tensor weights, SymInt total_count, *, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // Radix forests (monotone inverse CDF): weights [..., N] -> cdf int64 [..., N] (63-bit
  // fixed point), guide int32 [..., cells] (a power of two; default about N), nodes int64
  // [..., N, 2] (each node's key and its two int32 children). inverse_cdf maps u in [0, 1] (any float dtype and shape; [*batch, S] for
  // a batch of forests, or any shape with `row` naming each u's forest) to the largest i
  // with cdf[i] <= u, as a binary search would, so u1 <= u2 gives i1 <= i2. validate=True
  // checks the values with one host read (pass False under CUDA-graph capture).
  m.def("radix_forest(Tensor weights, int? cells=None, *, bool validate=True) -> (Tensor, Tensor, Tensor)");
  m.def("inverse_cdf(Tensor cdf, Tensor guide, Tensor nodes, Tensor u, Tensor? row=None, *, "
        "bool validate=True) -> Tensor");
  m.def("radix_forest_sample(Tensor cdf, Tensor guide, Tensor nodes, SymInt num_samples, *, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // Gamma(alpha, 1) per element of alpha (any float dtype; arithmetic in float32, or
  // float64 for float64). method: "auto", "cheng_ga", "marsaglia_tsang",
  // "ahrens_dieter_gc", "best_xg", "cheng_feast_gkm3". log=True returns log X, exact
  // where X underflows (alpha below ~0.05). validate=True raises for negative or NaN
  // alpha, flagged by the generating kernel, with one host read skipped under CUDA-graph
  // capture (NaN out then, as with validate=False).
  // Differentiable in alpha (implicit reparameterisation, gradient below).
  m.def("standard_gamma(Tensor alpha, str method=\"auto\", *, bool log=False, bool validate=True, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // dX/dalpha (or d log X/dalpha with log=True) at X = output: the backward of standard_gamma.
  m.def("standard_gamma_grad(Tensor alpha, Tensor output, bool log=False) -> Tensor");
  // Dirichlet rows over the last dimension, and Beta(a, b) (broadcast); both differentiable.
  m.def("dirichlet(Tensor concentration, *, bool validate=True, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  m.def("beta(Tensor a, Tensor b, *, bool validate=True, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Dirichlet rows without a gradient: what dirichlet runs when none is needed (on CUDA
  // the log-gammas, then one normalising kernel that flags invalid rows).
  m.def("dirichlet_rows(Tensor concentration, *, bool validate=True, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Beta(a, b) without a gradient: what beta runs when none is needed (a loop on the
  // CPU, one kernel on CUDA, draws each pair and writes its Beta variate).
  m.def("beta_pairs(Tensor a, Tensor b, *, bool validate=True, Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // LLM sampling (csrc/llm/llm.h states the law): temperature, top-k, top-p and min-p, each
  // a number or a per-row tensor [B], over logits (logits=True) or probabilities [..., V];
  // seeds [B] key each row's draws alone. Returns int64 tokens [..., num_samples] and
  // float32 log-probabilities of them (logprobs: 0 none, an empty tensor; 1 under the
  // filtered law; 2 under log_softmax(logits / T)). Nothing is read back to the host:
  // invalid rows give token 0 and a NaN log-probability. overrides: a penalty plan of the
  // logits (penalty_plan), applied in the kernels' read of each row.
  m.def("sample_llm(Tensor input, SymInt num_samples=1, *, bool logits=True, Tensor? temperature=None, "
        "float temperature_value=1.0, Tensor? top_k=None, int top_k_value=0, Tensor? top_p=None, "
        "float top_p_value=1.0, Tensor? min_p=None, float min_p_value=0.0, Tensor? seeds=None, int logprobs=0, "
        "Generator? generator=None, Tensor? overrides=None) -> (Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
  // The processed logits of sample_llm: logits / T where kept, -inf elsewhere (NaN rows
  // where invalid; a greedy row keeps its first largest logit).
  m.def("filter_logits(Tensor logits, *, Tensor? temperature=None, float temperature_value=1.0, "
        "Tensor? top_k=None, int top_k_value=0, Tensor? top_p=None, float top_p_value=1.0, Tensor? min_p=None, "
        "float min_p_value=0.0) -> Tensor");
  // The pass before sampling, in vLLM's order (csrc/llm/penalties.h): logits [B, V] through
  // an int32 token bitmask, masked ids to -inf, a bias added, then each distinct id of the
  // output and prompt histories penalised once; id lists [B, n] padded with -1; per-row
  // penalties [B]. Returns float32 [B, V]; nothing is read back.
  m.def("penalize_logits(Tensor logits, *, Tensor? allowed_bitmask=None, Tensor? masked_ids=None, "
        "Tensor? bias_ids=None, Tensor? bias_values=None, Tensor? output_ids=None, Tensor? prompt_ids=None, "
        "Tensor? repetition_penalty=None, Tensor? frequency_penalty=None, Tensor? presence_penalty=None) -> Tensor");
  // penalize_logits' rule as a plan for sample_llm(overrides=) (csrc/llm/penalties.h): the
  // bitmask and the few ids it changes, so the sampler applies it while it reads the row.
  m.def("penalty_plan(Tensor logits, *, Tensor? allowed_bitmask=None, Tensor? masked_ids=None, "
        "Tensor? bias_ids=None, Tensor? bias_values=None, Tensor? output_ids=None, Tensor? prompt_ids=None, "
        "Tensor? repetition_penalty=None, Tensor? frequency_penalty=None, Tensor? presence_penalty=None) -> Tensor");
  // What sample_logits(..., top_logprobs=n) adds (csrc/llm/top_logprobs.h): for law [B, V]
  // (times scale [B] where given) and drawn tokens int64 [B, S], the tokens' log-probs
  // float32 [B, S], the n most likely tokens int64 [B, n] and their log-probs, most likely
  // first, and the tokens' ranks int64 [B, S].
  m.def("top_logprobs(Tensor law, Tensor tokens, int n, *, Tensor? scale=None) -> (Tensor, Tensor, Tensor, Tensor)");
  // sample_llm's draw with raw log-probs and top_logprobs' outputs for it, over logits / T:
  // (tokens, log-probs, top tokens [..., n], their log-probs, ranks); on CUDA in one pass of
  // the sampler where route.h's fuses_top_n holds.
  m.def("sample_llm_top_logprobs(Tensor logits, SymInt num_samples=1, int n=1, *, Tensor? temperature=None, "
        "float temperature_value=1.0, Tensor? top_k=None, int top_k_value=0, Tensor? top_p=None, "
        "float top_p_value=1.0, Tensor? min_p=None, float min_p_value=0.0, Tensor? seeds=None, "
        "Generator? generator=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
  // The truncations around filter_logits' rule (csrc/llm/truncate.h), on float32 values [B, V]
  // with a float64 control [B]; -inf outside the kept set. top_n_sigma_logits: keep values
  // within n standard deviations of the row's maximum; typical_logits: Hugging Face's
  // typical-p set of logits.
  m.def("top_n_sigma_logits(Tensor values, Tensor n) -> Tensor");
  m.def("typical_logits(Tensor logits, Tensor mass) -> Tensor");
  // Which CUDA kernel (and cluster of CTAs a row) sample_llm takes for a call of this shape
  // and these controls, by the method table (csrc/llm/route.h): for tests and the docs.
  // per_row names the controls given as per-row tensors ("top_k,top_p"); sms is the GPU's
  // multiprocessors.
  m.def("_llm_route(int rows, int v, int num_samples=1, *, float temperature=1.0, int top_k=0, float top_p=1.0, "
        "float min_p=0.0, str per_row=\"\", int logprobs=0, int top_logprobs=0, int sms=132) -> str");
  // Graph sampling over CSR (csrc/graph/graph.h states the layout and the laws).
  // csr_alias_table: rowptr [N + 1] int64, weight [E] (any float dtype) -> int64 [E], each
  // node's alias table over its edges (zero-sum rows marked; validate=True raises for bad
  // rowptr or weights, with one host read).
  m.def("csr_alias_table(Tensor rowptr, Tensor weight, *, bool validate=True) -> Tensor");
  // k neighbours of each of nodes [S] (int64 or int32): with replacement i.i.d. from w / sum(w),
  // without it successive sampling (all edges of positive weight where fewer than k). Returns
  // neighbours, edge ids (int64 [S, k], -1 past each count) and counts (int64 [S]). table None:
  // every edge weighs the same; weight (float32/64) is needed without replacement over a table.
  m.def("csr_sample_neighbors(Tensor rowptr, Tensor col, Tensor? table, Tensor? weight, Tensor nodes, int k, "
        "bool replace=True, *, bool validate=True, Generator? generator=None) -> (Tensor, Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
  // Walks of walk_length steps from start [S]: int64 [S, walk_length + 1], the start first.
  // First order (p = q = 1) or node2vec's second order; rows_sorted (a bool on the device)
  // lets the neighbour test binary-search each row of col.
  m.def("csr_random_walk(Tensor rowptr, Tensor col, Tensor? table, Tensor? weight, Tensor start, int walk_length, "
        "float p=1.0, float q=1.0, *, Tensor? rows_sorted=None, bool validate=True, Generator? generator=None) "
        "-> Tensor",
        {at::Tag::nondeterministic_seeded});
  // Prioritized replay (csrc/replay/tree.h states the layout and the law): the state of B
  // buffers of `capacity` priorities, leaves float64 [2, B, W0], nodes float64 [3, T] and
  // marks int32 (-1 between calls), all made by torch_wrs.PrioritySampler.
  // priority_update: raw priorities at index [B, k] (-1 skipped), priority broadcast to it
  // or None (insert at the buffer's largest priority, 1.0 where that is 0); the last write
  // of a slot wins; stored as (p + eps)^alpha. validate=True raises for bad index or
  // priority before writing (one host read on CUDA, none while capturing); without it,
  // such entries are skipped.
  m.def("priority_update(Tensor(a!) leaves, Tensor(b!) nodes, Tensor(c!) marks, Tensor index, Tensor? priority, "
        "int capacity, float alpha, float eps, *, bool validate=True) -> ()");
  // Recomputes every transformed leaf from the raw priorities, then every node.
  m.def("priority_rebuild(Tensor(a!) leaves, Tensor(b!) nodes, int capacity, float alpha, float eps) -> ()");
  // num_samples draws a buffer: int64 indices and float64 probabilities [B, num_samples].
  // stratified: draw i lies in mass segment [i, i + 1) / num_samples (so in index order).
  // A buffer with nothing to draw raises with validate=True, else gives index 0, prob NaN.
  m.def("priority_sample(Tensor leaves, Tensor nodes, int capacity, SymInt num_samples, bool stratified=True, *, "
        "bool validate=True, Generator? generator=None) -> (Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
  // Importance weights of draws with probabilities prob [B, n]: (N P_i)^-beta divided by the
  // largest any drawable slot gets (TorchRL's (t_i / t_min)^-beta), prob's shape and dtype.
  m.def("priority_weights(Tensor leaves, Tensor nodes, int capacity, Tensor prob, float alpha, float eps, "
        "float beta) -> Tensor");
  // Which method a call takes on `device` by the method tables (csrc/replay/replay_ops.h): an
  // update of `entries` (B * k) slots, "paths" on the CPU, "one_block", "levels" or "rebuild"
  // on CUDA; with sample=True, `entries` draws, "thread" on the CPU, "warp" or "thread" on CUDA.
  m.def("_priority_route(str device, int buffers, int capacity, int entries, *, bool sample=False) -> str");
  // Speculative decoding's rejection scheme: draft_probs [B, S, V], draft_tokens [B, S],
  // target_probs [B, S + 1, V] -> emitted tokens int64 [B, S + 1] (-1 after the last) and
  // the accepted draft count int64 [B]. The emitted tokens follow the target law exactly.
  m.def("speculative_accept(Tensor draft_probs, Tensor draft_tokens, Tensor target_probs, *, "
        "Generator? generator=None) -> (Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
}
