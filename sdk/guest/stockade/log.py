"""Write to the call's log (the host caps it at the manifest's ``max_log_bytes``).

``log.info("got %d issues", n)`` formats like :mod:`logging`; a message that cannot be
formatted is logged with its arguments appended rather than raising.
"""

from __future__ import annotations

from stockade._bindings import host, types

__all__ = ["debug", "error", "info", "warn", "warning"]


def _format(message, args):
    text = str(message)
    if not args:
        return text
    try:
        return text % args
    except (TypeError, ValueError, KeyError):
        return text + " " + " ".join(repr(a) for a in args)


def debug(message, *args):
    """Log at level debug."""
    host.log(types.LogLevel.DEBUG, _format(message, args))


def info(message, *args):
    """Log at level info."""
    host.log(types.LogLevel.INFO, _format(message, args))


def warn(message, *args):
    """Log at level warn."""
    host.log(types.LogLevel.WARN, _format(message, args))


warning = warn


def error(message, *args):
    """Log at level error."""
    host.log(types.LogLevel.ERROR, _format(message, args))
