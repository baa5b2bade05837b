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
    """``torch.distributions.Categorical`` whose ``sample`` uses :func:`torch_wrs.multinomial`
    (from probs) or the logits race (from logits, no softmax written).

    Parameters, Returns, Raises
        As ``torch.distributions.Categorical``: the same constructor, the same shapes, the
        same errors; only the draws come from torch_wrs's kernels.

    Examples
    --------
    >>> d = torch_wrs.distributions.Categorical(logits=torch.randn(4, 1000))
    >>> d.sample((8,)).shape
    torch.Size([8, 4])
    """

    def sample(self, sample_shape=torch.Size()):
        return _categorical_indices(self, sample_shape)


class OneHotCategorical(td.OneHotCategorical):
    """``torch.distributions.OneHotCategorical`` sampled as :class:`Categorical`.

    Parameters, Returns, Raises
        As ``torch.distributions.OneHotCategorical``.

    Examples
    --------
    >>> torch_wrs.distributions.OneHotCategorical(probs=torch.tensor([0.2, 0.8])).sample((3,)).shape
    torch.Size([3, 2])
    """

    def sample(self, sample_shape=torch.Size()):
        cat = self._categorical
        indices = _categorical_indices(cat, sample_shape)
        return torch.nn.functional.one_hot(indices, cat._num_events).to(cat._param.dtype)


class Gamma(td.Gamma):
    """``torch.distributions.Gamma`` whose ``rsample`` uses :func:`torch_wrs.standard_gamma`
    (samples clamped to the smallest normal number, as torch's).

    Parameters, Returns, Raises
        As ``torch.distributions.Gamma``.

    Examples
    --------
    >>> torch_wrs.distributions.Gamma(torch.tensor(0.01), torch.tensor(1.0)).rsample((5,)).shape
    torch.Size([5])
    """

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
    """``torch.distributions.Dirichlet`` whose ``rsample`` uses :func:`torch_wrs.dirichlet`,
    clamped into ``[tiny, 1 - eps]`` as torch's.

    Parameters, Returns, Raises
        As ``torch.distributions.Dirichlet``.

    Examples
    --------
    >>> d = torch_wrs.distributions.Dirichlet(torch.full((3,), 0.01))
    >>> bool(torch.isfinite(d.log_prob(d.sample((100,)))).all())
    True
    """

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return _clamp_unit(dirichlet(self.concentration.expand(shape), validate=False))


class Beta(td.Beta):
    """``torch.distributions.Beta`` whose ``rsample`` uses :func:`torch_wrs.beta`, clamped into
    ``[tiny, 1 - eps]`` as torch's.

    Parameters, Returns, Raises
        As ``torch.distributions.Beta``.

    Examples
    --------
    >>> torch_wrs.distributions.Beta(torch.tensor(0.5), torch.tensor(0.5)).rsample((4,)).shape
    torch.Size([4])
    """

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return _clamp_unit(beta(self.concentration1.expand(shape), self.concentration0.expand(shape), validate=False))
