"""The OpenAI-compatible HTTP frontend: request parsing for routing, API keys, the aiohttp app and
the multi-process server."""
