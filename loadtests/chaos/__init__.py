"""The chaos proxy: message-level faults between the Live layer and a Reasoner (docs/chaos.md)."""
