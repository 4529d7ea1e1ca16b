"""The chain, below every backend: the entry codec (codec), the RFC 6962 Merkle tree over the entries
(tree), and the rules every entry of a chain must keep (rules, checkpoints), which each backend's
verification applies to what it stores."""
