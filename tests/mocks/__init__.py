"""Fast mocks of provider APIs (Anthropic's Messages, Google's Gemini) on a real socket.

Each runs as its own process, `python -m tests.mocks.anthropic --port N` from the repository
root, and says where it listens once bound (`tests/e2e/conftest.py`'s `run_mock` starts them).
"""
