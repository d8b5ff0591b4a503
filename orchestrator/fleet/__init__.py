"""The capacity model: what one GPT-OSS-120B replica sustains on each GPU generation."""
