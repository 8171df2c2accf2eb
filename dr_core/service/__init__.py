"""The evaluator as a reward service (``dr serve``): the generator and verifier engines behind HTTP for any RL trainer.

- ``settings``: what the service is told (limits, batching, groups, where lineage goes).
- ``requests``: the request bodies and their checks (a bad body is a 422 naming the field, before any work).
- ``scoring``: one batch of response sets through the evaluator (one generation call, one verification call) and
  the answers and lineage rows it gives.
- ``ledger``: what has been answered (by request id), persisted in the store, so retries are answered once.
- ``batcher``: the one worker thread that owns the engines and coalesces concurrent sets into engine batches.
- ``groups``: per-sample requests held until their group is complete (``/v1/rewards``, ``/get_reward``).
- ``metrics``: Prometheus text. ``app``: the FastAPI routes. ``server``: uvicorn. ``clients``: TRL and verl reward
  functions that call a running service.

FastAPI, Starlette and uvicorn are imported here only (tests/test_structure.py).
"""
