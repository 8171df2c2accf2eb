"""What the tests share: the fake engine, the scripted OpenAI-compatible server, network helpers, reference
implementations and the pytest fixtures of the real model, S3 server, Prefect and the tiny GRPO model."""
