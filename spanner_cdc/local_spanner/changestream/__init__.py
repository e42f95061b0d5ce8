"""Change streams of the local Spanner server: the change log, partitions, policy and queries."""

from spanner_cdc.local_spanner.changestream.engine import ChangeStreamEngine
from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy

__all__ = ["ChangeStreamEngine", "PartitionPolicy"]
