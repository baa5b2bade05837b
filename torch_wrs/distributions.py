"""Drop-in subclasses of torch.distributions whose sampling uses the torch_wrs kernels:
Categorical and OneHotCategorical (multinomial / sample_logits: faster, float64-exact),
Gamma, Dirichlet and Beta (faster, and exact for tiny concentrations). Everything but
sampling is torch's."""
import torch
from torch import distributions as td

from .gamma import beta, dirichlet, standard_gamma
from .multinomial import _categorical_logits, multinomial

__all__ = ["Beta", "Categorical", "Dirichlet", "Gamma", "OneHotCategorical"]


def _categorical_indices(cat, sample_shape):
    """Indices [*sample_shape, *batch_shape] drawn from the categorical `cat`, from its
    logits when it was made from logits (no softmax is written), else from its probs."""
    sample_shape = torch.Size(sample_shape)
    draws = sample_shape.numel()
    shape = cat._extended_shape(sample_shape)
    if draws == 0:
        return torch.empty(shape, dtype=torch.int64, device=cat._param.device)
    with torch.no_grad():
        if "probs" in cat.__dict__:  # made from probs (or probs already computed)
            s = multinomial(cat.probs.reshape(-1, cat._num_events), draws, True)
        else:
            s = _categorical_logits(cat.logits.reshape(-1, cat._num_events), draws)
    return s.T.reshape(shape)


class Categorical(td.Categorical):
    def sample(self, sample_shape=torch.Size()):
        return _categorical_indices(self, sample_shape)


class OneHotCategorical(td.OneHotCategorical):
    def sample(self, sample_shape=torch.Size()):
        cat = self._categorical
        indices = _categorical_indices(cat, sample_shape)
        return torch.nn.functional.one_hot(indices, cat._num_events).to(cat._param.dtype)


class Gamma(td.Gamma):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        value = standard_gamma(self.concentration.expand(shape), validate=False) / self.rate.expand(shape)
        # As torch.distributions.Gamma: keep log_prob finite on values that underflowed.
        value.detach().clamp_(min=torch.finfo(value.dtype).tiny)
        return value


def _clamp_unit(value):
    """As torch's Dirichlet and Beta: samples in [tiny, 1 - eps], so log_prob of any sample
    is finite (the exact tails stay available from torch_wrs.dirichlet / beta, or in log
    space from standard_gamma(log=True)). With a gradient the clamp adds a constant, so the
    reparameterised gradient is that of the unclamped sample."""
    finfo = torch.finfo(value.dtype)
    if not value.requires_grad:
        return value.clamp_(min=finfo.tiny, max=1 - finfo.eps)
    kept = value.detach()
    return value + (kept.clamp(min=finfo.tiny, max=1 - finfo.eps) - kept)


class Dirichlet(td.Dirichlet):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return _clamp_unit(dirichlet(self.concentration.expand(shape), validate=False))


class Beta(td.Beta):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return _clamp_unit(beta(self.concentration1.expand(shape), self.concentration0.expand(shape), validate=False))
