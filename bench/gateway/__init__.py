"""The gateway bench: overspill's cost per request beside a mock, two plain passthroughs and the
LiteLLM proxy, all measured in one run on one machine (`make bench`, docs/benchmarks.md).

    .venv/bin/python -m bench.gateway [--quick] [--groups chat,chat-anthropic] [--target NAME]...
    .venv/bin/python -m bench.gateway --report var/bench/latest/results.json
"""
