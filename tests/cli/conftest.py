"""The engine's tiny random Llama, for front-end runs."""

from tests.engine.conftest import tiny_llama_dir  # noqa: F401
