"""Test oracles and helpers shared by the suite (not part of the shipped package)."""
