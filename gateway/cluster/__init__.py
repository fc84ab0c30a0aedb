"""Scale-out: several replicas behind a load balancer, sharing state in Redis (`cluster:` in the config).

Imported only when the config has a `cluster:` block (redis-py and cryptography are then needed:
`pip install 'mcp-triad[cluster]'`). What is shared, and what each piece does while Redis is unreachable, is said
in each module: `buckets` (rate limits), `pins` (approved definitions), `approvals` (the console's approval
queue), `events` (reloads, list changes, resource updates), `sessions` (which replica owns a handshake-era
session), `replicas` (heartbeats, `/readyz`), `secret_box` (encryption of stored secrets, identity hashes), `vault`
(per-identity secrets).
"""

from gateway.cluster._cluster import Cluster, ClusterKeyMismatch
from gateway.cluster._events import Event
from gateway.cluster._link import RedisDown
from gateway.cluster._replicas import Heartbeat
from gateway.cluster._secret_box import SecretBox, SecretUnreadable
from gateway.cluster._vault import MAX_SECRET_BYTES, SecretTooLarge, Vault
from gateway.cluster._vault_tokens import vault_stores

__all__ = [
    "MAX_SECRET_BYTES",
    "Cluster",
    "ClusterKeyMismatch",
    "Event",
    "Heartbeat",
    "RedisDown",
    "SecretBox",
    "SecretTooLarge",
    "SecretUnreadable",
    "Vault",
    "vault_stores",
]
