"""The call pipeline: one tool call from the envelope to the audit record, in reading order.

:meth:`host.Host.call` (in :mod:`host.call.host`) is the only way a tool runs. Its steps
(``docs/design.md`` §6), and the module that holds each:

======  ==========================================================  ===========================
step    what                                                        module
======  ==========================================================  ===========================
1       parse the envelope exactly; the principal is unexpired      :mod:`host.call.prepare`
2       exact registry lookup                                       :mod:`host.call.prepare`
3       policy before input; one fence for every decision           :mod:`host.call.prepare`
4       layered tool policy and session grants                      :mod:`host.call.prepare`
5       validate and canonicalize the input; the action digest      :mod:`host.call.prepare`
6       ready, or approval required with a preview                  :mod:`host.call.prepare`
7       rate limit                                                  :mod:`host.call.host`
8       pre-flight and stage secrets; limits; the egress session    :mod:`host.call.stage`
9       intent record for effects other than ``read``               :mod:`host.call.records`
10      fresh sandbox, MCP source or host tool; output checks       :mod:`host.call.host`
11      outcome record and the :class:`~host.types.CallResult`      :mod:`host.call.records`
======  ==========================================================  ===========================

Around the steps: :mod:`host.call.open` opens a lock (digests, signatures, rollback and
fork, compile) into a generation, and :mod:`host.call.reload` follows newer generations
a fleet accepts, swapping them between calls. The values a call carries are in
:mod:`host.types`; everything a step calls lives in the layers below this package
(``docs/architecture.md``).

This ``__init__`` imports nothing, so importing one step does not load the others.
"""
