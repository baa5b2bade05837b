"""TorchRL adapter: :class:`PrioritizedSampler`, a drop-in for
``torchrl.data.PrioritizedSampler`` backed by :class:`torch_wrs.PrioritySampler`.

It takes TorchRL's arguments, plugs into ``ReplayBuffer`` and ``TensorDictReplayBuffer``
(``priority_key``, ``update_tensordict_priority``, ``mark_update``) and keeps TorchRL's
law and weights, ``(p_i / p_min) ** -beta``; the trees live on the storage's device and
an update recomputes only the paths above the written slots. TorchRL is needed only to
use it: importing this module imports torchrl.
"""
import os
from typing import Any, Optional, Union

import torch
from torchrl.data.replay_buffers.samplers import PrioritizedSampler as _TorchRLPrioritizedSampler
from torchrl.data.replay_buffers.storages import Storage
from torchrl.data.replay_buffers.utils import unravel_index

from ..replay import PrioritySampler

_EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage."


class _TreeView:
    """``sampler._sum_tree[i]``: the stored ``(p + eps) ** alpha``, as TorchRL's trees give it."""

    def __init__(self, sampler: "PrioritizedSampler"):
        self._sampler = sampler

    def __len__(self) -> int:
        return self._sampler._max_capacity

    def __getitem__(self, index):
        t = self._sampler._core._leaves[1, 0, : self._sampler._max_capacity]
        if isinstance(index, int):
            return float(t[index])
        return t[torch.as_tensor(index, device=t.device)]


