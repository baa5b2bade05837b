"""Prioritized experience replay: a sampler whose priorities change every step.

:class:`PrioritySampler` keeps ``(p + eps) ** alpha`` for each of ``capacity`` slots in a
wide sum tree (fanout 32, float64 sums recomputed from the children, so nothing drifts),
updates a batch of slots by recomputing only the paths above them, and draws stratified or
i.i.d. batches with each draw's probability, all on the device with nothing read back.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch

from ._library import _C, direct_call

_FAN = 32
Number = Union[int, float]


def _levels(buffers: int, capacity: int) -> Tuple[int, int, int]:
    """(W0, T, base of the root level): csrc/replay/tree.h's make_levels."""
    width0 = -(-capacity // _FAN) * _FAN
    counts = [capacity]
    while True:
        counts.append(-(-counts[-1] // _FAN))
        if counts[-1] <= 1:
            break
    top = len(counts) - 1
    offset = 0
    for level in range(1, top + 1):
        base = offset
        offset += buffers * (1 if level == top else -(-counts[level] // _FAN) * _FAN)
    return width0, offset, base


class PrioritySampler:
    """Draws slots of a replay buffer with probability proportional to ``(p + eps) ** alpha``.

    Every slot starts with priority 0 and is never drawn until written. ``update_`` writes
    raw priorities (typically ``|TD error|``) of a batch of slots; ``sample`` draws a batch
    with each draw's probability; ``weights`` turns those into importance weights.

    Parameters
    ----------
    capacity : int
        Slots a buffer holds, ``1 <= capacity < 2**31``.
    alpha : float
        Priority exponent (0: uniform over written slots, 1: proportional). ``alpha`` can
        be set later: the tree is rebuilt from the raw priorities in one pass.
    eps : float
        Added to each priority before the exponent, so that priority 0 can still be drawn.
    batch_shape : sequence of int
        Leading dimensions of independent buffers (one per environment or task): indices,
        priorities and draws then carry them in front.
    device : torch.device or str, optional
        Where the tree lives (default: the current default device).
    validate : bool
        Raise for bad indices and priorities, and for draws from an empty buffer. On CUDA
        that is one host read a call (skipped while a CUDA graph is being captured); pass
        ``False`` in a hot loop. Without it, bad entries are skipped and an empty buffer
        gives index 0 with probability NaN.

    Raises
    ------
    RuntimeError
        For a capacity, alpha or eps out of range.

    Examples
    --------
    >>> s = torch_wrs.PrioritySampler(1000, alpha=0.6)
    >>> s.update_(torch.arange(10), torch.rand(10))
    >>> index, prob = s.sample(4)
    >>> w = s.weights(prob, beta=0.4)
    >>> s.update_(index, torch.rand(4))               # new TD errors of the drawn slots
    >>> s.update_(torch.arange(10, 12), s.max())      # new items at the largest priority
    """

    def __init__(self, capacity: int, *, alpha: float = 1.0, eps: float = 0.0, batch_shape: Sequence[int] = (),
                 device: Optional[Union[torch.device, str]] = None, validate: bool = True):
        if not isinstance(capacity, int) or not 1 <= capacity < 1 << 31:
            raise RuntimeError(f"PrioritySampler: capacity must be an int in [1, 2^31), got {capacity!r}")
        _check_exponent(alpha, "alpha")
        if not (math.isfinite(eps) and eps >= 0):
            raise RuntimeError(f"PrioritySampler: eps must be finite and non-negative, got {eps}")
        self.batch_shape = torch.Size(batch_shape)
        if any(d < 1 for d in self.batch_shape):
            raise RuntimeError(f"PrioritySampler: batch_shape must hold positive sizes, got {tuple(batch_shape)}")
        self.capacity = capacity
        self._alpha = float(alpha)
        self.eps = float(eps)
        self.validate = validate
        self._buffers = math.prod(self.batch_shape)
        device = torch.device(device) if device is not None else torch.empty(0).device
        width0, inner, self._root = _levels(self._buffers, capacity)
        self._leaves = torch.zeros(2, self._buffers, width0, dtype=torch.float64, device=device)
        self._leaves[0].fill_(-math.inf)  # never written: never drawn, whatever eps
        self._nodes = torch.zeros(3, inner, dtype=torch.float64, device=device)
        self._nodes[2].fill_(math.inf)
        self._marks = torch.full((self._buffers * width0 + inner,), -1, dtype=torch.int32, device=device)

    @property
    def device(self) -> torch.device:
        """The device the tree lives on."""
        return self._leaves.device

    @property
    def alpha(self) -> float:
        """The priority exponent; setting it re-transforms every stored priority in one pass."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        _check_exponent(value, "alpha")
        self._alpha = float(value)
        torch.ops.wrs.priority_rebuild(self._leaves, self._nodes, self.capacity, self._alpha, self.eps)

    def _rows(self, index: torch.Tensor) -> torch.Tensor:
        if self.batch_shape:
            if index.shape[:len(self.batch_shape)] != self.batch_shape or index.dim() != len(self.batch_shape) + 1:
                raise RuntimeError(f"PrioritySampler: index must have shape (*{tuple(self.batch_shape)}, k), "
                                   f"got {tuple(index.shape)}")
        return index.reshape(self._buffers, -1)

    def update_(self, index: torch.Tensor, priority: Union[torch.Tensor, Number]) -> "PrioritySampler":
        """Writes raw priorities; each slot's probability becomes ``(p + eps) ** alpha / total``.

        Parameters
        ----------
        index : Tensor
            int64 or int32 slots, ``(k,)`` (any shape without ``batch_shape``) or
            ``(*batch_shape, k)``. ``-1`` entries are skipped (as TorchRL's writers mark
            them). Where a slot appears more than once, the last write wins.
        priority : Tensor or number
            Non-negative finite priorities, any float dtype, broadcast to ``index``'s shape
            (a 0-d tensor such as ``max()`` sets them all).

        Returns
        -------
        PrioritySampler
            ``self``.

        Raises
        ------
        RuntimeError
            For an index outside ``[0, capacity)`` other than -1, a negative, NaN or
            infinite priority (with ``validate``, before anything is written), or tensors
            of the wrong dtype, shape or device.

        Examples
        --------
        >>> s.update_(torch.tensor([3, 7, 3]), torch.tensor([1.0, 2.0, 5.0]))  # slot 3 gets 5.0
        """
        if not isinstance(index, torch.Tensor) or index.device != self.device:
            index = torch.as_tensor(index, device=self.device)
        if not isinstance(priority, torch.Tensor):
            priority = torch.full((), float(priority), dtype=torch.float64, device=self.device)
        elif priority.device != self.device:
            priority = priority.to(self.device)
        rows = index
        if self.batch_shape or index.dim() != 1 or priority.dim() > 1 or (
                priority.dim() == 1 and priority.shape != index.shape):
            rows = self._rows(index)
            if priority.dim() > 0:
                try:
                    priority = priority.broadcast_to(index.shape).reshape(rows.shape)
                except RuntimeError:
                    raise RuntimeError(f"PrioritySampler.update_: priority of shape {tuple(priority.shape)} does not "
                                       f"broadcast to index's shape {tuple(index.shape)}") from None
        if direct_call(rows):
            _C.priority_update(self._leaves, self._nodes, self._marks, rows, priority, self.capacity, self._alpha,
                               self.eps, self.validate)
        else:
            torch.ops.wrs.priority_update(self._leaves, self._nodes, self._marks, rows, priority, self.capacity,
                                          self._alpha, self.eps, validate=self.validate)
        return self

    def insert_(self, index: torch.Tensor) -> "PrioritySampler":
        """Writes each buffer's largest priority (1.0 while that is 0) at ``index``: new items.

        Parameters
        ----------
        index : Tensor
            Slots, as for :meth:`update_`.

        Returns
        -------
        PrioritySampler
            ``self``.

        Raises
        ------
        RuntimeError
            As :meth:`update_`.

        Examples
        --------
        >>> s.insert_(torch.arange(16))
        """
        if not isinstance(index, torch.Tensor) or index.device != self.device:
            index = torch.as_tensor(index, device=self.device)
        rows = index if not self.batch_shape and index.dim() == 1 else self._rows(index)
        if direct_call(rows):
            _C.priority_update(self._leaves, self._nodes, self._marks, rows, None, self.capacity, self._alpha,
                               self.eps, self.validate)
        else:
            torch.ops.wrs.priority_update(self._leaves, self._nodes, self._marks, rows, None, self.capacity,
                                          self._alpha, self.eps, validate=self.validate)
        return self

    def sample(self, n: int, *, stratified: bool = True,
               generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Draws ``n`` slots of each buffer and their probabilities under the priorities now.

        Parameters
        ----------
        n : int
            Draws a buffer.
        stratified : bool
            Draw i falls in mass segment ``[i, i + 1) * total / n`` (Schaul et al.), so the
            draws come in slot order and a slot's count is within 2 of ``n * P``.
            ``False``: i.i.d. draws.
        generator : torch.Generator, optional
            Source of randomness (seeded runs repeat exactly).

        Returns
        -------
        (Tensor, Tensor)
            int64 slots and their float64 probabilities, ``(*batch_shape, n)``.

        Raises
        ------
        RuntimeError
            With ``validate``, where every priority of a buffer is 0.

        Examples
        --------
        >>> index, prob = s.sample(256)
        """
        if direct_call(self._leaves):
            index, prob = _C.priority_sample(self._leaves, self._nodes, self.capacity, n, stratified, self.validate,
                                             generator)
        else:
            index, prob = torch.ops.wrs.priority_sample(self._leaves, self._nodes, self.capacity, n, stratified,
                                                        validate=self.validate, generator=generator)
        shape = (*self.batch_shape, n)
        return index.view(shape), prob.view(shape)

    def weights(self, prob: torch.Tensor, beta: float, *, normalize: str = "buffer") -> torch.Tensor:
        """Importance weights ``(N * P(i)) ** -beta``, normalised so the largest is 1.

        Parameters
        ----------
        prob : Tensor
            Probabilities from :meth:`sample`, ``(*batch_shape, n)``.
        beta : float
            Correction exponent, ``>= 0``.
        normalize : str
            ``"buffer"``: divided by the largest weight any stored item could get, that of
            the smallest drawable priority (Schaul et al., and TorchRL's
            ``(p_i / p_min) ** -beta``); ``"batch"``: by the largest in the batch.

        Returns
        -------
        Tensor
            Weights in ``(0, 1]``, prob's shape and dtype.

        Raises
        ------
        RuntimeError
            For a negative beta or an unknown ``normalize``.

        Examples
        --------
        >>> loss = (s.weights(prob, 0.4).float() * td_error ** 2).mean()
        """
        _check_exponent(beta, "beta")
        if normalize == "buffer":
            rows = prob if not self.batch_shape else prob.reshape(self._buffers, -1)
            call = _C.priority_weights if direct_call(prob) else torch.ops.wrs.priority_weights
            return call(self._leaves, self._nodes, self.capacity, rows, self._alpha, self.eps, float(beta)).view(
                prob.shape)
        if normalize == "batch":
            w = prob.pow(-beta)
            return w / w.amax(-1, keepdim=True)
        raise RuntimeError(f"PrioritySampler.weights: normalize must be \"buffer\" or \"batch\", got {normalize!r}")

    def _root_row(self, row: int) -> torch.Tensor:
        return self._nodes[row, self._root:self._root + self._buffers]

    def total(self) -> torch.Tensor:
        """The sum of ``(p + eps) ** alpha`` over each buffer, float64 ``batch_shape``.

        Returns
        -------
        Tensor
            A device tensor (nothing is read back).

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> s.total()
        """
        return self._root_row(0).view(self.batch_shape).clone()

    def max(self) -> torch.Tensor:
        """The largest raw priority stored in each buffer (0 while empty), float64 ``batch_shape``.

        Returns
        -------
        Tensor
            A device tensor; ``update_(index, s.max())`` inserts at the largest priority.

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> s.update_(new_slots, s.max())
        """
        return self._root_row(1).view(self.batch_shape).clone()

    def min(self) -> torch.Tensor:
        """The smallest raw priority among drawable slots (inf where none), float64 ``batch_shape``.

        Returns
        -------
        Tensor
            A device tensor.

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> s.min()
        """
        return self._root_row(2).view(self.batch_shape).clone()

    def priorities(self) -> torch.Tensor:
        """Every slot's raw priority (0 where never written), float64 ``(*batch_shape, capacity)``.

        Returns
        -------
        Tensor

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> s.priorities()[:4]
        """
        return self._leaves[0, :, :self.capacity].clamp_min(0).reshape(*self.batch_shape, self.capacity)

    def probs(self) -> torch.Tensor:
        """Every slot's probability now, float64 ``(*batch_shape, capacity)``.

        Returns
        -------
        Tensor

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> s.probs().sum()
        """
        t = self._leaves[1, :, :self.capacity] / self._root_row(0).unsqueeze(1)
        return t.reshape(*self.batch_shape, self.capacity)

    def state_dict(self) -> dict:
        """The priorities and settings, for ``torch.save``.

        Returns
        -------
        dict

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> torch.save(s.state_dict(), "per.pt")
        """
        return {"capacity": self.capacity, "alpha": self._alpha, "eps": self.eps,
                "batch_shape": tuple(self.batch_shape), "raw": self._leaves[0].clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`'s priorities and settings (the tree is rebuilt).

        Parameters
        ----------
        state : dict

        Raises
        ------
        RuntimeError
            Where the capacity or batch shape differ.

        Examples
        --------
        >>> s.load_state_dict(torch.load("per.pt"))
        """
        if state["capacity"] != self.capacity or tuple(state["batch_shape"]) != tuple(self.batch_shape):
            raise RuntimeError("PrioritySampler.load_state_dict: capacity and batch_shape must match")
        self.eps = float(state["eps"])
        self._leaves[0] = state["raw"]  # -inf: never written
        self.alpha = state["alpha"]  # rebuilds

    def __repr__(self) -> str:
        return (f"PrioritySampler(capacity={self.capacity}, alpha={self._alpha}, eps={self.eps}, "
                f"batch_shape={tuple(self.batch_shape)}, device={self.device})")


def _check_exponent(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise RuntimeError(f"PrioritySampler: {name} must be finite and non-negative, got {value!r}")
