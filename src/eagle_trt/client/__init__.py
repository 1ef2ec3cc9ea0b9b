"""Clients of a served bundle (tritonclient / the generate extension): see triton.py."""

from eagle_trt.client.triton import GenerationReply, generate, print_remote_generation, request_body

__all__ = ["GenerationReply", "generate", "print_remote_generation", "request_body"]
