"""Drop-in subclasses of torch.distributions.Gamma, Dirichlet and Beta whose ``sample``
and ``rsample`` use the torch_wrs kernels (faster, and exact for tiny concentrations)."""
import torch
from torch import distributions as td

from .gamma import beta, dirichlet, standard_gamma

__all__ = ["Beta", "Dirichlet", "Gamma"]


class Gamma(td.Gamma):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        value = standard_gamma(self.concentration.expand(shape), validate=False) / self.rate.expand(shape)
        # As torch.distributions.Gamma: keep log_prob finite on values that underflowed.
        value.detach().clamp_(min=torch.finfo(value.dtype).tiny)
        return value


class Dirichlet(td.Dirichlet):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return dirichlet(self.concentration.expand(shape), validate=False)


class Beta(td.Beta):
    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        return beta(self.concentration1.expand(shape), self.concentration0.expand(shape), validate=False)
