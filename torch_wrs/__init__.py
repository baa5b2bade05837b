"""torch_wrs: weighted random sampling and gamma variates for PyTorch (torch.ops.wrs)."""
from . import _library
from .alias import AliasTable, alias_probs, alias_sample, alias_table
from . import distributed, distributions, graph, replay
from .gamma import beta, dirichlet, gamma, standard_gamma
from .penalties import process_logits
from .llm import SampleOutput, filter_logits, sample_logits, sample_probs, speculative_accept
from .multinomial import multinomial, multinomial_counts
from .replay import PrioritySampler
from .radix_forest import RadixForest, RadixForest2D, inverse_cdf, radix_forest, radix_forest_sample, sample_2d

__all__ = [
    "AliasTable", "PrioritySampler", "SampleOutput", "alias_probs", "filter_logits", "sample_probs", "speculative_accept", "alias_sample", "alias_table", "beta", "dirichlet", "distributed", "distributions", "gamma", "graph", "replay",
    "multinomial", "multinomial_counts", "process_logits", "sample_logits", "standard_gamma", "RadixForest", "RadixForest2D", "inverse_cdf", "radix_forest",
    "radix_forest_sample", "sample_2d",
]
__version__ = "0.3.0"
