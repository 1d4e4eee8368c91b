"""Errors shared by the layers that check what a user wrote."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config that the schema accepts but that does not hold together (or that holds a credential)."""
