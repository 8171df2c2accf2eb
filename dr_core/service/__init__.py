"""The evaluator as a reward service (``dr serve``): the generator and verifier engines behind HTTP for any RL trainer.

A request goes through these stages, in this order; each module calls only the ones below it, never back up:

- route: ``app``, the FastAPI routes: bearer token, body size, JSON errors; a body goes to parse, then to intake.
- parse: ``requests``, the request bodies checked whole (a bad body is a 422 naming the field, before any work).
- intake: ``intake``, the ``Service``: replays a request id answered before, else queues a set or joins a group.
- queue: ``groups``, per-sample members (``/v1/rewards``, ``/get_reward``, ``/verify``) held until the group is whole.
- queue: ``batcher``, the queue and its workers: each set run alone on engines that batch continuously (default), or
  sets coalesced into one engine batch (``--batching coalesce``); each scored, answered, committed.
- score: ``scoring``, sets through the evaluator (one generation call per seed list, one verification call).
- answer: ``answers``, each request's answer from its scored set; after the worker, the OpenRLHF body (filled).
- commit: ``ledger``, the batch's lineage rows, then its ``requests`` rows (the commit record, holding the answers);
  replays by request id.

The answer is made before the commit because the commit record stores it (a retry is replayed from it); the ledger
stores it as given and makes none. Used by every stage: ``dr_core.config.service`` (what the service is told),
``errors`` (what a request can run into, with its HTTP status), ``metrics`` (Prometheus text). Outside the flow:
``server`` (uvicorn, ``dr serve``) and ``clients`` (TRL and verl reward functions that call a running service; they
import only ``answers.fill_unscorable`` of the service).

FastAPI, Starlette and uvicorn are imported here only (tests/unit/test_structure.py).
"""
