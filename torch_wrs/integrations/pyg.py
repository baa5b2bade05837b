"""PyTorch Geometric: weighted neighbour sampling on the graph's device for PyG's loaders.

``WeightedNeighborSampler`` is a ``torch_geometric.sampler.BaseSampler``: hand it to
``NodeLoader`` in place of PyG's ``NeighborSampler``, or use :class:`NeighborLoader`,
which takes ``NeighborLoader``'s arguments. Sampling runs where the graph lives (the GPU
for a ``Data`` moved there) with :mod:`torch_wrs.graph`'s exact laws.
"""
from typing import List, Optional

import torch
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.utils import to_csc

from ..graph import CSRAliasTable


class WeightedNeighborSampler(BaseSampler):
    """Multi-hop neighbour sampling of a homogeneous ``Data`` by edge weight.

    Like PyG's ``NeighborSampler``, a seed's neighbours are the sources j of its incoming
    edges j -> i (message passing towards the seeds), drawn by the weight of those edges.

    Parameters
    ----------
    data : torch_geometric.data.Data
        The graph, on the device to sample on.
    num_neighbors : list of int
        Fanout per hop (``-1``: every edge).
    weight_attr : str, optional
        The edge attribute holding non-negative weights; ``None`` samples uniformly.
    replace : bool
        With replacement, or without (default, as PyG).
    generator : torch.Generator, optional

    Raises
    ------
    RuntimeError
        As :class:`torch_wrs.graph.CSRAliasTable` (bad weights), and for a seed outside the graph.

    Examples
    --------
    >>> sampler = WeightedNeighborSampler(data, [15, 10], weight_attr="edge_weight")
    >>> loader = NodeLoader(data, node_sampler=sampler, input_nodes=train_idx, batch_size=1024)
    """

    def __init__(self, data, num_neighbors: List[int], *, weight_attr: Optional[str] = None, replace: bool = False,
                 generator: Optional[torch.Generator] = None):
        device = data.edge_index.device
        colptr, row, perm = to_csc(data, device=device)
        weight = None
        if weight_attr is not None:
            weight = data[weight_attr]
            weight = weight[perm] if perm is not None else weight
        self.graph = CSRAliasTable(colptr, row, weight)
        self.perm = perm
        self.num_neighbors = list(num_neighbors)
        self.replace = replace
        self.generator = generator

    def sample_from_nodes(self, inputs: NodeSamplerInput) -> SamplerOutput:
        """One mini-batch: the multi-hop sample of ``inputs.node`` (what ``NodeLoader`` calls).

        Parameters
        ----------
        inputs : torch_geometric.sampler.NodeSamplerInput

        Returns
        -------
        torch_geometric.sampler.SamplerOutput
            ``node`` (seeds first), ``row`` -> ``col`` edges towards the seeds, ``edge`` (CSC
            positions; ``edge_permutation`` maps them back), and the per-hop counts.

        Raises
        ------
        RuntimeError
            For a seed outside the graph.

        Examples
        --------
        >>> out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(8)))
        """
        seeds = inputs.node.to(self.graph.device)
        row, col, node, edge, num_nodes, num_edges = self.graph.neighbor_sample(
            seeds, self.num_neighbors, replace=self.replace, generator=self.generator)
        # Sampled over columns (CSC): `row` holds the seeds' side, `col` the neighbours
        # (the sources of the edges), so the edges run col -> row.
        return SamplerOutput(node=node, row=col, col=row, edge=edge, num_sampled_nodes=num_nodes,
                             num_sampled_edges=num_edges, metadata=(inputs.input_id, inputs.time))

    def sample_from_edges(self, inputs, neg_sampling=None):
        raise NotImplementedError("WeightedNeighborSampler samples from nodes (NodeLoader); "
                                  "link loaders need PyG's NeighborSampler")

    @property
    def edge_permutation(self) -> Optional[torch.Tensor]:
        return self.perm


class NeighborLoader(NodeLoader):
    """PyG's ``NeighborLoader`` with torch_wrs's weighted sampler: the same arguments, with
    ``weight_attr`` sampling by edge weight on the graph's device.

    Parameters
    ----------
    data : torch_geometric.data.Data
        The graph (homogeneous), on the device to sample on.
    num_neighbors : list of int
        Fanout per hop.
    input_nodes : Tensor, optional
        The seeds to iterate over (all nodes when ``None``).
    weight_attr : str, optional
        The edge attribute of weights; ``None`` samples uniformly.
    replace : bool
        With replacement, or without (default).
    **kwargs
        ``NodeLoader``'s and ``torch.utils.data.DataLoader``'s (``batch_size``, ``shuffle``, ...).

    Raises
    ------
    RuntimeError
        As :class:`WeightedNeighborSampler`.

    Examples
    --------
    >>> loader = NeighborLoader(data, [15, 10], weight_attr="edge_weight", batch_size=1024, shuffle=True)
    >>> for batch in loader:
    ...     out = model(batch.x, batch.edge_index)[:batch.batch_size]
    """

    def __init__(self, data, num_neighbors: List[int], input_nodes=None, *, weight_attr: Optional[str] = None,
                 replace: bool = False, **kwargs):
        sampler = WeightedNeighborSampler(data, num_neighbors, weight_attr=weight_attr, replace=replace)
        super().__init__(data, node_sampler=sampler, input_nodes=input_nodes, **kwargs)
