"""Tensor-parallel decode: weights split across devices (one process, a list of queues) or across MPI ranks.

sharding  column-parallel (output rows) and row-parallel (whole K groups) splits of fp16 / W4 / W8 weights
local     ColumnParallelLinear, RowParallelLinear, ParallelMLP over a list of queues; local_queues(); reduce_sum()
mpi       the same MLP block over MPI ranks (mpi4py + Intel MPI), one device per rank, allreduce of the partials
"""
from .local import ColumnParallelLinear, ParallelMLP, RowParallelLinear, local_queues, reduce_sum
from .sharding import split, split_column_parallel, split_row_parallel

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "ParallelMLP", "local_queues", "reduce_sum", "split",
           "split_column_parallel", "split_row_parallel"]
