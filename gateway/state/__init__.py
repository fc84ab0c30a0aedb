"""State that outlives a request and may be shared by replicas: the approved definitions (pins), the name ledger,
the console's approval queue, and the interfaces (`Buckets`, `Pins`, `Approvals`) whose embedded defaults live here
and whose Redis versions are `gateway.cluster`.
"""

from gateway.state._approvals import (
    MAX_WAITING,
    Answer,
    Approvals,
    LocalApprovals,
    QueueFull,
    Tick,
    Waiting,
    wait_for_answer,
)
from gateway.state._name_ledger import NameLedger, NameLedgerUnreadable
from gateway.state._pins import (
                                 HASHED_FIELDS,
                                 PinStateUnreadable,
                                 PinStatus,
                                 PinStore,
                                 definition_hash,
                                 pin_diff,
                                 pin_match,
                                 pinned_fields,
)
from gateway.state._shared import Buckets, FilePins, LocalBuckets, Pins, SharedState, SharedStateUnavailable

__all__ = [
    "HASHED_FIELDS",
    "MAX_WAITING",
    "Answer",
    "Approvals",
    "Buckets",
    "FilePins",
    "LocalApprovals",
    "LocalBuckets",
    "NameLedger",
    "NameLedgerUnreadable",
    "PinStateUnreadable",
    "PinStatus",
    "PinStore",
    "Pins",
    "QueueFull",
    "SharedState",
    "SharedStateUnavailable",
    "Tick",
    "Waiting",
    "definition_hash",
    "pin_diff",
    "pin_match",
    "pinned_fields",
    "wait_for_answer",
]
