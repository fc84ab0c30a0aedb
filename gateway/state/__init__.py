"""State that outlives a request and may be shared by replicas: the approved definitions (pins), the name ledger,
and the interfaces (`Buckets`, `Pins`) whose embedded defaults live here and whose Redis versions are `gateway.cluster`.
"""

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
    "Buckets",
    "FilePins",
    "LocalBuckets",
    "NameLedger",
    "NameLedgerUnreadable",
    "PinStateUnreadable",
    "PinStatus",
    "PinStore",
    "Pins",
    "SharedState",
    "SharedStateUnavailable",
    "definition_hash",
    "pin_diff",
    "pin_match",
    "pinned_fields",
]
