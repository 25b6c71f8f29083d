"""``stockade demo``: the story of Stockade in one scripted session, on loopback only.

Modules: :mod:`~sdk.demo.run` (setup and entry point), :mod:`~sdk.demo.session` (the
scripted steps), :mod:`~sdk.demo.tracker_api` (the fake HTTPS tracker API, its CA and the
demo-only resolver and transport), :mod:`~sdk.demo.workspace` (builds, lock, secrets,
policy), :mod:`~sdk.demo.present` (output). ``hostile/`` is a plugin project shipped as
demo data.

Example::

    from sdk.demo import run_demo
    status = run_demo(ci=True, workdir=None)   # 0 when every step behaved as expected
"""

from __future__ import annotations

from sdk.demo.run import DEMO_TOKEN, run_demo

__all__ = ["DEMO_TOKEN", "run_demo"]
