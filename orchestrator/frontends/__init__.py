"""Frontends: the wire protocols clients speak (OpenAI HTTP, gRPC), each mapping errors once."""
