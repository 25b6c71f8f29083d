"""Observability fixtures (tests/support/otel.py)."""

from __future__ import annotations

from tests.support.otel import otel

__all__ = ["otel"]