class PrioritizedSampler(_TorchRLPrioritizedSampler):
    """TorchRL's prioritized sampler on torch_wrs's trees (CPU or CUDA, no host reads).

    Parameters
    ----------
    max_capacity : int
        Slots of the storage.
    alpha, beta : float
        Priority and importance-weight exponents, as TorchRL's.
    eps : float
        Added to priorities before the exponent (TorchRL's default 1e-8).
    dtype : torch.dtype
        dtype of the returned ``priority_weight`` (the trees are float64 always).
    reduction : str
        How a multi-dimensional priority entry reduces, as TorchRL's ("max", "min",
        "mean", "median").
    max_priority_within_buffer : bool
        ``True``: new items get the largest priority now stored; ``False`` (TorchRL's
        default): the largest ever written.
    device : torch.device or str, optional
        Where the trees live; by default the storage's device at first use (CPU otherwise).
    stratified : bool
        Stratified draws (Schaul et al.) instead of TorchRL's i.i.d. ones.
    validate : bool
        Raise for bad indices or priorities (on CUDA one host read a call).

    Raises
    ------
    ValueError
        For a negative alpha or beta (TorchRL's texts).

    Examples
    --------
    >>> from torchrl.data import ReplayBuffer, LazyTensorStorage
    >>> from torch_wrs.integrations.torchrl import PrioritizedSampler
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(1000), sampler=PrioritizedSampler(1000, 0.6, 0.4),
    ...                   batch_size=32)
    >>> rb.extend(torch.arange(100.0))
    >>> data, info = rb.sample(return_info=True)
    >>> rb.update_priority(info["index"], torch.rand(32))
    """

    def __init__(self, max_capacity: int, alpha: float, beta: float, eps: float = 1e-8,
                 dtype: torch.dtype = torch.float, reduction: str = "max", max_priority_within_buffer: bool = False,
                 device: Optional[Union[torch.device, str]] = None, *, stratified: bool = False,
                 validate: bool = True) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be greater or equal than 0, got alpha={alpha}")
        if beta < 0:
            raise ValueError(f"beta must be greater or equal to 0, got beta={beta}")
        self._max_capacity = max_capacity
        self._alpha = alpha
        self._beta = beta
        self._eps = eps
        self.reduction = reduction
        self.dtype = dtype
        self._max_priority_within_buffer = max_priority_within_buffer
        self._device = torch.device(device) if device is not None else None
        self.stratified = stratified
        self.validate = validate
        self._init()

    def _init(self) -> None:
        self._core = PrioritySampler(self._max_capacity, alpha=self._alpha, eps=self._eps,
                                     device=self._device or "cpu", validate=self.validate)
        self._seen = None  # (largest priority ever written, its slot), device tensors

    @property
    def device(self) -> torch.device:
        return self._core.device

    @property
    def _sum_tree(self) -> _TreeView:
        return _TreeView(self)

    @property
    def alpha(self) -> float:
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"alpha must be greater or equal than 0, got alpha={value}")
        self._alpha = value
        self._core.alpha = value

    @property
    def _max_priority(self):
        """(largest priority, its slot) as TorchRL tracks it, or (None, None) before any write."""
        if self._max_priority_within_buffer:
            raw = self._core._leaves[0, 0, : self._max_capacity]
            value, index = raw.max(0)
            return (None, None) if value.item() == float("-inf") else (value, index)
        return (None, None) if self._seen is None else self._seen

    @_max_priority.setter
    def _max_priority(self, value) -> None:
        self._seen = None if value is None or value[0] is None else tuple(
            torch.as_tensor(v, device=self.device) for v in value)

    @property
    def default_priority(self) -> Union[float, torch.Tensor]:
        if self._max_priority_within_buffer:
            return torch.where(self._core._root_row(1) > 0, self._core._root_row(1), 1.0).squeeze(0)
        return 1.0 if self._seen is None else self._seen[0]

    def _maybe_init_from_storage(self, storage: Optional[Storage]) -> None:
        device = self._tree_device_from_storage(storage)
        if device is not None and device != self.device:
            self._device = device
            self._init()

    def add(self, index: Union[torch.Tensor, int]) -> None:
        return None  # the largest priority is tracked exactly, so nothing to erase

    def extend(self, index: torch.Tensor) -> None:
        return None

    def sample(self, storage: Storage, batch_size: int):
        """Draws ``batch_size`` slots of ``storage`` with TorchRL's importance weights.

        Parameters
        ----------
        storage : torchrl Storage
            The buffer's storage (its length, shape and device are read).
        batch_size : int
            Draws.

        Returns
        -------
        (Tensor or tuple, dict)
            The slots (unravelled for a multi-dimensional storage) and
            ``{"priority_weight": (t_i / t_min) ** -beta}`` in ``dtype``.

        Raises
        ------
        RuntimeError
            For an empty storage (TorchRL's text), or with ``validate`` where every
            priority is 0.

        Examples
        --------
        >>> index, info = sampler.sample(rb.storage, 32)
        """
        self._maybe_init_from_storage(storage)
        if len(storage) == 0:
            raise RuntimeError(_EMPTY_STORAGE_ERROR)
        index, prob = self._core.sample(batch_size, stratified=self.stratified, generator=self._rng)
        weight = self._core.weights(prob, self._beta).to(self.dtype)
        if storage.ndim > 1:
            index = unravel_index(index, storage.shape)
        return index, {"priority_weight": weight}

    @torch.no_grad()
    def update_priority(self, index: Union[int, torch.Tensor], priority: Union[float, torch.Tensor], *,
                        storage: Optional[Storage] = None) -> None:
        """Writes raw priorities (TorchRL's contract: ``-1`` entries skipped, a number or a
        tensor of index's length, multi-dimensional indices raveled with ``storage``).

        Parameters
        ----------
        index : int or Tensor
            Slots, ``(k,)`` or ``(k, ndim)`` for a multi-dimensional storage.
        priority : float or Tensor
            Raw priorities (transformed once, as ``(p + eps) ** alpha``).
        storage : torchrl Storage, optional
            Needed for multi-dimensional indices.

        Returns
        -------
        None

        Raises
        ------
        RuntimeError
            For a priority whose length is not index's, multi-dimensional indices without
            ``storage``, or (with ``validate``) bad slots or priorities.

        Examples
        --------
        >>> sampler.update_priority(info["index"], td_error.abs())
        """
        self._maybe_init_from_storage(storage)
        device = self.device
        index = torch.as_tensor(index, dtype=torch.long, device=device)
        priority = torch.as_tensor(priority, device=device).detach()
        if not priority.is_floating_point():
            priority = priority.double()
        if index.ndim > 1:  # one slot a row, in the storage's shape
            if storage is None:
                raise RuntimeError("storage should be provided to Sampler.update_priority when the storage has "
                                   "more than one dimension.")
            strides = torch.tensor(torch.empty(storage.shape, device="meta").stride(), device=device)
            index = torch.where((index < 0).any(-1), -1, (index * strides).sum(-1))
        index = index.reshape(-1)
        if priority.numel() > 1:
            try:
                priority = priority.reshape(index.shape)
            except RuntimeError as err:
                raise RuntimeError(
                    "priority should be a number or an iterable of the same length as index. Got priority of "
                    f"shape {priority.shape} and index {index.shape}.") from err
        else:
            priority = priority.reshape(())
        if not self._max_priority_within_buffer and index.numel():
            value, at = priority.expand(index.shape).masked_fill(index < 0, float("-inf")).max(0)
            if self._seen is None:
                self._seen = (value, index[at])
            else:
                bigger = value > self._seen[0]
                self._seen = (torch.where(bigger, value, self._seen[0]), torch.where(bigger, index[at], self._seen[1]))
        self._core.update_(index, priority)

    def state_dict(self) -> dict:
        """The settings, the tracked largest priority and the priorities.

        Returns
        -------
        dict

        Raises
        ------
        RuntimeError
            Never.

        Examples
        --------
        >>> other.load_state_dict(sampler.state_dict())
        """
        return {"_alpha": self._alpha, "_beta": self._beta, "_eps": self._eps, "_seen": self._seen,
                "_core": self._core.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s settings and priorities (the trees are rebuilt).

        Parameters
        ----------
        state_dict : dict

        Raises
        ------
        RuntimeError
            Where the capacity differs.

        Examples
        --------
        >>> sampler.load_state_dict(saved)
        """
        self._alpha, self._beta, self._eps = state_dict["_alpha"], state_dict["_beta"], state_dict["_eps"]
        self._init()
        self._core.load_state_dict(state_dict["_core"])
        seen = state_dict["_seen"]
        self._seen = None if seen is None else tuple(v.to(self.device) for v in seen)

    def _empty(self) -> None:
        self._init()

    def dumps(self, path) -> None:
        """Saves :meth:`state_dict` under the folder ``path`` (``ReplayBuffer.dumps`` calls it).

        Parameters
        ----------
        path : str or Path

        Raises
        ------
        OSError
            Where the folder cannot be written.

        Examples
        --------
        >>> sampler.dumps("ckpt/sampler")
        """
        os.makedirs(path, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(path, "torch_wrs_priorities.pt"))

    def loads(self, path) -> None:
        """Loads what :meth:`dumps` saved under ``path``.

        Parameters
        ----------
        path : str or Path

        Raises
        ------
        OSError
            Where nothing was saved there.

        Examples
        --------
        >>> sampler.loads("ckpt/sampler")
        """
        self.load_state_dict(torch.load(os.path.join(path, "torch_wrs_priorities.pt"), weights_only=False))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(alpha={self._alpha}, beta={self._beta}, eps={self._eps}, "
                f"reduction={self.reduction}, device={self.device})")
